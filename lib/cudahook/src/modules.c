/* Module and library data (docs/memory-routes.md).
 *
 * A module's __device__ variables and code are device memory of its context.
 * cuModuleLoad* loads them at the call (the driver API never loads data
 * lazily): we measure the load and, when it crosses the limit, unload the
 * module again and fail the call with OUT_OF_MEMORY. A library
 * (cuLibraryLoadData, how cudart 12+ registers code) is loaded into a context
 * lazily, at its first use there; we force that load where it can be refused,
 * at the first cuLibraryGetKernel (with a context current: cudart takes the
 * handle it launches so) / cuKernelGetFunction / cuLibraryGetGlobal /
 * cuLibraryGetModule in a context: the size learned at the library's first
 * load is reserved before the load is forced; a first load anywhere that
 * crosses the limit is undone by unloading the library (no other context has
 * it), and its handle answers OUT_OF_MEMORY from then on. A function whose frame exceeds the stack limit makes the
 * driver grow the stack at launch: we grow it first (limits.c) when the
 * function handle is handed out. No lock is held across a driver call. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include "account.h"
#include "cuda_hooks.h"
#include "probe.h"
#include "ptrtab.h"
#include "region.h"
#include "routes.h"

/* one library loaded into one context */
struct libload {
    CUlibrary lib;
    CUcontext ctx;
    int qi;
    uint64_t size;
};
/* what a library's data measured at its first load (the same in every context) */
struct libsize {
    CUlibrary lib;
    uint64_t size;
    int gone; /* its first load crossed the limit: we unloaded it; every use is OUT_OF_MEMORY */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* the tables only */
/* bumped whenever a load record goes: a thread's last launch check is stale */
static uint64_t loads_gen;

unsigned char vgpu_kernel_map[VGPU_KERNEL_MAP];
int vgpu_kernel_none = 1;
static struct libload *loads;
static size_t nloads, capl;
static struct libsize *sizes;
static size_t nsizes, caps;

static struct libload *find_load_locked(CUlibrary lib, CUcontext ctx)
{
    for (size_t i = 0; i < nloads; i++)
        if (loads[i].lib == lib && loads[i].ctx == ctx)
            return &loads[i];
    return NULL;
}

static struct libsize *size_of_locked(CUlibrary lib)
{
    for (size_t i = 0; i < nsizes; i++)
        if (sizes[i].lib == lib)
            return &sizes[i];
    return NULL;
}

static int learned_locked(CUlibrary lib, uint64_t *size)
{
    struct libsize *z = size_of_locked(lib);
    if (z)
        *size = z->size;
    return z != NULL;
}

static int gone(CUlibrary lib)
{
    struct libsize *z;
    int g;
    pthread_mutex_lock(&mu);
    z = size_of_locked(lib);
    g = z && z->gone;
    pthread_mutex_unlock(&mu);
    return g;
}

static void learn_locked(CUlibrary lib, uint64_t size, int is_gone)
{
    struct libsize *z = size_of_locked(lib);
    if (z) {
        z->gone |= is_gone;
        return;
    }
    if (nsizes == caps) {
        size_t n = caps ? caps * 2 : 16;
        struct libsize *p = realloc(sizes, n * sizeof *p);
        if (!p)
            return;
        sizes = p;
        caps = n;
    }
    sizes[nsizes++] = (struct libsize){lib, size, is_gone};
}

/* 0, or -1 when (lib, ctx) is already recorded (nothing changed) or no memory */
static int add_load_locked(CUlibrary lib, CUcontext ctx, int qi, uint64_t size)
{
    if (find_load_locked(lib, ctx))
        return -1;
    if (nloads == capl) {
        size_t n = capl ? capl * 2 : 16;
        struct libload *p = realloc(loads, n * sizeof *p);
        if (!p)
            return -1;
        loads = p;
        capl = n;
    }
    loads[nloads++] = (struct libload){lib, ctx, qi, size};
    return 0;
}

/* drops the loads matching lib (or any when NULL) and ctx (or any when NULL),
 * giving back what they counted */
static void drop_loads(CUlibrary lib, CUcontext ctx)
{
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nloads;) {
        if ((!lib || loads[i].lib == lib) && (!ctx || loads[i].ctx == ctx)) {
            vgpu_region_release(loads[i].qi, loads[i].size);
            loads[i] = loads[--nloads];
            __atomic_add_fetch(&loads_gen, 1, __ATOMIC_RELEASE);
        } else {
            i++;
        }
    }
    if (lib)
        for (size_t i = 0; i < nsizes; i++)
            if (sizes[i].lib == lib) {
                sizes[i] = sizes[--nsizes];
                break;
            }
    pthread_mutex_unlock(&mu);
}

