/* NVML stand-in: the container's devices only, the container's memory view.
 *
 * Handles are the real library's; we only choose which ones a program can get
 * and in which order: the quota file's, mapped by UUID (so an index inside the
 * container is the quota index, whatever the host numbering). */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include "nvml_abi.h"
#include "nvml_table.h"
#include "pidmap.h"
#include "region.h"
#include "vgpu.h"

#define REAL(name)        ((__typeof__(&name))vgpu_table[VGPU_IDX_##name])
#define REALT(type, name) ((type)vgpu_table[VGPU_IDX_##name])
#define E                 VGPU_EXPORT
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
E nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v1_t *p);
E nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p);
E nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p);
E nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v1_t *p);
E nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p);
E nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p);
E nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *u, unsigned int *count,
                                               unsigned long long last);
E nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t d, nvmlProcessDetailList_t *pl);
E nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t d, nvmlSetMemoryLimits_v1_t *l);
E nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t d, nvmlGetMemoryLimits_v1_t *l);
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

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *u, nvmlDevice_t *d)
{
    LOOKUP(REAL(nvmlDeviceGetHandleByUUID)(u, d), d);
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *b, nvmlDevice_t *d)
{
    LOOKUP(REAL(nvmlDeviceGetHandleByPciBusId)(b, d), d);
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *b, nvmlDevice_t *d)
{
    LOOKUP(REAL(nvmlDeviceGetHandleByPciBusId_v2)(b, d), d);
}
nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *s, nvmlDevice_t *d)
{
    LOOKUP(REAL(nvmlDeviceGetHandleBySerial)(s, d), d);
}

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

/* Process lists: the container's processes only, under the PIDs it knows.
 * The driver reports host PIDs. Whom to show:
 * - the host's map (host/pids next to the shared directory) is there: the
 *   host PIDs it lists, reported as the container's PIDs;
 * - no map, and we are in the host's PID namespace (`vgpu exec`): the PIDs
 *   of the region's live slots, which are then host PIDs;
 * - no map inside a PID namespace, or a malformed map: nobody (never another
 *   tenant's processes). */
#define INIT_PID_NS "pid:[4026531836]" /* the kernel's initial PID namespace (PROC_PID_INIT_INO) */

struct whom {
    int n;                                         /* entries; -1: show nobody */
    int mapped;                                    /* 1: map[] applies, else pids[] */
    struct vgpu_pidmap_entry map[VGPU_PIDMAP_MAX]; /* host -> container */
    pid_t pids[VGPU_REGION_SLOTS];
};

static int in_host_pidns(void)
{
    char link[64];
    ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);

    if (n <= 0)
        return 0; /* cannot tell: the safe side */
    link[n] = 0;
    return strcmp(link, INIT_PID_NS) == 0;
}

static void whom_load(struct whom *w)
{
    char path[VGPU_PATH_MAX + 16];
    const char *slash = strrchr(vgpu_q.shared_dir, '/');
    int n;

    w->mapped = 0;
    w->n = -1;
    if (slash && (size_t)(slash - vgpu_q.shared_dir) + 16 < sizeof path) {
        snprintf(path, sizeof path, "%.*s/host/pids", (int)(slash - vgpu_q.shared_dir), vgpu_q.shared_dir);
        n = vgpu_pidmap_read(path, w->map, VGPU_PIDMAP_MAX);
        if (n == -1)
            vgpu_log(VGPU_LOG_WARN, "%s is malformed (want lines \"HOSTPID PID\"); showing no processes", path);
        if (n != -2) {
            w->mapped = 1;
            w->n = n;
            return;
        }
    }
    if (in_host_pidns())
        w->n = vgpu_region_pids(w->pids, VGPU_REGION_SLOTS);
}

/* 1 and *shown = the PID to report when host PID pid is the container's */
static int whom_shows(const struct whom *w, unsigned int pid, unsigned int *shown)
{
    for (int i = 0; i < w->n; i++) {
        if (w->mapped && w->map[i].host == pid) {
            *shown = w->map[i].ns;
            return 1;
        }
        if (!w->mapped && (unsigned int)w->pids[i] == pid) {
            *shown = pid;
            return 1;
        }
    }
    return 0;
}

/* Keeps the entries of buf[0..n) (esz bytes each, the PID first) that w
 * shows, with their PIDs translated, in out[0..cap); returns how many it
 * would keep (more than cap: the caller's array is too small). */
static unsigned int keep(const struct whom *w, const char *buf, unsigned int n, size_t esz, void *out, unsigned int cap)
{
    unsigned int kept = 0, pid, shown;

    for (unsigned int i = 0; i < n && buf; i++) {
        memcpy(&pid, buf + i * esz, sizeof pid);
        if (!whom_shows(w, pid, &shown))
            continue;
        if (out && kept < cap) {
            memcpy((char *)out + kept * esz, buf + i * esz, esz);
            memcpy((char *)out + kept * esz, &shown, sizeof shown);
        }
        kept++;
    }
    return kept;
}

static struct whom *whom_new(void)
{
    struct whom *w = malloc(sizeof *w);

    if (w)
        whom_load(w);
    return w;
}

/* Calls fill(d, &n, buf, arg) with a growing buffer of our own until the
 * whole list fits; *pbuf, *pn: the list (caller frees). */
typedef nvmlReturn_t (*fill_fn)(void *real, nvmlDevice_t d, unsigned int *n, void *buf, void *arg);

