/* Process state of the simulated libcuda: initialization, the handle registry
 * (so that a bogus handle is an error code, never a dereference), the per-thread
 * context stack, fork handling and error strings. */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct simg g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* ---- handle registry: open addressing on the pointer value ---- */
struct regent {
    void *p;
    int type;
};
static struct regent *reg;
static size_t reg_cap, reg_n, reg_used; /* used counts tombstones too */
#define TOMB ((void *)1)

static size_t hptr(const void *p)
{
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 17;
    x *= 0x9E3779B97F4A7C15ULL;
    return (size_t)(x >> 7);
}

static void reg_grow(void)
{
    size_t ncap = reg_cap ? reg_cap * 2 : 1024;
    while (reg_n * 2 >= ncap) ncap *= 2;
    struct regent *nr = calloc(ncap, sizeof *nr);
    if (!nr) abort(); /* out of host memory: nothing sane to return from here */
    for (size_t i = 0; i < reg_cap; i++) {
        if (!reg[i].p || reg[i].p == TOMB) continue;
        size_t j = hptr(reg[i].p) & (ncap - 1);
        while (nr[j].p) j = (j + 1) & (ncap - 1);
        nr[j] = reg[i];
    }
    free(reg);
    reg = nr;
    reg_cap = ncap;
    reg_used = reg_n;
}

void reg_add(void *p, int type)
{
    if ((reg_used + 1) * 2 >= reg_cap) reg_grow();
    size_t j = hptr(p) & (reg_cap - 1);
    while (reg[j].p && reg[j].p != TOMB) j = (j + 1) & (reg_cap - 1);
    if (!reg[j].p) reg_used++;
    reg[j].p = p;
    reg[j].type = type;
    reg_n++;
}

static struct regent *reg_slot(const void *p)
{
    if (!reg_cap || !p || p == TOMB) return NULL;
    size_t j = hptr(p) & (reg_cap - 1);
    while (reg[j].p) {
        if (reg[j].p == p) return &reg[j];
        j = (j + 1) & (reg_cap - 1);
    }
    return NULL;
}

int reg_has(const void *p, int type)
{
    struct regent *e = reg_slot(p);
    return e && e->type == type;
}

void reg_del(void *p)
{
    struct regent *e = reg_slot(p);
    if (e) {
        e->p = TOMB;
        reg_n--;
    }
}

/* fn may call reg_del on the visited object (tombstones keep the walk valid) */
void reg_foreach(void (*fn)(void *obj, void *arg), void *arg)
{
    for (size_t i = 0; i < reg_cap; i++)
        if (reg[i].p && reg[i].p != TOMB) fn(reg[i].p, arg);
}

/* ---- per-thread context stack and per-thread default streams ---- */
#define STACK_MAX 128
static __thread struct ctx *tls_stack[STACK_MAX];
static __thread int tls_depth;
static __thread unsigned long long tls_gen;
static __thread struct {
    struct ctx *c;
    struct stream *s;
} tls_pt[16];

static void tls_check(void)
{
    if (tls_gen != g.gen) { /* stale after fork or reset */
        tls_depth = 0;
        memset(tls_pt, 0, sizeof tls_pt);
        tls_gen = g.gen;
    }
}

struct ctx *cur_ctx(void)
{
    tls_check();
    return tls_depth ? tls_stack[tls_depth - 1] : NULL;
}
int tls_ctx_depth(void)
{
    tls_check();
    return tls_depth;
}

void tls_ctx_push(struct ctx *c)
{
    tls_check();
    if (tls_depth == STACK_MAX) { /* drop the bottom: real drivers have no small fixed limit */
        memmove(tls_stack, tls_stack + 1, sizeof(tls_stack[0]) * (STACK_MAX - 1));
        tls_depth--;
    }
    tls_stack[tls_depth++] = c;
}

struct ctx *tls_ctx_pop(void)
{
    tls_check();
    return tls_depth ? tls_stack[--tls_depth] : NULL;
}

