/* Contexts: every context wrapper (create, destroy, primary retain, release,
 * reset). A context costs device memory the program never asked for. We measure it:
 * the device's free memory (real NVML, opened privately) before and after the
 * creation, clamped at 0, and count it until the context goes. Concurrent
 * activity of other processes can blur one measurement; it is never negative.
 * Before a context goes, the compute measurements in flight in it are
 * completed and our events in it destroyed (measure.c). */
#include <dlfcn.h>
#include <pthread.h>
#include "account.h"
#include "cuda_hooks.h"
#include "measure.h"
#include "nvml_abi.h"
#include "region.h"

typedef int (*nvmlInit_t)(void);
typedef int (*nvmlGetByUUID_t)(const char *, nvmlDevice_t *);
typedef int (*nvmlMem_t)(nvmlDevice_t, nvmlMemory_t *);
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static nvmlGetByUUID_t nvml_by_uuid;
static nvmlMem_t nvml_mem;

static void nvml_open(void)
{
    void *h = dlopen(vgpu_q.driver_nvml, RTLD_LAZY | RTLD_LOCAL | RTLD_DEEPBIND);
    nvmlInit_t init;

    if (!h)
        return;
    init = (nvmlInit_t)dlsym(h, "nvmlInit_v2");
    nvml_by_uuid = (nvmlGetByUUID_t)dlsym(h, "nvmlDeviceGetHandleByUUID");
    nvml_mem = (nvmlMem_t)dlsym(h, "nvmlDeviceGetMemoryInfo");
    if (!init || !nvml_by_uuid || !nvml_mem || init() != NVML_SUCCESS)
        nvml_mem = NULL;
}

/* free bytes of quota device qi as the driver sees them; 0 = unknown */
static uint64_t device_free(int qi)
{
    nvmlDevice_t d;
    nvmlMemory_t m;

    pthread_once(&nvml_once, nvml_open);
    if (!nvml_mem || nvml_by_uuid(vgpu_q.dev[qi].uuid, &d) != NVML_SUCCESS || nvml_mem(d, &m) != NVML_SUCCESS)
        return 0;
    return m.free;
}

static void count_context(int kind, uint64_t key, int qi, uint64_t before)
{
    uint64_t after = device_free(qi);
    uint64_t fp = (before && after) ? vgpu_sub_clamp(before, after) : 0;
    struct vgpu_rec r = {qi, fp, 0};

    VGPU_DEBUG("context on device %d costs %llu bytes", qi, (unsigned long long)fp);
    /* first one in wins: two threads racing to create the same primary context
     * must count it once */
    if (vgpu_ptr_insert(kind, key, &r) == 0)
        vgpu_region_add(qi, fp);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    unsigned int flags;
    int active = 1, qi;
    uint64_t before = 0;
    CUresult r;

    READY();
    qi = vgpu_quota_index(dev);
    if (qi >= 0 && REALT(cuDevicePrimaryCtxGetState_t, cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS &&
        !active)
        before = device_free(qi);
    r = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (r == CUDA_SUCCESS && qi >= 0 && !active)
        count_context(VGPU_K_PRIMARY, (uint64_t)dev, qi, before);
    return r;
}

static void primary_gone_if_inactive(CUdevice dev)
{
    unsigned int flags;
    int active = 1;

    if (REALT(cuDevicePrimaryCtxGetState_t, cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS &&
        !active)
        vgpu_mem_forget(VGPU_K_PRIMARY, (uint64_t)dev);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult r;

    READY();
    vgpu_measure_ctx_gone(NULL, dev, 1);
    r = REAL(cuDevicePrimaryCtxRelease_v2)(dev);
    if (r == CUDA_SUCCESS)
        primary_gone_if_inactive(dev);
    return r;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUresult r;

    READY();
    vgpu_measure_ctx_gone(NULL, dev, 1);
    r = REAL(cuDevicePrimaryCtxReset_v2)(dev);
    if (r == CUDA_SUCCESS)
        primary_gone_if_inactive(dev);
    return r;
}

#define CTX_CREATE(dev, call)                                                                                          \
    do {                                                                                                               \
        int qi_;                                                                                                       \
        uint64_t before_ = 0;                                                                                          \
        CUresult r_;                                                                                                   \
        READY();                                                                                                       \
        if ((qi_ = vgpu_quota_index(dev)) < 0)                                                                         \
            return CUDA_ERROR_INVALID_DEVICE;                                                                          \
        before_ = device_free(qi_);                                                                                    \
        r_ = (call);                                                                                                   \
        if (r_ == CUDA_SUCCESS)                                                                                        \
            count_context(VGPU_K_CTX, (uint64_t)(uintptr_t)*pctx, qi_, before_);                                       \
        return r_;                                                                                                     \
    } while (0)

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(dev, REAL(cuCtxCreate_v2)(pctx, flags, dev));
}
CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(dev, REAL(cuCtxCreate_v3)(pctx, params, n, flags, dev));
}
CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(dev, REAL(cuCtxCreate_v4)(pctx, params, flags, dev));
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    READY();
    vgpu_measure_ctx_gone(ctx, 0, 0);
    VGPU_RELEASE_WITH(VGPU_K_CTX, ctx, REAL(cuCtxDestroy_v2)(ctx));
}
