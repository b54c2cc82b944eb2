/* NVML stand-in: the container's devices only, the container's memory view.
 *
 * Handles are the real library's; we only choose which ones a program can get
 * and in which order: the quota file's, mapped by UUID (so an index inside the
 * container is the quota index, whatever the host numbering). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include "nvml_abi.h"
#include "nvml_table.h"
#include "region.h"
#include "vgpu.h"

#define REAL(name) ((__typeof__(&name))vgpu_table[VGPU_IDX_##name])
#define REALT(type, name) ((type)vgpu_table[VGPU_IDX_##name])
#define E VGPU_EXPORT
E nvmlReturn_t nvmlInit(void);
E nvmlReturn_t nvmlInit_v2(void);
E nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
E nvmlReturn_t nvmlDeviceGetCount(unsigned int *n);
E nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n);
E nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d);
E nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d);
E nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d);
E nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus, nvmlDevice_t *d);
E nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *d);
E nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *d);
E nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i);
E nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m);
E nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m);
E nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v1_t *p);
E nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p);
E nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p);
#undef E

#define READY()                                                                                                        \
    do {                                                                                                               \
        if (!vgpu_ready())                                                                                             \
            return NVML_ERROR_UNINITIALIZED;                                                                           \
    } while (0)

/* container index -> (quota index, real handle); published whole under mu */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int nvis;
static int vis_qi[VGPU_MAX_DEVICES];
static nvmlDevice_t vis_h[VGPU_MAX_DEVICES];

static void build_map(void)
{
    int n = 0, qi[VGPU_MAX_DEVICES];
    nvmlDevice_t h[VGPU_MAX_DEVICES];

    /* NVML calls outside the lock; only the publication is locked */
    for (int i = 0; i < vgpu_q.ndev; i++) {
        nvmlDevice_t d;
        if (REAL(nvmlDeviceGetHandleByUUID)(vgpu_q.dev[i].uuid, &d) != NVML_SUCCESS) {
            vgpu_log(VGPU_LOG_WARN, "device %d (%s) of the quota file is not on this machine", i, vgpu_q.dev[i].uuid);
            continue;
        }
        qi[n] = i;
        h[n++] = d;
    }
    pthread_mutex_lock(&mu);
    memcpy(vis_qi, qi, sizeof qi);
    memcpy(vis_h, h, sizeof h);
    nvis = n;
    pthread_mutex_unlock(&mu);
}

/* quota index of a real handle, -1 when not the container's; *cidx its container index */
static int handle_qi(nvmlDevice_t d, unsigned int *cidx)
{
    int qi = -1;

    pthread_mutex_lock(&mu);
    for (int i = 0; i < nvis; i++)
        if (vis_h[i] == d) {
            qi = vis_qi[i];
            if (cidx)
                *cidx = (unsigned int)i;
        }
    pthread_mutex_unlock(&mu);
    return qi;
}

#define INIT_WRAPPER(call)                                                                                             \
    do {                                                                                                               \
        nvmlReturn_t r_;                                                                                               \
        READY();                                                                                                       \
        r_ = (call);                                                                                                   \
        if (r_ == NVML_SUCCESS)                                                                                        \
            build_map();                                                                                               \
        return r_;                                                                                                     \
    } while (0)

nvmlReturn_t nvmlInit(void) { INIT_WRAPPER(REAL(nvmlInit)()); }
nvmlReturn_t nvmlInit_v2(void) { INIT_WRAPPER(REAL(nvmlInit_v2)()); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { INIT_WRAPPER(REAL(nvmlInitWithFlags)(flags)); }

static nvmlReturn_t get_count(nvmlReturn_t (*real)(unsigned int *), unsigned int *n)
{
    unsigned int all;
    nvmlReturn_t r;

    READY();
    if (!n)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = real(&all); /* keeps the real library's answer when not initialised */
    if (r != NVML_SUCCESS)
        return r;
    pthread_mutex_lock(&mu);
    *n = (unsigned int)nvis;
    pthread_mutex_unlock(&mu);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return get_count(REAL(nvmlDeviceGetCount), n); }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { return get_count(REAL(nvmlDeviceGetCount_v2), n); }

static nvmlReturn_t by_index(unsigned int i, nvmlDevice_t *d)
{
    unsigned int all;
    nvmlReturn_t r;

    READY();
    if (!d)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = REAL(nvmlDeviceGetCount_v2)(&all)) != NVML_SUCCESS)
        return r;
    pthread_mutex_lock(&mu);
    r = i < (unsigned int)nvis ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *d = vis_h[i];
    pthread_mutex_unlock(&mu);
    return r;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { return by_index(i, d); }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { return by_index(i, d); }

