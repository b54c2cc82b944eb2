/* Contexts: primary (one per device, refcounted) and explicit ones. Each live
 * context costs `context-memory` bytes of its device, as a real context's
 * reservation at the default limits (local memory, printf FIFO, malloc heap)
 * does. Limits raised above their defaults (cuCtxSetLimit, or the stack grown
 * by a launch whose frame exceeds it) cost their extra bytes on top, charged
 * when they are set, as the driver reserves them. */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <stdlib.h>
#include <string.h>

static const size_t default_limit[CU_LIMIT_MAX] = {1024, 1048576, 8388608, 2, 2048, 64, 0, 232448, 0, 0};

static uint64_t mul_sat(uint64_t a, uint64_t b) { return (a && b > UINT64_MAX / a) ? UINT64_MAX : a * b; }
static uint64_t ru2m(uint64_t x) { return x > UINT64_MAX - SIM_GRANULARITY ? UINT64_MAX : (x + SIM_GRANULARITY - 1) / SIM_GRANULARITY * SIM_GRANULARITY; }

/* Device memory limit l at value v holds beyond what the context's default
 * reservation covers: the stack is per thread for every thread the device can
 * hold resident (SMs x 2048); FIFO and heap are their size; pending launches a
 * slot each. Reservations come in 2 MiB steps. */
static uint64_t limit_bytes(const struct ctx *c, CUlimit l, size_t v)
{
    uint64_t extra = v > default_limit[l] ? v - default_limit[l] : 0;
    switch (l) {
    case CU_LIMIT_STACK_SIZE:
        return ru2m(mul_sat(extra, (uint64_t)devcfg(c->ord)->sms * SIM_THREADS_PER_SM));
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
        return ru2m(extra);
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
        return ru2m(mul_sat(extra, SIM_LAUNCH_SLOT_BYTES));
    default:
        return 0;
    }
}

