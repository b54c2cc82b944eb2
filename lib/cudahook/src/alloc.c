/* Allocation routes with a size the program names: linear memory, managed
 * memory, pitched memory, arrays, mipmapped arrays; and the legacy 32-bit
 * allocation entry points, refused. Each follows account.h's protocol. */
#include "account.h"
#include "cuda_hooks.h"

/* ---- linear memory ---- */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    int qi;
    CUresult r;

    READY();
    if ((r = vgpu_current_qi(&qi)) != CUDA_SUCCESS || (r = vgpu_mem_reserve(qi, bytesize)) != CUDA_SUCCESS)
        return r;
    VGPU_ROOM_RETRY(r, qi, bytesize, REAL(cuMemAlloc_v2)(dptr, bytesize));
    if (r == CUDA_SUCCESS)
        vgpu_mem_commit(VGPU_K_DPTR, *dptr, qi, bytesize, 0);
    else
        vgpu_mem_unreserve(qi, bytesize);
    return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    int qi;
    CUresult r;

    READY();
    /* managed memory may live on the device: count it against the current one */
    if ((r = vgpu_current_qi(&qi)) != CUDA_SUCCESS || (r = vgpu_mem_reserve(qi, bytesize)) != CUDA_SUCCESS)
        return r;
    r = REAL(cuMemAllocManaged)(dptr, bytesize, flags);
    if (r == CUDA_SUCCESS)
        vgpu_mem_commit(VGPU_K_DPTR, *dptr, qi, bytesize, 0);
    else
        vgpu_mem_unreserve(qi, bytesize);
    return r;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
    int qi;
    CUresult r;
    uint64_t est, real;

    READY();
    if ((r = vgpu_current_qi(&qi)) != CUDA_SUCCESS)
        return r;
    /* reserve an estimate (rows padded to 512 bytes), then settle on the
     * driver's real pitch x height */
    est = vgpu_mul_sat(vgpu_round_up(width, 512), height);
    if ((r = vgpu_mem_reserve(qi, est)) != CUDA_SUCCESS)
        return r;
    VGPU_ROOM_RETRY(r, qi, est, REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem));
    if (r != CUDA_SUCCESS) {
        vgpu_mem_unreserve(qi, est);
        return r;
    }
    real = vgpu_mul_sat(*pitch, height);
    if (real > est && vgpu_mem_reserve(qi, real - est) != CUDA_SUCCESS) {
        REAL(cuMemFree_v2)(*dptr);
        vgpu_mem_unreserve(qi, est);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (real < est)
        vgpu_mem_unreserve(qi, est - real);
    vgpu_mem_commit(VGPU_K_DPTR, *dptr, qi, real, 0);
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    READY();
    VGPU_RELEASE_WITH(VGPU_K_DPTR, dptr, REAL(cuMemFree_v2)(dptr));
}

/* ---- legacy 32-bit entry points: never a way around the limit ---- */

static CUresult legacy_refused(const char *name)
{
    vgpu_log(VGPU_LOG_WARN, "%s (legacy 32-bit entry point) is not supported under vgpu; use the _v2 API", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    (void)dptr, (void)bytesize;
    READY();
    return legacy_refused("cuMemAlloc");
}

CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int w, unsigned int h, unsigned int e)
{
    (void)dptr, (void)pitch, (void)w, (void)h, (void)e;
    READY();
    return legacy_refused("cuMemAllocPitch");
}

CUresult cuArrayCreate(CUarray *arr, const void *desc)
{
    (void)arr, (void)desc;
    READY();
    return legacy_refused("cuArrayCreate");
}

CUresult cuArray3DCreate(CUarray *arr, const void *desc)
{
    (void)arr, (void)desc;
    READY();
    return legacy_refused("cuArray3DCreate");
}

/* ---- arrays ----
 * The driver does not say how much an array takes. Estimate: width x height x
 * depth x channels x element size, each row padded to 512 bytes (the texture
 * pitch alignment), the whole rounded up to 64 KiB (a large page). Unknown
 * formats count 4 bytes a channel. Freeing gives back the same estimate. */

static uint64_t elem_size(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4;
    }
}

static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned ch)
{
    uint64_t row = vgpu_round_up(vgpu_mul_sat(vgpu_mul_sat(w ? w : 1, ch ? ch : 1), elem_size(f)), 512);
    return vgpu_round_up(vgpu_mul_sat(vgpu_mul_sat(row, h ? h : 1), d ? d : 1), 65536);
}

#define ARRAY_ALLOC(kind, handle, bytes, call)                                                                         \
    do {                                                                                                               \
        int qi_;                                                                                                       \
        uint64_t n_ = (bytes);                                                                                         \
        CUresult r_;                                                                                                   \
        READY();                                                                                                       \
        if ((r_ = vgpu_current_qi(&qi_)) != CUDA_SUCCESS || (r_ = vgpu_mem_reserve(qi_, n_)) != CUDA_SUCCESS)          \
            return r_;                                                                                                 \
        VGPU_ROOM_RETRY(r_, qi_, n_, call);                                                                            \
        if (r_ == CUDA_SUCCESS)                                                                                        \
            vgpu_mem_commit(kind, (uint64_t)(uintptr_t) * (handle), qi_, n_, 0);                                       \
        else                                                                                                           \
            vgpu_mem_unreserve(qi_, n_);                                                                               \
        return r_;                                                                                                     \
    } while (0)

CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!d || !arr)
        return REAL(cuArrayCreate_v2)(arr, d);
    ARRAY_ALLOC(VGPU_K_ARRAY, arr, array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels),
                REAL(cuArrayCreate_v2)(arr, d));
}

CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!d || !arr)
        return REAL(cuArray3DCreate_v2)(arr, d);
    /* layered and cubemap arrays keep their layers/faces in Depth */
    ARRAY_ALLOC(VGPU_K_ARRAY, arr, array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels),
                REAL(cuArray3DCreate_v2)(arr, d));
}

CUresult cuArrayDestroy(CUarray arr)
{
    READY();
    VGPU_RELEASE_WITH(VGPU_K_ARRAY, arr, REAL(cuArrayDestroy)(arr));
}

static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    uint64_t sum = 0, w = d->Width, h = d->Height, z = d->Depth;
    int layered = (d->Flags & 0x05) != 0; /* CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP: depth does not shrink */

    for (unsigned l = 0; l < levels && l < 64; l++) {
        sum = vgpu_add_sat(sum, array_bytes(w, h, z, d->Format, d->NumChannels));
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        if (!layered)
            z = z > 1 ? z / 2 : z;
    }
    return sum;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *mh, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    if (!d || !mh)
        return REAL(cuMipmappedArrayCreate)(mh, d, levels);
    ARRAY_ALLOC(VGPU_K_MIPMAP, mh, mipmap_bytes(d, levels), REAL(cuMipmappedArrayCreate)(mh, d, levels));
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray mh)
{
    READY();
    VGPU_RELEASE_WITH(VGPU_K_MIPMAP, mh, REAL(cuMipmappedArrayDestroy)(mh));
}
