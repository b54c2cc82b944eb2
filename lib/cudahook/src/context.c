/* Contexts: every context wrapper (create v1..v4, green, destroy v1/v2,
 * primary retain, release, reset). A context costs device memory the program
 * never asked for. Before it is created we reserve the last cost measured on
 * that device (so contexts are refused before the driver is reached once one
 * was measured); after, we measure it (probe.h: this process's own figure in
 * the real NVML when the driver lists us, else the device's free memory before
 * and after, which other processes' activity blurs) and settle the reservation
 * to it. A context whose measured cost crosses the limit is destroyed again
 * and the creation fails with OUT_OF_MEMORY. When a context goes, so do the
 * limits (limits.c) and module data (modules.c) charged to it, and, before,
 * the compute measurements in flight in it (measure.c). On a spatial device
 * (spatial.h) a context gets the SM share as its execution affinity, and the
 * MPS client settings are put back into the environment first. */
#include <string.h>
#include "account.h"
#include "cuda_hooks.h"
#include "measure.h"
#include "probe.h"
#include "region.h"
#include "routes.h"
#include "spatial.h"

#define MAXORD 64 /* CUDA ordinals we remember a primary context for (devmap.c's bound) */

/* last measured cost of a context per container device: reserved before the next */
static uint64_t ctx_estimate[VGPU_MAX_DEVICES];

/* Settles a context just created: reservation est becomes its measured cost.
 * 0, or -1 when that crosses the limit (then nothing is counted for it). */
static int ctx_settle(int kind, uint64_t key, int qi, uint64_t est, const struct vgpu_probe *before)
{
    uint64_t fp = vgpu_probe_cost(qi, before);

    if (fp == 0)
        fp = est; /* nothing measurable: the estimate stands */
    else
        __atomic_store_n(&ctx_estimate[qi], fp, __ATOMIC_RELAXED);
    VGPU_DEBUG("context on device %d costs %llu bytes (reserved %llu)", qi, (unsigned long long)fp,
               (unsigned long long)est);
    if (fp > est && vgpu_mem_reserve(qi, fp - est) != CUDA_SUCCESS) {
        vgpu_mem_unreserve(qi, est);
        vgpu_log(VGPU_LOG_INFO, "device %d: context of %llu bytes refused: container uses %llu of %llu", qi,
                 (unsigned long long)fp, (unsigned long long)vgpu_region_usage(qi),
                 (unsigned long long)vgpu_limit_of(qi));
        return -1;
    }
    if (fp < est)
        vgpu_mem_unreserve(qi, est - fp);
    /* first one in wins: two threads racing to create the same primary context
     * must count it once (commit gives the second count back) */
    vgpu_mem_commit(kind, key, qi, fp, 0);
    return 0;
}

/* a context went: what was charged to it went with it */
static void routes_ctx_gone(CUcontext ctx)
{
    vgpu_limits_ctx_gone(ctx);
    vgpu_modules_ctx_gone(ctx);
}