/* Sets limit l to v, charging or giving back the difference; called with g.mu held. */
static CUresult limit_set(struct ctx *c, CUlimit l, size_t v)
{
    uint64_t now = limit_bytes(c, l, v), old = c->lim_charge[l];
    if (now > old && sim_charge(&g.st, c->cfg, sim_usable(devcfg(c->ord)), now - old) < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (now < old) sim_uncharge(&g.st, c->cfg, old - now);
    c->lim_charge[l] = now;
    c->limits[l] = v;
    return CUDA_SUCCESS;
}

/* A launch whose frame exceeds the stack limit makes the driver grow it (and
 * keep it grown); when the device cannot hold it, the launch fails. */
CUresult ctx_grow_stack(struct ctx *c, size_t per_thread)
{
    if (per_thread <= c->limits[CU_LIMIT_STACK_SIZE]) return CUDA_SUCCESS;
    return limit_set(c, CU_LIMIT_STACK_SIZE, per_thread);
}

static CUresult ctx_activate(struct ctx *c)
{
    uint64_t m = g.env.cfg.ctx_mem;
    if (sim_charge(&g.st, c->cfg, sim_usable(devcfg(c->ord)), m) < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    sim_ctx_count(&g.st, c->cfg, 1);
    c->alive = 1;
    c->id = ++g.next_id;
    c->streams = NULL;
    memset(&c->legacy, 0, sizeof c->legacy);
    c->legacy.o.type = OT_STREAM;
    c->legacy.o.ctx = c;
    c->legacy.kind = SK_LEGACY;
    memcpy(c->limits, default_limit, sizeof default_limit);
    memset(c->lim_charge, 0, sizeof c->lim_charge);
    return CUDA_SUCCESS;
}

struct ctx *ctx_new(int ord, unsigned flags, int primary, CUresult *rc)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c) {
        *rc = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    c->o.type = OT_CTX;
    c->o.ctx = c;
    c->ord = ord;
    c->cfg = cfg_of(ord);
    c->flags = flags;
    c->primary = primary;
    if ((*rc = ctx_activate(c)) != CUDA_SUCCESS) {
        free(c);
        return NULL;
    }
    reg_add(c, OT_CTX);
    return c;
}

static void drop_obj(void *p, void *arg)
{
    struct obj *o = p;
    struct ctx *c = arg;
    if (o->ctx != c || o->type == OT_CTX) return;
    switch (o->type) {
    case OT_STREAM: stream_free((struct stream *)o); break;
    case OT_EVENT:
    case OT_GRAPH:
    case OT_GNODE:
    case OT_GEXEC:
    case OT_ARRAY:
    case OT_MIPMAP:
        /* freed lazily: just forget the handle (memory of arrays is released by free_ctx_allocs) */
        reg_del(p);
        break;
    case OT_FUNC: reg_del(p); break;
    case OT_MODULE: reg_del(p); break;
    default: break;
    }
}

/* The context object itself is kept (never freed) so that threads that still
 * have it current get CUDA_ERROR_CONTEXT_IS_DESTROYED instead of a crash. */
void ctx_teardown(struct ctx *c)
{
    if (!c->alive) return;
    free_ctx_allocs(c);
    modules_ctx_gone(c);
    reg_foreach(drop_obj, c);
    for (int l = 0; l < CU_LIMIT_MAX; l++) {
        sim_uncharge(&g.st, c->cfg, c->lim_charge[l]);
        c->lim_charge[l] = 0;
    }
    c->streams = NULL;
    c->alive = 0;
    sim_uncharge(&g.st, c->cfg, g.env.cfg.ctx_mem);
    sim_ctx_count(&g.st, c->cfg, -1);
    pool_release_unused_all(c->cfg);
}

static int flags_ok(unsigned flags)
{
    if (flags & ~(unsigned)CU_CTX_FLAGS_MASK) return 0;
    unsigned s = flags & CU_CTX_SCHED_MASK;
    return s == 0 || s == 1 || s == 2 || s == 4;
}

/* ---- primary contexts ---- */
SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    struct ctx *c = g.primary[dev];
    CUresult rc = CUDA_SUCCESS;
    if (!c) {
        c = ctx_new(dev, g.prim_flags[dev], 1, &rc);
        if (!c) LEAVE(rc);
        g.primary[dev] = c;
    } else if (!c->alive) {
        c->flags = g.prim_flags[dev];
        if ((rc = ctx_activate(c)) != CUDA_SUCCESS) LEAVE(rc);
    }
    g.prim_refs[dev]++;
    *pctx = (CUcontext)c;
    LEAVE(CUDA_SUCCESS);
}

static CUresult prim_release(CUdevice dev)
{
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    if (g.prim_refs[dev] <= 0) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    if (--g.prim_refs[dev] == 0) ctx_teardown(g.primary[dev]);
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return prim_release(dev); }
SIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return prim_release(dev); }

static CUresult prim_reset(CUdevice dev)
{
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    if (g.primary[dev]) ctx_teardown(g.primary[dev]);
    g.prim_refs[dev] = 0;
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return prim_reset(dev); }
SIM_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return prim_reset(dev); }

SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    *flags = g.prim_flags[dev];
    *active = g.primary[dev] && g.primary[dev]->alive;
    LEAVE(CUDA_SUCCESS);
}

static CUresult prim_setflags(CUdevice dev, unsigned flags, int v2)
{
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    if (!flags_ok(flags)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    struct ctx *c = g.primary[dev];
    if (!v2 && c && c->alive) LEAVE(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE);
    g.prim_flags[dev] = flags;
    if (c && c->alive) c->flags = flags;
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) { return prim_setflags(dev, flags, 1); }
SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) { return prim_setflags(dev, flags, 0); }