void tls_ctx_set(struct ctx *c)
{
    tls_check();
    if (!c) {
        if (tls_depth) tls_depth--;
        return;
    }
    if (tls_depth) tls_stack[tls_depth - 1] = c;
    else tls_stack[tls_depth++] = c;
}

struct stream *tls_perthread(struct ctx *c, int create)
{
    tls_check();
    int freei = -1;
    for (int i = 0; i < 16; i++) {
        if (tls_pt[i].c == c && tls_pt[i].s && reg_has(tls_pt[i].s, OT_STREAM)) return tls_pt[i].s;
        if (freei < 0 && (!tls_pt[i].c || !reg_has(tls_pt[i].s, OT_STREAM))) freei = i;
    }
    if (!create) return NULL;
    struct stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o.type = OT_STREAM;
    s->o.ctx = c;
    s->kind = SK_PERTHREAD;
    s->id = ++g.next_id;
    s->next = c->streams;
    c->streams = s;
    reg_add(s, OT_STREAM);
    if (freei < 0) freei = 0;
    tls_pt[freei].c = c;
    tls_pt[freei].s = s;
    return s;
}

CUresult ctx_usable(struct ctx *c)
{
    if (!c || !reg_has(c, OT_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
    if (!c->alive) return c->primary ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return CUDA_SUCCESS;
}

CUresult cur_ctx_checked(struct ctx **out)
{
    struct ctx *c = cur_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = ctx_usable(c);
    if (r == CUDA_SUCCESS) *out = c;
    return r;
}

int dev_ok(CUdevice d) { return d >= 0 && d < g.env.nvis; }
int cfg_of(int ord) { return g.env.vis[ord]; }
struct sim_devcfg *devcfg(int ord) { return &g.env.cfg.dev[g.env.vis[ord]]; }

/* ---- fork: the child must not use the parent's slot (the OFD lock is shared
 * with the parent through the inherited descriptor), its handles or its worker.
 * It reattaches with a fresh slot on its first call. ---- */
static void fork_prepare(void) { pthread_mutex_lock(&g.mu); }
static void fork_parent(void) { pthread_mutex_unlock(&g.mu); }
static void fork_child(void)
{
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cond, NULL);
    g.need_reset = 1;
}

__attribute__((constructor)) static void sim_ctor(void)
{
    g.pid = getpid();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static CUresult attach(void)
{
    if (sim_state_open(g.env.simdir, &g.st) < 0) {
        char why[PATH_MAX + 64];
        snprintf(why, sizeof why, "cannot open state in %s: %s", g.env.simdir, strerror(errno));
        sim_warn_once(why);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    if (sim_slot_acquire(&g.st) < 0) {
        sim_warn_once("no free process slot in the shared state");
        sim_state_close(&g.st);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    char cg[SIM_CGPATH];
    uint64_t ino;
    sim_self_cgroup(g.env.cfg.cgroup_root, cg, sizeof cg, &ino);
    sim_slot_set_cgroup(&g.st, cg, ino);
    return CUDA_SUCCESS;
}

static void reset_after_fork(void)
{
    /* the parent's objects stay in our copy of memory but are forgotten: handles
     * from before fork are unknown (INVALID_HANDLE / INVALID_CONTEXT) here */
    if (g.st.fd >= 0) close(g.st.fd);
    if (g.st.sh) munmap(g.st.sh, sizeof *g.st.sh);
    g.st.fd = -1;
    g.st.sh = NULL;
    g.st.slot = -1;
    free(reg);
    reg = NULL;
    reg_cap = reg_n = reg_used = 0;
    memset(g.primary, 0, sizeof g.primary);
    memset(g.prim_refs, 0, sizeof g.prim_refs);
    memset(g.default_pool, 0, sizeof g.default_pool);
    memset(g.cur_pool, 0, sizeof g.cur_pool);
    g.pools = NULL;
    g.allocs = NULL;
    g.nalloc = g.calloc_ = 0;
    g.resv = NULL;
    g.worker_started = 0;
    g.jobs = NULL;
    g.gen++;
    g.pid = getpid();
    g.need_reset = 0;
    if (g.init_state == 1) {
        CUresult r = attach();
        if (r != CUDA_SUCCESS) {
            g.init_state = -1;
            g.init_rc = r;
        } else {
            sim_checkpoint_attach();
        }
    }
}

CUresult sim_enter(void)
{
    pthread_mutex_lock(&g.mu);
    if (g.need_reset || g.pid != getpid()) reset_after_fork();
    if (g.init_state != 1) {
        pthread_mutex_unlock(&g.mu);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    sim_checkpoint_gate();
    return CUDA_SUCCESS;
}

void sim_leave(void)
{
    sim_checkpoint_leave();
    pthread_mutex_unlock(&g.mu);
}

SIM_EXPORT CUresult cuInit(unsigned int flags)
{
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.mu);
    if (g.need_reset || g.pid != getpid()) reset_after_fork();
    if (g.init_state == 0) {
        char why[PATH_MAX + 128];
        if (sim_load_env((void *)cuInit, &g.env, why, sizeof why) < 0) {
            sim_warn_once(why);
            g.init_state = -1;
            g.init_rc = CUDA_ERROR_NO_DEVICE;
        } else if ((sim_apply_cvd(&g.env), (g.init_rc = attach())) != CUDA_SUCCESS) {
            g.init_state = -1;
        } else if (g.env.nvis == 0) {
            /* the driver works but no device node is reachable: as a real driver
             * in a container without devices */
            g.init_state = -1;
            g.init_rc = CUDA_ERROR_NO_DEVICE;
            sim_state_close(&g.st);
        } else if ((g.init_rc = sim_mps_connect()) != CUDA_SUCCESS) {
            g.init_state = -1;
            sim_state_close(&g.st);
        } else {
            if (g.mps) sim_slot_set_mps(&g.st);
            sim_checkpoint_attach();
            g.init_state = 1;
            g.init_rc = CUDA_SUCCESS;
        }
    }
    CUresult r = g.init_rc;
    pthread_mutex_unlock(&g.mu);
    return r;
}

SIM_EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = SIM_CUDA_VERSION;
    return CUDA_SUCCESS;
}

/* Test-only export (docs/design.md): busy time of device `ordinal` (visible
 * ordinal) within [from_ns, to_ns) on CLOCK_MONOTONIC. */
SIM_EXPORT int simgpu_busy_ns(int ordinal, uint64_t from_ns, uint64_t to_ns, uint64_t *busy_ns)
{
    if (!busy_ns || to_ns < from_ns) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(ordinal)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    sim_lock(g.st.sh);
    *busy_ns = sim_busy_locked(g.st.sh, cfg_of(ordinal), from_ns, to_ns, 0);
    sim_unlock(g.st.sh);
    LEAVE(CUDA_SUCCESS);
}

/* ---- error strings (texts of the real driver) ---- */
static const struct {
    CUresult r;
    const char *name, *text;
} errs[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_PROFILER_DISABLED, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_DEVICE_NOT_LICENSED, "CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {CUDA_ERROR_UNMAP_FAILED, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
    {CUDA_ERROR_ARRAY_IS_MAPPED, "CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {CUDA_ERROR_ALREADY_ACQUIRED, "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
    {CUDA_ERROR_NOT_MAPPED, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {CUDA_ERROR_INVALID_SOURCE, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
    {CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "cannot set while device is active in this process"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_ASSERT, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_MPS_CONNECTION_FAILED, "CUDA_ERROR_MPS_CONNECTION_FAILED",
     "MPS client failed to connect to the MPS control daemon or the MPS server"},
    {CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
     "the provided execution affinity is not supported by the device"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_MERGE, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
    {CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

SIM_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        if (errs[i].r == error) {
            *pStr = errs[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        if (errs[i].r == error) {
            *pStr = errs[i].text;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuProfilerStart(void) { return CUDA_SUCCESS; }
SIM_EXPORT CUresult cuProfilerStop(void) { return CUDA_SUCCESS; }
SIM_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    /* private driver tables: the simulator has none (cudart copes by falling back) */
    if (!ppExportTable || !pExportTableId) return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = NULL;
    return CUDA_ERROR_NOT_FOUND;
}
