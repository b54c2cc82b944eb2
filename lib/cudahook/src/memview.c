/* What programs see of device memory: the container's limit as the total and
 * what it leaves as free (cuMemGetInfo, cuDeviceTotalMem and their legacy
 * 32-bit forms, clamped). */
#include <limits.h>
#include "account.h"
#include "cuda_hooks.h"
#include "borrow.h"
#include "region.h"
#include "share.h"

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    size_t rf = 0, rt = 0;
    uint64_t lim, used, f;
    int qi;
    CUresult r;

    READY();
    r = REAL(cuMemGetInfo_v2)(&rf, &rt);
    if (r != CUDA_SUCCESS)
        return r;
    if (vgpu_current_qi(&qi) != CUDA_SUCCESS || !vgpu_q.dev[qi].has_memory) {
        /* no limit: the real values */
        if (free)
            *free = rf;
        if (total)
            *total = rt;
        return CUDA_SUCCESS;
    }
    lim = vgpu_limit_of(qi) < rt ? vgpu_limit_of(qi) : rt;
    used = vgpu_region_usage(qi);
    /* what it can take now, or what it is owed (vgpu_mem_free_pick) */
    f = vgpu_mem_free_pick(vgpu_mem_cap(qi) < lim ? vgpu_mem_cap(qi) : lim, used, rf, vgpu_q.dev[qi].memory_request,
                           lim, vgpu_share_mem_until(), vgpu_now_ns());
    if (free)
        *free = f;
    if (total)
        *total = lim;
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    size_t t = 0;
    int qi;
    CUresult r;

    READY();
    r = REAL(cuDeviceTotalMem_v2)(&t, dev);
    if (r != CUDA_SUCCESS)
        return r;
    qi = vgpu_quota_index(dev);
    if (qi >= 0 && vgpu_q.dev[qi].has_memory && vgpu_limit_of(qi) < t)
        t = vgpu_limit_of(qi);
    if (bytes)
        *bytes = t;
    return CUDA_SUCCESS;
}

static unsigned int clamp_u32(size_t v) { return v > UINT_MAX ? UINT_MAX : (unsigned int)v; }

CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    size_t f, t;
    CUresult r = cuMemGetInfo_v2(&f, &t);

    if (r == CUDA_SUCCESS) {
        if (free)
            *free = clamp_u32(f);
        if (total)
            *total = clamp_u32(t);
    }
    return r;
}

CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t t;
    CUresult r = cuDeviceTotalMem_v2(&t, dev);

    if (r == CUDA_SUCCESS && bytes)
        *bytes = clamp_u32(t);
    return r;
}