/* ---- explicit contexts ---- */
/* aff: the SM count asked by execution affinity, 0 for none */
static CUresult ctx_create_aff(CUcontext *pctx, unsigned flags, CUdevice dev, unsigned aff)
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    if (!flags_ok(flags)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    unsigned sms = 0;
    if (aff && (!g.mps || sim_mps_affinity(aff, devcfg(dev)->sms, &sms) != 0))
        LEAVE(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY); /* only an MPS client has it, within its share */
    CUresult rc;
    struct ctx *c = ctx_new(dev, flags, 0, &rc);
    if (!c) LEAVE(rc);
    c->sms = sms;
    tls_ctx_push(c);
    *pctx = (CUcontext)c;
    LEAVE(CUDA_SUCCESS);
}
static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev) { return ctx_create_aff(pctx, flags, dev, 0); }

SIM_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }
/* the CUDA 2.0 entry point, still exported: a 32-bit-era name for the same context */
SIM_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }

/* the SM count asked (the last one given), 0 for none; -1: invalid */
static long affinity_sms(const CUexecAffinityParam *p, int n)
{
    long sms = 0;
    if (n < 0 || (n > 0 && !p)) return -1;
    for (int i = 0; i < n; i++) {
        if (p[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT || p[i].param.smCount.val == 0) return -1;
        sms = p[i].param.smCount.val;
    }
    return sms;
}

SIM_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice dev)
{
    long aff = affinity_sms(paramsArray, numParams);
    if (aff < 0) return CUDA_ERROR_INVALID_VALUE;
    return ctx_create_aff(pctx, flags, dev, (unsigned)aff);
}

SIM_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice dev)
{
    long aff = 0;
    if (p) {
        if ((aff = affinity_sms(p->execAffinityParams, p->numExecAffinityParams)) < 0) return CUDA_ERROR_INVALID_VALUE;
        if (p->cigParams) return CUDA_ERROR_NOT_SUPPORTED; /* CUDA-in-graphics needs D3D12 */
    }
    return ctx_create_aff(pctx, flags, dev, (unsigned)aff);
}

/* the current context's SMs: its affinity, else the client's share */
SIM_EXPORT CUresult cuCtxGetExecAffinity(CUexecAffinityParam *p, CUexecAffinityType type)
{
    if (!p || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    p->type = type;
    p->param.smCount.val = c->sms ? c->sms : (unsigned)sim_mps_sms(devcfg(c->ord)->sms);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev)
{
    if (!pi || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    *pi = g.mps;
    LEAVE(CUDA_SUCCESS);
}

static CUresult ctx_destroy(CUcontext h)
{
    ENTER();
    struct ctx *c = (struct ctx *)h;
    if (!c || !reg_has(c, OT_CTX) || c->primary) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    if (!c->alive) LEAVE(CUDA_ERROR_CONTEXT_IS_DESTROYED);
    ctx_teardown(c);
    /* the driver pops it from the calling thread's stack */
    struct ctx *keep[128];
    int n = 0;
    struct ctx *x;
    while ((x = tls_ctx_pop()))
        if (x != c && n < 128) keep[n++] = x;
    while (n) tls_ctx_push(keep[--n]);
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx); }
SIM_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return ctx_destroy(ctx); }

/* ---- green contexts: a context on some of the device's SMs; it costs what any
 * context costs. Its CUgreenCtx and CUcontext handles are the same object here. ---- */
struct resdesc {
    int ord;
    unsigned sms;
};