static nvmlReturn_t fetch_all(fill_fn fill, void *real, nvmlDevice_t d, size_t esz, void *arg, char **pbuf,
                              unsigned int *pn)
{
    unsigned int n = 0;
    char *buf = NULL;
    nvmlReturn_t r = NVML_ERROR_UNKNOWN;

    for (int tries = 0; tries < 4; tries++) {
        r = fill(real, d, &n, buf, arg);
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
    *pbuf = buf;
    *pn = buf ? n : 0;
    return NVML_SUCCESS;
}

typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, void *);

/* Fetches every entry through fill (fetch_all) and keeps in out[0..cap) the
 * ones the container shows (keep); *kept is how many it shows in all. */
static nvmlReturn_t fetch_kept(fill_fn fill, void *real, nvmlDevice_t d, size_t esz, void *arg, void *out,
                               unsigned int cap, unsigned int *kept)
{
    unsigned int n = 0;
    char *buf = NULL;
    struct whom *w;
    nvmlReturn_t r;

    if (handle_qi(d, NULL) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = fetch_all(fill, real, d, esz, arg, &buf, &n)) != NVML_SUCCESS)
        return r;
    if (!(w = whom_new())) {
        free(buf);
        return NVML_ERROR_MEMORY;
    }
    *kept = keep(w, buf, n, esz, out, cap);
    free(w);
    free(buf);
    return NVML_SUCCESS;
}

static nvmlReturn_t fill_procs(void *real, nvmlDevice_t d, unsigned int *n, void *buf, void *arg)
{
    (void)arg;
    return ((procs_fn)real)(d, n, buf);
}

static nvmlReturn_t procs(procs_fn real, size_t esz, nvmlDevice_t d, unsigned int *count, void *out)
{
    unsigned int kept;
    nvmlReturn_t r;

    READY();
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = fetch_kept(fill_procs, (void *)real, d, esz, NULL, out, *count, &kept)) != NVML_SUCCESS)
        return r;
    r = kept > *count ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    *count = kept;
    return r;
}

#define PROCS(name, type)                                                                                              \
    nvmlReturn_t name(nvmlDevice_t d, unsigned int *n, type *p)                                                        \
    {                                                                                                                  \
        return procs((procs_fn)REAL(name), sizeof(type), d, n, p);                                                     \
    }
PROCS(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
PROCS(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_t)
PROCS(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
PROCS(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
PROCS(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_t)
PROCS(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)

/* samples, count, lastSeen: the same protocol (NULL samples asks the size) */
static nvmlReturn_t fill_util(void *real, nvmlDevice_t d, unsigned int *n, void *buf, void *arg)
{
    (void)real;
    return REAL(nvmlDeviceGetProcessUtilization)(d, buf, n, *(unsigned long long *)arg);
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *u, unsigned int *count,
                                             unsigned long long last)
{
    unsigned int kept;
    nvmlReturn_t r;

    READY();
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = fetch_kept(fill_util, NULL, d, sizeof *u, &last, u, *count, &kept)) != NVML_SUCCESS)
        return r;
    r = kept > *count || (!u && kept) ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    *count = kept;
    return r;
}

/* plist->version and mode go to the driver as given; the array is ours */
static nvmlReturn_t fill_detail(void *real, nvmlDevice_t d, unsigned int *n, void *buf, void *arg)
{
    nvmlProcessDetailList_t l = *(nvmlProcessDetailList_t *)arg;
    nvmlReturn_t r;

    (void)real;
    l.numProcArrayEntries = *n;
    l.procArray = buf;
    r = REAL(nvmlDeviceGetRunningProcessDetailList)(d, &l);
    *n = l.numProcArrayEntries;
    return r;
}

nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t d, nvmlProcessDetailList_t *pl)
{
    unsigned int kept;
    nvmlReturn_t r;

    READY();
    if (!pl)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = fetch_kept(fill_detail, NULL, d, sizeof(nvmlProcessDetail_v1_t), pl, pl->procArray,
                        pl->numProcArrayEntries, &kept)) != NVML_SUCCESS)
        return r;
    r = kept > pl->numProcArrayEntries || (!pl->procArray && kept) ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    pl->numProcArrayEntries = kept;
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

/* The driver's per-cgroup memory limits (r615). A driver without them:
 * FUNCTION_NOT_FOUND, as from a name the driver lacks. Setting them is the
 * host's (vgpu sets the container's at create): refused here. Reading them
 * answers with the container's own limits on its devices, whatever cgroup is
 * named: hard = the limit, soft = the memory request where one below the
 * limit is set, else the limit (as the host sets them), used = the
 * container's usage. */
nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t d, nvmlSetMemoryLimits_v1_t *l)
{
    (void)d;
    (void)l;
    READY();
    if (vgpu_table[VGPU_IDX_nvmlDeviceSetMemoryLimits_v1] == (void *)vgpu_notfound_stub)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    return NVML_ERROR_NO_PERMISSION;
}

nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t d, nvmlGetMemoryLimits_v1_t *l)
{
    int qi;

    READY();
    if (vgpu_table[VGPU_IDX_nvmlDeviceGetMemoryLimits_v1] == (void *)vgpu_notfound_stub)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (!l || !l->nameSpace || (qi = handle_qi(d, NULL)) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!vgpu_q.dev[qi].has_memory)
        return NVML_ERROR_NOT_FOUND;
    l->hardLimit = vgpu_q.dev[qi].memory;
    l->softLimit = vgpu_q.dev[qi].memory_request && vgpu_q.dev[qi].memory_request < l->hardLimit
                       ? vgpu_q.dev[qi].memory_request
                       : l->hardLimit;
    l->currentUsed = vgpu_region_usage(qi);
    return NVML_SUCCESS;
}
