/* Contexts: primary (one per device, refcounted) and explicit ones. Each live
 * context costs `context-memory` bytes of its device, as a real context's
 * reservation (local memory, printf FIFO, module images) does. */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <stdlib.h>
#include <string.h>

static void default_limits(struct ctx *c)
{
    static const size_t lim[CU_LIMIT_MAX] = {1024, 1048576, 8388608, 2, 2048, 64, 0, 232448, 0, 0};
    memcpy(c->limits, lim, sizeof lim);
}

static CUresult ctx_activate(struct ctx *c)
{
    uint64_t m = g.env.cfg.ctx_mem;
    if (sim_charge(&g.st, c->cfg, devcfg(c->ord)->memory, m) < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    sim_ctx_count(&g.st, c->cfg, 1);
    c->alive = 1;
    c->id = ++g.next_id;
    c->streams = NULL;
    memset(&c->legacy, 0, sizeof c->legacy);
    c->legacy.o.type = OT_STREAM;
    c->legacy.o.ctx = c;
    c->legacy.kind = SK_LEGACY;
    default_limits(c);
    return CUDA_SUCCESS;
}

struct ctx *ctx_new(int ord, unsigned flags, int primary, CUresult *rc)
{
    struct ctx *c = calloc(1, sizeof *c);
    if (!c) { *rc = CUDA_ERROR_OUT_OF_MEMORY; return NULL; }
    c->o.type = OT_CTX;
    c->o.ctx = c;
    c->ord = ord;
    c->cfg = cfg_of(ord);
    c->flags = flags;
    c->primary = primary;
    if ((*rc = ctx_activate(c)) != CUDA_SUCCESS) { free(c); return NULL; }
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
    case OT_EVENT: case OT_GRAPH: case OT_GNODE: case OT_GEXEC: case OT_ARRAY: case OT_MIPMAP:
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
    reg_foreach(drop_obj, c);
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
static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    if (!flags_ok(flags)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    CUresult rc;
    struct ctx *c = ctx_new(dev, flags, 0, &rc);
    if (!c) LEAVE(rc);
    tls_ctx_push(c);
    *pctx = (CUcontext)c;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }

static int affinity_ok(const CUexecAffinityParam *p, int n)
{
    if (n < 0 || (n > 0 && !p)) return 0;
    for (int i = 0; i < n; i++)
        if (p[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT || p[i].param.smCount.val == 0) return 0;
    return 1;
}

SIM_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice dev)
{
    if (!affinity_ok(paramsArray, numParams)) return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}

SIM_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice dev)
{
    if (p) {
        if (!affinity_ok(p->execAffinityParams, p->numExecAffinityParams)) return CUDA_ERROR_INVALID_VALUE;
        if (p->cigParams) return CUDA_ERROR_NOT_SUPPORTED; /* CUDA-in-graphics needs D3D12 */
    }
    return ctx_create(pctx, flags, dev);
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
    while ((x = tls_ctx_pop())) if (x != c && n < 128) keep[n++] = x;
    while (n) tls_ctx_push(keep[--n]);
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx); }
SIM_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return ctx_destroy(ctx); }

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
    c->limits[limit] = value;
    LEAVE(CUDA_SUCCESS);
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