static CUcontext primary_ctx[MAXORD]; /* handle of each device's primary context, once retained */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    unsigned int flags;
    int active = 1, qi;
    uint64_t est = 0;
    struct vgpu_probe before;
    CUresult r;

    READY();
    vgpu_spatial_env_apply();
    qi = vgpu_quota_index(dev);
    if (qi >= 0 &&
        REALT(cuDevicePrimaryCtxGetState_t, cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS &&
        !active) {
        est = __atomic_load_n(&ctx_estimate[qi], __ATOMIC_RELAXED);
        if (vgpu_mem_reserve(qi, est) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
        vgpu_probe_take(qi, &before);
    }
    r = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (qi < 0 || active)
        return r;
    if (r != CUDA_SUCCESS) {
        vgpu_mem_unreserve(qi, est);
        return r;
    }
    if (dev >= 0 && dev < MAXORD)
        __atomic_store_n(&primary_ctx[dev], *pctx, __ATOMIC_RELAXED);
    if (ctx_settle(VGPU_K_PRIMARY, (uint64_t)dev, qi, est, &before) != 0) {
        REAL(cuDevicePrimaryCtxRelease_v2)(dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

static void primary_gone_if_inactive(CUdevice dev)
{
    unsigned int flags;
    int active = 1;

    if (REALT(cuDevicePrimaryCtxGetState_t, cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS &&
        !active && vgpu_mem_forget(VGPU_K_PRIMARY, (uint64_t)dev) == 0 && dev >= 0 && dev < MAXORD &&
        __atomic_load_n(&primary_ctx[dev], __ATOMIC_RELAXED))
        routes_ctx_gone(__atomic_load_n(&primary_ctx[dev], __ATOMIC_RELAXED));
}

#define PRIMARY_GONE(dev, call)                                                                                        \
    do {                                                                                                               \
        CUresult r_;                                                                                                   \
        READY();                                                                                                       \
        vgpu_measure_ctx_gone(NULL, (dev), 1);                                                                         \
        r_ = (call);                                                                                                   \
        if (r_ == CUDA_SUCCESS)                                                                                        \
            primary_gone_if_inactive(dev);                                                                             \
        return r_;                                                                                                     \
    } while (0)

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { PRIMARY_GONE(dev, REAL(cuDevicePrimaryCtxRelease_v2)(dev)); }
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { PRIMARY_GONE(dev, REAL(cuDevicePrimaryCtxRelease)(dev)); }
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { PRIMARY_GONE(dev, REAL(cuDevicePrimaryCtxReset_v2)(dev)); }
CUresult cuDevicePrimaryCtxReset(CUdevice dev) { PRIMARY_GONE(dev, REAL(cuDevicePrimaryCtxReset)(dev)); }

/* every exported cuCtxCreate and cuGreenCtxCreate: reserve the estimate,
 * create, settle; a context that crosses the limit is destroyed again (undo) */
#define CTX_CREATE_UNDO(dev, pctx, call, undo)                                                                         \
    do {                                                                                                               \
        int qi_;                                                                                                       \
        uint64_t est_;                                                                                                 \
        struct vgpu_probe before_;                                                                                     \
        CUresult r_;                                                                                                   \
        READY();                                                                                                       \
        if ((qi_ = vgpu_quota_index(dev)) < 0)                                                                         \
            return CUDA_ERROR_INVALID_DEVICE;                                                                          \
        est_ = __atomic_load_n(&ctx_estimate[qi_], __ATOMIC_RELAXED);                                                  \
        if (vgpu_mem_reserve(qi_, est_) != CUDA_SUCCESS)                                                               \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                           \
        vgpu_probe_take(qi_, &before_);                                                                                \
        r_ = (call);                                                                                                   \
        if (r_ != CUDA_SUCCESS) {                                                                                      \
            vgpu_mem_unreserve(qi_, est_);                                                                             \
            return r_;                                                                                                 \
        }                                                                                                              \
        if (ctx_settle(VGPU_K_CTX, (uint64_t)(uintptr_t) * (pctx), qi_, est_, &before_) != 0) {                        \
            undo(*(pctx));                                                                                             \
            *(pctx) = NULL;                                                                                            \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                           \
        }                                                                                                              \
        return r_;                                                                                                     \
    } while (0)

#define CTX_CREATE(dev, call) CTX_CREATE_UNDO(dev, pctx, call, REAL(cuCtxDestroy_v2))

/* the most affinity params a caller may pass on a spatial device (the driver
 * knows one type) */
#define AFF_MAX 8

/* On a spatial device: the affinity to create with (vgpu_spatial_affinity)
 * in out, its count in *no, the share in *cap; 1. Else 0. -1: too many params. */
static int spatial_affinity(CUdevice dev, const CUexecAffinityParam *in, int n, CUexecAffinityParam *out, int *no,
                            unsigned *cap)
{
    if (!vgpu_spatial_cap(dev, cap))
        return 0;
    if (n < 0 || n > AFF_MAX)
        return -1;
    vgpu_spatial_env_apply();
    *no = vgpu_spatial_affinity(in, n, *cap, out);
    return 1;
}

/* whether the current context (one just created) holds at most cap SMs */
static int ctx_within(unsigned cap)
{
    CUexecAffinityParam p;

    memset(&p, 0, sizeof p);
    return REALT(cuCtxGetExecAffinity_t, cuCtxGetExecAffinity)(&p, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS &&
           p.param.smCount.val <= cap;
}

/* A context on a spatial device: with the affinity a, kept only if the
 * driver then says it holds at most the share (the H200 reported a context
 * created with an SM count inside a 50 % client as holding all 132 SMs);
 * else, or when the affinity is refused, without one (the client's share
 * holds it), checked the same way; a context above the share is destroyed
 * and refused. */
static CUresult spatial_create(CUcontext *pctx, CUexecAffinityParam *a, int n, unsigned flags, CUdevice dev,
                               unsigned cap)
{
    CUresult r = REAL(cuCtxCreate_v3)(pctx, a, n, flags, dev);

    if (r == CUDA_SUCCESS && ctx_within(cap))
        return r;
    if (r == CUDA_SUCCESS) {
        VGPU_DEBUG("a context with an SM count of %u holds more than the share: created without",
                   a[0].param.smCount.val);
        REAL(cuCtxDestroy_v2)(*pctx);
    }
    if ((r = REAL(cuCtxCreate_v2)(pctx, flags, dev)) != CUDA_SUCCESS || ctx_within(cap))
        return r;
    REAL(cuCtxDestroy_v2)(*pctx);
    *pctx = NULL;
    vgpu_log(VGPU_LOG_ERROR, "device %d: a new context holds more than the share of %u SMs; refused", (int)dev, cap);
    return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
}

/* v1, v2: on a spatial device, the share as the affinity */
static CUresult ctx_create_12(CUcontext *pctx, unsigned int flags, CUdevice dev,
                              CUresult (*create)(CUcontext *, unsigned, CUdevice))
{
    CUexecAffinityParam a[AFF_MAX + 1];
    int n = 0;
    unsigned cap;

    READY();
    if (spatial_affinity(dev, NULL, 0, a, &n, &cap) > 0)
        CTX_CREATE(dev, spatial_create(pctx, a, n, flags, dev, cap));
    CTX_CREATE(dev, create(pctx, flags, dev));
}

CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    READY();
    return ctx_create_12(pctx, flags, dev, REAL(cuCtxCreate));
}
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    READY();
    return ctx_create_12(pctx, flags, dev, REAL(cuCtxCreate_v2));
}
CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned int flags, CUdevice dev)
{
    CUexecAffinityParam a[AFF_MAX + 1];
    int na = 0, sp;
    unsigned cap;

    READY();
    if ((sp = spatial_affinity(dev, params, n, a, &na, &cap)) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (sp)
        CTX_CREATE(dev, spatial_create(pctx, a, na, flags, dev, cap));
    CTX_CREATE(dev, REAL(cuCtxCreate_v3)(pctx, params, n, flags, dev));
}
/* on a spatial device, CUDA-in-graphics parameters (D3D12 only) are not passed */
CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev)
{
    CUctxCreateParams *p = params;
    CUexecAffinityParam a[AFF_MAX + 1];
    int na = 0, sp;
    unsigned cap;

    READY();
    if ((sp = spatial_affinity(dev, p ? p->execAffinityParams : NULL, p ? p->numExecAffinityParams : 0, a, &na, &cap)) <
        0)
        return CUDA_ERROR_INVALID_VALUE;
    if (sp)
        CTX_CREATE(dev, spatial_create(pctx, a, na, flags, dev, cap));
    CTX_CREATE(dev, REAL(cuCtxCreate_v4)(pctx, params, flags, dev));
}

/* v1 and v2 destroy the same contexts: both give back what the context and
 * everything charged to it (limits, module data) held */
static CUresult ctx_destroy(CUcontext ctx, CUresult (*destroy)(CUcontext))
{
    struct vgpu_rec rec;
    int had;
    CUresult r;

    READY();
    vgpu_measure_ctx_gone(ctx, 0, 0);
    had = vgpu_mem_take(VGPU_K_CTX, (uint64_t)(uintptr_t)ctx, &rec) == 0;
    r = destroy(ctx);
    if (had)
        vgpu_mem_settle(VGPU_K_CTX, (uint64_t)(uintptr_t)ctx, &rec, r);
    if (r == CUDA_SUCCESS)
        routes_ctx_gone(ctx);
    return r;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx, REAL(cuCtxDestroy_v2)); }
CUresult cuCtxDestroy(CUcontext ctx) { return ctx_destroy(ctx, REAL(cuCtxDestroy)); }

/* green contexts: counted as contexts, keyed by their CUgreenCtx; what was
 * charged to them while current (limits, modules) is keyed by the CUcontext
 * the driver converts them to */
CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
    CTX_CREATE_UNDO(dev, phCtx, REAL(cuGreenCtxCreate)(phCtx, desc, dev, flags), REAL(cuGreenCtxDestroy));
}

CUresult cuGreenCtxDestroy(CUgreenCtx g)
{
    struct vgpu_rec rec;
    CUcontext c = NULL;
    int had;
    CUresult r;

    READY();
    if (REALT(cuCtxFromGreenCtx_t, cuCtxFromGreenCtx)(&c, g) != CUDA_SUCCESS)
        c = NULL;
    if (c)
        vgpu_measure_ctx_gone(c, 0, 0);
    had = vgpu_mem_take(VGPU_K_CTX, (uint64_t)(uintptr_t)g, &rec) == 0;
    r = REAL(cuGreenCtxDestroy)(g);
    if (had)
        vgpu_mem_settle(VGPU_K_CTX, (uint64_t)(uintptr_t)g, &rec, r);
    if (r == CUDA_SUCCESS && c)
        routes_ctx_gone(c);
    return r;
}