/* Makes sure lib's data is loaded, and counted, in the current context: the
 * load is forced through kernel k (cuKernelGetFunction: that kernel and the
 * library's data, as the launch would) or, without one, cuLibraryGetModule.
 * CUDA_SUCCESS (also when no context is current: the driver loads nothing
 * then), OUT_OF_MEMORY when the load crosses the limit (refused before the
 * load when its size is known), or the driver's error. */
static CUresult lib_ensure(CUlibrary lib, CUkernel k)
{
    CUcontext c = NULL;
    CUmodule m;
    CUfunction f;
    uint64_t known = 0, cost;
    int has_size, qi;
    struct vgpu_probe before;
    CUresult r;

    if (gone(lib))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (REALT(vgpu_ctx_get_current_t, cuCtxGetCurrent)(&c) != CUDA_SUCCESS || !c)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&mu);
    if (find_load_locked(lib, c)) {
        pthread_mutex_unlock(&mu);
        return CUDA_SUCCESS;
    }
    has_size = learned_locked(lib, &known);
    pthread_mutex_unlock(&mu);
    if ((r = vgpu_current_qi(&qi)) != CUDA_SUCCESS)
        return r;
    if (has_size && vgpu_mem_reserve(qi, known) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    vgpu_probe_take(qi, &before);
    r = k ? REAL(cuKernelGetFunction)(&f, k) : REAL(cuLibraryGetModule)(&m, lib);
    if (r != CUDA_SUCCESS) {
        if (has_size)
            vgpu_mem_unreserve(qi, known);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? r : CUDA_SUCCESS; /* the caller's own call reports the rest */
    }
    cost = vgpu_probe_cost(qi, &before);
    if (has_size) {
        if (cost > known)
            vgpu_region_add(qi, cost - known); /* it is held already */
        else
            vgpu_mem_unreserve(qi, known - cost);
    } else if (vgpu_region_reserve(qi, cost, vgpu_limit_of(qi)) != 0) {
        /* its first load anywhere crossed the limit: no other context uses it,
         * so unloading it undoes the load; the handle stays valid for the
         * program (every use OUT_OF_MEMORY, unload succeeds) */
        REAL(cuLibraryUnload)(lib);
        pthread_mutex_lock(&mu);
        learn_locked(lib, cost, 1);
        pthread_mutex_unlock(&mu);
        vgpu_log(VGPU_LOG_INFO, "device %d: library of %llu bytes refused: container uses %llu of %llu", qi,
                 (unsigned long long)cost, (unsigned long long)vgpu_region_usage(qi),
                 (unsigned long long)vgpu_limit_of(qi));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&mu);
    learn_locked(lib, cost, 0);
    if (add_load_locked(lib, c, qi, cost) != 0)
        vgpu_region_release(qi, cost); /* another thread counted it */
    pthread_mutex_unlock(&mu);
    VGPU_DEBUG("library %p in context %p: %llu bytes", (void *)lib, (void *)c, (unsigned long long)cost);
    return r;
}

/* grows the stack for f's frame, counted (limits.c) */
static CUresult fit_frame(CUfunction f)
{
    int local = 0;

    if (REALT(cuFuncGetAttribute_t, cuFuncGetAttribute)(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f) !=
            CUDA_SUCCESS ||
        local <= 0)
        return CUDA_SUCCESS;
    return vgpu_stack_fit((size_t)local);
}

