/* Virtual memory management: physical allocations (cuMemCreate) count until
 * cuMemRelease; mapping them adds nothing. */
#include "account.h"
#include "cuda_hooks.h"

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    int qi;
    CUresult r;

    READY();
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return REAL(cuMemCreate)(h, size, prop, flags); /* host memory is not device memory */
    if ((qi = vgpu_quota_index(prop->location.id)) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if ((r = vgpu_mem_reserve(qi, size)) != CUDA_SUCCESS)
        return r;
    r = REAL(cuMemCreate)(h, size, prop, flags);
    if (r == CUDA_SUCCESS)
        vgpu_mem_commit(VGPU_K_VMM, *h, qi, size, 0);
    else
        vgpu_mem_unreserve(qi, size);
    return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    READY();
    VGPU_RELEASE_WITH(VGPU_K_VMM, h, REAL(cuMemRelease)(h));
}
