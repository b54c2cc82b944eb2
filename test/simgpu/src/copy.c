/* Copies and memsets. Bytes really move (device memory is host-backed).
 * Synchronous calls wait on the timeline until the stream they order against
 * (legacy default stream, or the per-thread one for _ptds) is idle, then copy.
 * Async calls copy at enqueue time and take a zero-length slot in the stream,
 * which is exact for programs that do not rewrite a source buffer before the
 * stream reaches the copy (simulated kernels never change memory). Copies take no
 * simulated time. */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <string.h>

/* synchronous op: wait (without the lock) for the ordering stream, then return
 * with the lock held again and the stream marked done at now */
static CUresult sync_prep(int ptds, struct stream **out)
{
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) return r;
    struct stream *s;
    if ((r = resolve_stream(NULL, ptds, &s))) return r;
    if (s->cap) {
        capture_invalidate(s);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    uint64_t t = stream_ready(s);
    sim_leave();
    sim_sleep_until(t);
    sim_enter();
    if (!reg_has(c, OT_CTX) || !c->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if ((r = resolve_stream(NULL, ptds, &s))) return r;
    *out = s;
    return CUDA_SUCCESS;
}

static CUresult async_prep(CUstream h, int ptsz, struct stream **out)
{
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) return r;
    return resolve_stream(h, ptsz, out);
}

/* kind: 0 host, 1 device, 2 unified (either) */
static CUresult check_side(const void *p, size_t n, int kind)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (kind == 1) return dev_range((CUdeviceptr)(uintptr_t)p, n);
    return CUDA_SUCCESS;
}

static CUresult copy_op(void *dst, int dk, const void *src, int sk, size_t n, int sync, int pt, CUstream h)
{
    if (n == 0) return CUDA_SUCCESS;
    ENTER();
    struct stream *s;
    CUresult r = sync ? sync_prep(pt, &s) : async_prep(h, pt, &s);
    if (r) LEAVE(r);
    if ((r = check_side(dst, n, dk)) || (r = check_side(src, n, sk))) LEAVE(r);
    if (!sync && s->cap) {
        struct gnode *nd = capture_node(s, GN_MEMCPY);
        if (!nd) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        nd->dst = dst;
        nd->src = src;
        nd->size = n;
        LEAVE(CUDA_SUCCESS);
    }
    memmove(dst, src, n);
    stream_done_at(s, stream_ready(s));
    LEAVE(CUDA_SUCCESS);
}

#define DP(x) ((void *)(uintptr_t)(x))
SIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n)
{
    return copy_op(DP(d), 1, s, 0, n, 1, 0, NULL);
}
SIM_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { return copy_op(DP(d), 1, s, 0, n, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { return copy_op(d, 0, DP(s), 1, n, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) { return copy_op(d, 0, DP(s), 1, n, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_op(DP(d), 1, DP(s), 1, n, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_op(DP(d), 1, DP(s), 1, n, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_op(DP(d), 2, DP(s), 2, n, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_op(DP(d), 2, DP(s), 2, n, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream h) { return copy_op(DP(d), 1, s, 0, n, 0, 0, h); }
SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream h) { return copy_op(DP(d), 1, s, 0, n, 0, 1, h); }
SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream h) { return copy_op(d, 0, DP(s), 1, n, 0, 0, h); }
SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream h) { return copy_op(d, 0, DP(s), 1, n, 0, 1, h); }
SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) { return copy_op(DP(d), 1, DP(s), 1, n, 0, 0, h); }
SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) { return copy_op(DP(d), 1, DP(s), 1, n, 0, 1, h); }
SIM_EXPORT CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) { return copy_op(DP(d), 2, DP(s), 2, n, 0, 0, h); }
SIM_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) { return copy_op(DP(d), 2, DP(s), 2, n, 0, 1, h); }
SIM_EXPORT CUresult cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
    (void)dc;
    (void)sc;
    return copy_op(DP(d), 1, DP(s), 1, n, 1, 0, NULL);
}
SIM_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream h)
{
    (void)dc;
    (void)sc;
    return copy_op(DP(d), 1, DP(s), 1, n, 0, 0, h);
}