/* ---- libraries ---- */

/* 1 when CUDA_MODULE_LOADING=EAGER: the driver loads a library into the
 * current context at cuLibraryLoadData */
static int eager(void)
{
    static int mode; /* 0 unknown, 1 eager, 2 lazy (CUmoduleLoadingMode) */
    int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);

    if (!m) {
        if (REALT(cuModuleGetLoadingMode_t, cuModuleGetLoadingMode)(&m) != CUDA_SUCCESS)
            m = 2;
        __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
    }
    return m == 1;
}

/* With lazy loading (the default) a library is loaded into a context at its
 * first use there, where lib_ensure forces and counts it (forcing every library
 * into the current context at its load would undo lazy loading: cudart
 * registers every fatbin of a program as a library). With eager loading the
 * load itself takes the memory: measured around it, and undone when it crosses. */
#define LIB_LOAD(lib, call)                                                                                            \
    do {                                                                                                               \
        CUcontext c_ = NULL;                                                                                           \
        struct vgpu_probe before_;                                                                                     \
        int qi_ = -1;                                                                                                  \
        uint64_t cost_;                                                                                                \
        CUresult r_;                                                                                                   \
        if (!vgpu_ready())                                                                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                                                         \
        if (eager() && REALT(vgpu_ctx_get_current_t, cuCtxGetCurrent)(&c_) == CUDA_SUCCESS && c_ &&                    \
            vgpu_current_qi(&qi_) == CUDA_SUCCESS)                                                                     \
            vgpu_probe_take(qi_, &before_);                                                                            \
        else                                                                                                           \
            qi_ = -1;                                                                                                  \
        if ((r_ = (call)) != CUDA_SUCCESS || !(lib))                                                                   \
            return r_;                                                                                                 \
        drop_loads(*(lib), NULL); /* a new library: what we knew of an old one at this address is stale */             \
        if (qi_ < 0)                                                                                                   \
            return r_;                                                                                                 \
        cost_ = vgpu_probe_cost(qi_, &before_);                                                                        \
        if (vgpu_region_reserve(qi_, cost_, vgpu_limit_of(qi_)) != 0) {                                                \
            REAL(cuLibraryUnload)(*(lib));                                                                             \
            *(lib) = NULL;                                                                                             \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                           \
        }                                                                                                              \
        pthread_mutex_lock(&mu);                                                                                       \
        learn_locked(*(lib), cost_, 0);                                                                                \
        if (add_load_locked(*(lib), c_, qi_, cost_) != 0)                                                              \
            vgpu_region_release(qi_, cost_);                                                                           \
        pthread_mutex_unlock(&mu);                                                                                     \
        return r_;                                                                                                     \
    } while (0)

CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned int njo,
                           CUlibraryOption *lo, void **lv, unsigned int nlo)
{
    LIB_LOAD(lib, REAL(cuLibraryLoadData)(lib, code, jo, jv, njo, lo, lv, nlo));
}

CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *fname, CUjit_option *jo, void **jv, unsigned int njo,
                               CUlibraryOption *lo, void **lv, unsigned int nlo)
{
    LIB_LOAD(lib, REAL(cuLibraryLoadFromFile)(lib, fname, jo, jv, njo, lo, lv, nlo));
}

CUresult cuLibraryUnload(CUlibrary lib)
{
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (gone(lib)) {
        drop_loads(lib, NULL); /* we unloaded it when its load was refused */
        return CUDA_SUCCESS;
    }
    r = REAL(cuLibraryUnload)(lib);
    if (r == CUDA_SUCCESS)
        drop_loads(lib, NULL);
    return r;
}

CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
    CUresult r;
    CUfunction f;
    CUcontext c = NULL;
    struct vgpu_rec rec = {0, 0, 0};

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (gone(lib))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = REAL(cuLibraryGetKernel)(k, lib, name)) != CUDA_SUCCESS)
        return r;
    rec.aux = (uint64_t)(uintptr_t)lib;
    vgpu_ptr_insert(VGPU_K_KERNEL, (uint64_t)(uintptr_t)*k, &rec); /* present already: same library */
    __atomic_store_n(&vgpu_kernel_map[((uintptr_t)*k >> 4) & (VGPU_KERNEL_MAP - 1)], 1, __ATOMIC_RELEASE);
    __atomic_store_n(&vgpu_kernel_none, 0, __ATOMIC_RELEASE);
    /* cudart launches this handle in the current context: load it there now,
     * and make room for its frame, where both can be refused */
    if (REALT(vgpu_ctx_get_current_t, cuCtxGetCurrent)(&c) != CUDA_SUCCESS || !c)
        return r;
    if ((r = lib_ensure(lib, *k)) != CUDA_SUCCESS)
        return r;
    if (REAL(cuKernelGetFunction)(&f, *k) == CUDA_SUCCESS)
        return fit_frame(f);
    return CUDA_SUCCESS;
}

CUresult cuKernelGetFunction(CUfunction *f, CUkernel k)
{
    struct vgpu_rec rec;
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (vgpu_ptr_get(VGPU_K_KERNEL, (uint64_t)(uintptr_t)k, &rec) == 0 &&
        (r = lib_ensure((CUlibrary)(uintptr_t)rec.aux, k)) != CUDA_SUCCESS)
        return r;
    if ((r = REAL(cuKernelGetFunction)(f, k)) != CUDA_SUCCESS)
        return r;
    return fit_frame(*f);
}

/* the (kernel, context) a thread last found ready to launch, at loads_gen.
 * Thread-specific data, not __thread: TLS would make the stand-in need the
 * dynamic loader itself (__tls_get_addr in ld-linux), a dependency its
 * NEEDED list keeps out (TestGlibcVersionsAtMost2_17). */
struct last_fit {
    CUfunction f;
    CUcontext c;
    uint64_t gen;
};
static pthread_key_t last_key;
static pthread_once_t last_once = PTHREAD_ONCE_INIT;
static int last_ok;

static void last_init(void) { last_ok = pthread_key_create(&last_key, free) == 0; }

static struct last_fit *last_fit(void)
{
    struct last_fit *l;

    pthread_once(&last_once, last_init);
    if (!last_ok)
        return NULL;
    if (!(l = pthread_getspecific(last_key)) && (l = calloc(1, sizeof *l)) && pthread_setspecific(last_key, l) != 0) {
        free(l);
        l = NULL;
    }
    return l;
}

CUresult vgpu_kernel_launch_fit(CUfunction f)
{
    struct vgpu_rec rec;
    CUcontext c = NULL;
    CUfunction fn;
    CUkernel k = (CUkernel)(void *)f;
    uint64_t gen = __atomic_load_n(&loads_gen, __ATOMIC_ACQUIRE);
    struct last_fit *last = last_fit(); /* NULL: no memory; check every time */
    CUresult r;

    if (REALT(vgpu_ctx_get_current_t, cuCtxGetCurrent)(&c) != CUDA_SUCCESS || !c)
        return CUDA_SUCCESS; /* the driver refuses the launch */
    if (last && last->f == f && last->c == c && last->gen == gen)
        return CUDA_SUCCESS; /* the usual case: the same kernel again */
    if (vgpu_ptr_get(VGPU_K_KERNEL, (uint64_t)(uintptr_t)f, &rec) != 0)
        return CUDA_SUCCESS; /* a function handle that shares a byte of the map */
    if ((r = lib_ensure((CUlibrary)(uintptr_t)rec.aux, k)) != CUDA_SUCCESS)
        return r;
    if (REAL(cuKernelGetFunction)(&fn, k) == CUDA_SUCCESS && (r = fit_frame(fn)) != CUDA_SUCCESS)
        return r;
    if (last)
        *last = (struct last_fit){f, c, gen};
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name)
{
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if ((r = lib_ensure(lib, NULL)) != CUDA_SUCCESS)
        return r;
    return REAL(cuLibraryGetGlobal)(dptr, bytes, lib, name);
}

