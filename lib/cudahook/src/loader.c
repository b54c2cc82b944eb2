/* Loader: resolves the whole table of real entry points once, lazily.
 *
 * Compiled once per stand-in: -DVGPU_CUDA or -DVGPU_NVML picks the driver
 * library, the error values and the generated table header. Nothing happens
 * at load time, so a process that never calls the driver never reads the
 * quota file nor loads the real library. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "region.h"
#include "vgpu.h"

#if defined(VGPU_CUDA)
#include "cuda_table.h"
#define DRIVER_PATH(q) ((q)->driver_cuda)
#define ERR_NOTINIT    3   /* CUDA_ERROR_NOT_INITIALIZED */
#define ERR_NOTFOUND   500 /* CUDA_ERROR_NOT_FOUND */
#elif defined(VGPU_NVML)
#include "nvml_table.h"
#define DRIVER_PATH(q) ((q)->driver_nvml)
#define ERR_NOTINIT    1  /* NVML_ERROR_UNINITIALIZED */
#define ERR_NOTFOUND   13 /* NVML_ERROR_FUNCTION_NOT_FOUND */
#else
#error "define VGPU_CUDA or VGPU_NVML"
#endif

struct vgpu_quota vgpu_q;
void *vgpu_real_handle;
static int closed;
#define AFTER_MAX 4
static void (*after[AFTER_MAX])(void);
static int nafter;
static void (*before_load)(void);

void vgpu_after_resolve(void (*fn)(void))
{
    if (nafter < AFTER_MAX)
        after[nafter++] = fn;
}

void vgpu_before_load(void (*fn)(void)) { before_load = fn; }
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Every driver function returns its status as an int in %eax, whatever its
 * arguments: these stand in for any of them. */
static int notinit_stub(void) { return ERR_NOTINIT; }
int vgpu_notfound_stub(void) { return ERR_NOTFOUND; }

static void fail_closed(void)
{
    __atomic_store_n(&closed, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < VGPU_NSYMS; i++)
        __atomic_store_n(&vgpu_table[i], (void *)notinit_stub, __ATOMIC_RELEASE);
}

static void resolve(void)
{
    char path[VGPU_PATH_MAX], err[512];
    void *h;

    if (vgpu_quota_load(&vgpu_q, path, sizeof path, err, sizeof err) != 0) {
        vgpu_log(VGPU_LOG_ERROR, "cannot read quota file %s: %s; refusing GPU access", path, err);
        fail_closed();
        return;
    }
    vgpu_log_level = vgpu_q.log_level;
    if (vgpu_region_open(vgpu_q.shared_dir, err, sizeof err) != 0) {
        vgpu_log(VGPU_LOG_ERROR, "cannot use the shared accounting in %s: %s; refusing GPU access", vgpu_q.shared_dir,
                 err);
        fail_closed();
        return;
    }
    if (before_load)
        before_load(); /* the quota is read, nothing of the driver is loaded yet */
    /* DEEPBIND: the driver's calls to its own functions stay inside it;
     * LOCAL: its symbols never satisfy anyone else's lookups (ours do). */
    h = dlopen(DRIVER_PATH(&vgpu_q), RTLD_LAZY | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
        vgpu_log(VGPU_LOG_ERROR, "cannot load %s: %s; refusing GPU access", DRIVER_PATH(&vgpu_q), dlerror());
        fail_closed();
        return;
    }
    vgpu_real_handle = h;
    for (int i = 0; i < VGPU_NSYMS; i++) {
        void *p = dlsym(h, vgpu_names[i]);
        if (!p)
            VGPU_DEBUG("%s: not in %s", vgpu_names[i], DRIVER_PATH(&vgpu_q));
        __atomic_store_n(&vgpu_table[i], p ? p : (void *)vgpu_notfound_stub, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < nafter; i++)
        after[i](); /* after the table: they pick entries of it */
    VGPU_DEBUG("resolved %d entry points of %s", VGPU_NSYMS, DRIVER_PATH(&vgpu_q));
}

void vgpu_close(void)
{
    pthread_once(&once, resolve);
    fail_closed();
}

/* called by vgpu_lazy_common (lazy.S) with the caller's registers saved */
void vgpu_resolve_lazy(void);
void vgpu_resolve_lazy(void) { pthread_once(&once, resolve); }

int vgpu_ready(void)
{
    pthread_once(&once, resolve);
    return !__atomic_load_n(&closed, __ATOMIC_ACQUIRE);
}