/* ---- 2D ---- */
static CUresult side2d(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr, size_t pitch, size_t x, size_t y,
                       size_t w, size_t h, uint8_t **base, size_t *rowpitch)
{
    size_t span;
    switch (t) {
    case CU_MEMORYTYPE_HOST:
        if (!host) return CUDA_ERROR_INVALID_VALUE;
        *base = (uint8_t *)host + y * pitch + x;
        *rowpitch = pitch;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        if (!dev) return CUDA_ERROR_INVALID_VALUE;
        *base = (uint8_t *)(uintptr_t)dev + y * pitch + x;
        *rowpitch = pitch;
        span = (h - 1) * pitch + w;
        if (t == CU_MEMORYTYPE_DEVICE) return dev_range((CUdeviceptr)(uintptr_t)*base, span);
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY: {
        struct array *a = (struct array *)arr;
        if (!reg_has(a, OT_ARRAY)) return CUDA_ERROR_INVALID_HANDLE;
        size_t row = a->d.Width * a->bpe, rows = a->d.Height ? a->d.Height : 1;
        if (x + w > row || y + h > rows) return CUDA_ERROR_INVALID_VALUE;
        *base = (uint8_t *)a->mem + y * row + x;
        *rowpitch = row;
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, int sync, int pt, CUstream h)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (p->WidthInBytes == 0 || p->Height == 0) return CUDA_SUCCESS;
    if ((p->srcMemoryType != CU_MEMORYTYPE_ARRAY && p->Height > 1 && p->srcPitch < p->WidthInBytes) ||
        (p->dstMemoryType != CU_MEMORYTYPE_ARRAY && p->Height > 1 && p->dstPitch < p->WidthInBytes))
        return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = sync ? sync_prep(pt, &s) : async_prep(h, pt, &s);
    if (r) LEAVE(r);
    if (!sync && s->cap) LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* 2D copies are not captured by the simulator */
    uint8_t *sb, *db;
    size_t sp, dp;
    if ((r = side2d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch, p->srcXInBytes, p->srcY,
                    p->WidthInBytes, p->Height, &sb, &sp)))
        LEAVE(r);
    if ((r = side2d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch, p->dstXInBytes, p->dstY,
                    p->WidthInBytes, p->Height, &db, &dp)))
        LEAVE(r);
    for (size_t y = 0; y < p->Height; y++) memmove(db + y * dp, sb + y * sp, p->WidthInBytes);
    stream_done_at(s, stream_ready(s));
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy2d(p, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { return copy2d(p, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy2d(p, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p) { return copy2d(p, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream h) { return copy2d(p, 0, 0, h); }
SIM_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream h) { return copy2d(p, 0, 1, h); }

/* ---- memset: rows of `width` elements of `elem` bytes, `pitch` bytes apart ---- */
static void fill(uint8_t *p, unsigned v, unsigned elem, size_t n)
{
    if (elem == 1) {
        memset(p, (int)(v & 0xff), n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (elem == 2) {
            uint16_t x = (uint16_t)v;
            memcpy(p + 2 * i, &x, 2);
        } else {
            uint32_t x = v;
            memcpy(p + 4 * i, &x, 4);
        }
    }
}

static CUresult memset_op(CUdeviceptr d, size_t pitch, unsigned v, unsigned elem, size_t width, size_t height, int sync, int pt, CUstream h)
{
    if (d % elem) return CUDA_ERROR_INVALID_VALUE;
    if (width == 0 || height == 0) return CUDA_SUCCESS;
    if (height > 1 && (pitch < width * elem || pitch % elem)) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct stream *s;
    CUresult r = sync ? sync_prep(pt, &s) : async_prep(h, pt, &s);
    if (r) LEAVE(r);
    if ((r = dev_range(d, (height - 1) * pitch + width * elem))) LEAVE(r);
    if (!sync && s->cap) {
        if (height != 1) LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        struct gnode *nd = capture_node(s, GN_MEMSET);
        if (!nd) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        nd->dst = (void *)(uintptr_t)d;
        nd->size = width;
        nd->memset_val = v;
        nd->memset_elem = elem;
        LEAVE(CUDA_SUCCESS);
    }
    for (size_t y = 0; y < height; y++) fill((uint8_t *)(uintptr_t)d + y * pitch, v, elem, width);
    stream_done_at(s, stream_ready(s));
    LEAVE(CUDA_SUCCESS);
}

void sim_fill(void *p, unsigned v, unsigned elem, size_t n) { fill(p, v, elem, n); }

SIM_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset_op(d, 0, v, 1, n, 1, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return memset_op(d, 0, v, 1, n, 1, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return memset_op(d, 0, v, 2, n, 1, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) { return memset_op(d, 0, v, 2, n, 1, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return memset_op(d, 0, v, 4, n, 1, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return memset_op(d, 0, v, 4, n, 1, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h) { return memset_op(d, 0, v, 1, n, 1, 0, 0, h); }
SIM_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream h) { return memset_op(d, 0, v, 1, n, 1, 0, 1, h); }
SIM_EXPORT CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream h) { return memset_op(d, 0, v, 2, n, 1, 0, 0, h); }
SIM_EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream h) { return memset_op(d, 0, v, 2, n, 1, 0, 1, h); }
SIM_EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream h) { return memset_op(d, 0, v, 4, n, 1, 0, 0, h); }
SIM_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream h) { return memset_op(d, 0, v, 4, n, 1, 0, 1, h); }
SIM_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) { return memset_op(d, p, v, 1, w, h, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) { return memset_op(d, p, v, 1, w, h, 1, 1, NULL); }
SIM_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) { return memset_op(d, p, v, 2, w, h, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) { return memset_op(d, p, v, 4, w, h, 1, 0, NULL); }
SIM_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) { return memset_op(d, p, v, 1, w, h, 0, 0, s); }
SIM_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s) { return memset_op(d, p, v, 4, w, h, 0, 0, s); }