CUresult cuLibraryGetModule(CUmodule *m, CUlibrary lib)
{
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if ((r = lib_ensure(lib, NULL)) != CUDA_SUCCESS)
        return r;
    return REAL(cuLibraryGetModule)(m, lib);
}

/* ---- modules: data at the load, in the current context ---- */

#define MODULE_LOAD(pm, call)                                                                                          \
    do {                                                                                                               \
        int qi_;                                                                                                       \
        uint64_t cost_;                                                                                                \
        struct vgpu_probe before_;                                                                                     \
        CUcontext c_ = NULL;                                                                                           \
        CUresult r_;                                                                                                   \
        if (!vgpu_ready())                                                                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                                                         \
        if ((r_ = vgpu_current_qi(&qi_)) != CUDA_SUCCESS)                                                              \
            return r_; /* no context (the driver's answer), or a device not ours: no memory from us */                 \
        REALT(vgpu_ctx_get_current_t, cuCtxGetCurrent)(&c_);                                                           \
        vgpu_probe_take(qi_, &before_);                                                                                \
        if ((r_ = (call)) != CUDA_SUCCESS)                                                                             \
            return r_;                                                                                                 \
        cost_ = vgpu_probe_cost(qi_, &before_);                                                                        \
        if (vgpu_region_reserve(qi_, cost_, vgpu_limit_of(qi_)) != 0) {                                                \
            REAL(cuModuleUnload)(*(pm));                                                                               \
            *(pm) = NULL;                                                                                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                           \
        }                                                                                                              \
        vgpu_mem_commit(VGPU_K_MODULE, (uint64_t)(uintptr_t) * (pm), qi_, cost_, (uint64_t)(uintptr_t)c_);             \
        return r_;                                                                                                     \
    } while (0)

CUresult cuModuleLoad(CUmodule *m, const char *fname) { MODULE_LOAD(m, REAL(cuModuleLoad)(m, fname)); }
CUresult cuModuleLoadData(CUmodule *m, const void *image) { MODULE_LOAD(m, REAL(cuModuleLoadData)(m, image)); }
CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v)
{
    MODULE_LOAD(m, REAL(cuModuleLoadDataEx)(m, image, n, o, v));
}
CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatCubin)
{
    MODULE_LOAD(m, REAL(cuModuleLoadFatBinary)(m, fatCubin));
}

CUresult cuModuleUnload(CUmodule m)
{
    struct vgpu_rec rec;
    int had;
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    had = vgpu_ptr_take(VGPU_K_MODULE, (uint64_t)(uintptr_t)m, &rec) == 0;
    r = REAL(cuModuleUnload)(m);
    if (had) {
        if (r == CUDA_SUCCESS)
            vgpu_region_release(rec.dev, rec.size);
        else
            vgpu_ptr_insert(VGPU_K_MODULE, (uint64_t)(uintptr_t)m, &rec);
    }
    return r;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if ((r = REAL(cuModuleGetFunction)(f, m, name)) != CUDA_SUCCESS)
        return r;
    return fit_frame(*f);
}

/* a context went: its modules and library loads went with it */
static CUcontext gone_ctx; /* under gone_mu, for the callback */
static pthread_mutex_t gone_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t gone_keys[256];
static int ngone;

static void collect_module(uint64_t key, const struct vgpu_rec *r)
{
    if (r->aux == (uint64_t)(uintptr_t)gone_ctx && ngone < 256)
        gone_keys[ngone++] = key;
}

void vgpu_modules_ctx_gone(CUcontext ctx)
{
    drop_loads(NULL, ctx);
    pthread_mutex_lock(&gone_mu);
    do {
        gone_ctx = ctx;
        ngone = 0;
        vgpu_ptr_each(VGPU_K_MODULE, collect_module);
        for (int i = 0; i < ngone; i++)
            vgpu_mem_forget(VGPU_K_MODULE, gone_keys[i]);
    } while (ngone == 256);
    pthread_mutex_unlock(&gone_mu);
}