/* other lookups: the real answer, if it is one of the container's devices */
#define LOOKUP(call, d)                                                                                                \
    do {                                                                                                               \
        nvmlReturn_t r_;                                                                                               \
        READY();                                                                                                       \
        r_ = (call);                                                                                                   \
        if (r_ == NVML_SUCCESS && d && handle_qi(*d, NULL) < 0)                                                        \
            return NVML_ERROR_NOT_FOUND;                                                                               \
        return r_;                                                                                                     \
    } while (0)

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *u, nvmlDevice_t *d) { LOOKUP(REAL(nvmlDeviceGetHandleByUUID)(u, d), d); }
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *b, nvmlDevice_t *d)
{
    LOOKUP(REAL(nvmlDeviceGetHandleByPciBusId)(b, d), d);
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *b, nvmlDevice_t *d)
{
    LOOKUP(REAL(nvmlDeviceGetHandleByPciBusId_v2)(b, d), d);
}
nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *s, nvmlDevice_t *d) { LOOKUP(REAL(nvmlDeviceGetHandleBySerial)(s, d), d); }

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i)
{
    unsigned int tmp;
    nvmlReturn_t r;

    READY();
    if (!i)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = REAL(nvmlDeviceGetIndex)(d, &tmp)) != NVML_SUCCESS)
        return r;
    return handle_qi(d, i) < 0 ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

/* total = limit (never above the card), used = the container's usage,
 * free = what is left of the limit, never above the card's real free */
static void view(int qi, uint64_t rtotal, uint64_t rfree, unsigned long long *total, unsigned long long *freep,
                 unsigned long long *used)
{
    uint64_t lim = vgpu_q.dev[qi].memory < rtotal ? vgpu_q.dev[qi].memory : rtotal;
    uint64_t u = vgpu_region_usage(qi), f = vgpu_sub_clamp(lim, u);

    *total = lim;
    *freep = f < rfree ? f : rfree;
    *used = u < lim ? u : lim;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    nvmlReturn_t r;
    int qi;

    READY();
    if ((qi = handle_qi(d, NULL)) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = REAL(nvmlDeviceGetMemoryInfo)(d, m);
    if (r == NVML_SUCCESS && vgpu_q.dev[qi].has_memory)
        view(qi, m->total, m->free, &m->total, &m->free, &m->used);
    return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    nvmlReturn_t r;
    int qi;

    READY();
    if ((qi = handle_qi(d, NULL)) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = REAL(nvmlDeviceGetMemoryInfo_v2)(d, m);
    if (r == NVML_SUCCESS && vgpu_q.dev[qi].has_memory) {
        view(qi, m->total, m->free, &m->total, &m->free, &m->used);
        m->reserved = 0; /* the driver's reservation is outside the container's limit */
    }
    return r;
}

/* Process lists: the container's processes only. The one thing we know of
 * them is the PID each one recorded in its slot, in its own namespace; a
 * driver that reports host PIDs from inside a PID namespace shows none, which
 * is the safe side (never another tenant's processes). */
static int in_container(unsigned int pid, const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if ((unsigned int)pids[i] == pid)
            return 1;
    return 0;
}

typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, void *);

static nvmlReturn_t procs(procs_fn real, size_t esz, nvmlDevice_t d, unsigned int *count, void *out)
{
    pid_t pids[VGPU_REGION_SLOTS];
    unsigned int n = 0, kept = 0;
    char *buf = NULL;
    int np;
    nvmlReturn_t r;

    READY();
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (handle_qi(d, NULL) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int tries = 0; tries < 4; tries++) {
        r = real(d, &n, buf);
        if (r == NVML_SUCCESS)
            break;
        free(buf);
        buf = NULL;
        if (r != NVML_ERROR_INSUFFICIENT_SIZE)
            return r;
        n += 8; /* the list can grow between the calls */
        if (!(buf = calloc(n, esz)))
            return NVML_ERROR_MEMORY;
    }
    if (r != NVML_SUCCESS) {
        free(buf);
        return r;
    }
    np = vgpu_region_pids(pids, VGPU_REGION_SLOTS);
    for (unsigned int i = 0; i < n && buf; i++) {
        unsigned int pid;
        memcpy(&pid, buf + i * esz, sizeof pid);
        if (!in_container(pid, pids, np))
            continue;
        if (out && kept < *count)
            memcpy((char *)out + kept * esz, buf + i * esz, esz);
        kept++;
    }
    free(buf);
    r = kept > *count ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    *count = kept;
    return r;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v1_t *p)
{
    return procs((procs_fn)REAL(nvmlDeviceGetComputeRunningProcesses), sizeof *p, d, n, p);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p)
{
    return procs((procs_fn)REAL(nvmlDeviceGetComputeRunningProcesses_v2), sizeof *p, d, n, p);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p)
{
    return procs((procs_fn)REAL(nvmlDeviceGetComputeRunningProcesses_v3), sizeof *p, d, n, p);
}