SIM_EXPORT CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource *res, CUdevResourceType type)
{
    if (!res) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    if (type != CU_DEV_RESOURCE_TYPE_SM) LEAVE(CUDA_ERROR_INVALID_VALUE);
    memset(res, 0, sizeof *res);
    res->type = type;
    memcpy(res->_internal_padding, &dev, sizeof dev); /* which device: the driver keeps it in there too */
    res->sm.smCount = (unsigned)sim_mps_sms(devcfg(dev)->sms);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *desc, CUdevResource *res, unsigned int n)
{
    if (!desc || !res || n != 1 || res->type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_VALUE;
    struct resdesc *d = calloc(1, sizeof *d); /* lives as long as the process, as the driver's does */
    if (!d) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(&d->ord, res->_internal_padding, sizeof d->ord);
    d->sms = res->sm.smCount;
    *desc = (CUdevResourceDesc)d;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
    if (!phCtx || !desc || flags != CU_GREEN_CTX_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev) || ((struct resdesc *)desc)->ord != dev) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    CUresult rc;
    struct ctx *c = ctx_new(dev, 0, 0, &rc);
    if (!c) LEAVE(rc);
    *phCtx = (CUgreenCtx)c; /* not made current, as the driver does */
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    if (!pContext) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c = (struct ctx *)hCtx;
    if (!c || !reg_has(c, OT_CTX) || c->primary) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    *pContext = (CUcontext)c;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    ENTER();
    struct ctx *c = (struct ctx *)hCtx;
    if (!c || !reg_has(c, OT_CTX) || c->primary) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    if (!c->alive) LEAVE(CUDA_ERROR_CONTEXT_IS_DESTROYED);
    ctx_teardown(c);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext h)
{
    ENTER();
    struct ctx *c = (struct ctx *)h;
    CUresult r = ctx_usable(c);
    if (r) LEAVE(r);
    tls_ctx_push(c);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    ENTER();
    if (tls_ctx_depth() == 0) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    struct ctx *c = tls_ctx_pop();
    if (pctx) *pctx = (CUcontext)c;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext h)
{
    ENTER();
    struct ctx *c = (struct ctx *)h;
    if (c) {
        CUresult r = ctx_usable(c);
        if (r) LEAVE(r);
    }
    tls_ctx_set(c);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    *pctx = (CUcontext)cur_ctx();
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetDevice(CUdevice *dev)
{
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    *dev = c->ord;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSynchronize(void)
{
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    ctx_sync_wait(c);
    pools_trim_sync(c->cfg);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    *flags = c->flags;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    if (!flags_ok(flags)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    c->flags = flags;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetId(CUcontext h, unsigned long long *id)
{
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c = h ? (struct ctx *)h : cur_ctx();
    CUresult r = ctx_usable(c);
    if (r) LEAVE(r);
    *id = c->id;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetApiVersion(CUcontext h, unsigned int *version)
{
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c = h ? (struct ctx *)h : cur_ctx();
    CUresult r = ctx_usable(c);
    if (r) LEAVE(r);
    *version = 3020; /* what the driver reports for contexts of the _v2 API */
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    if (!pvalue) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (limit == CU_LIMIT_CIG_ENABLED || limit == CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED) LEAVE(CUDA_ERROR_NOT_SUPPORTED);
    *pvalue = c->limits[limit];
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (limit == CU_LIMIT_CIG_ENABLED || limit == CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED) LEAVE(CUDA_ERROR_NOT_SUPPORTED);
    LEAVE(limit_set(c, limit, value));
}

SIM_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    if (!pconfig) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    *pconfig = (CUfunc_cache)c->cache_config;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    if ((int)config < 0 || (int)config > 3) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    c->cache_config = (int)config;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetSharedMemConfig(int *pConfig)
{
    if (!pConfig) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    *pConfig = 1; /* CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE */
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSetSharedMemConfig(int config)
{
    if (config < 0 || config > 2) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    LEAVE(r);
}

SIM_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    if (leastPriority) *leastPriority = 0;
    if (greatestPriority) *greatestPriority = -5;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxResetPersistingL2Cache(void)
{
    ENTER();
    struct ctx *c;
    LEAVE(cur_ctx_checked(&c));
}

SIM_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    if (flags) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if ((r = ctx_usable((struct ctx *)peer))) LEAVE(r);
    LEAVE((CUresult)217); /* CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: no P2P between simulated GPUs */
}

SIM_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
    ENTER();
    CUresult r = ctx_usable((struct ctx *)peer);
    LEAVE(r ? r : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
}
