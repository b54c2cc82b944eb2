/* Stream-ordered allocator. A pool holds device memory beyond the live
 * allocations (freed blocks stay until trimmed). We count what the pool
 * reserves: each allocation first reserves its size (the pool may have to grow
 * by that much: the limit check is made before the driver), then the pool's
 * count is set to CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT and the temporary
 * reservation dropped. Frees, trims and a refused allocation re-read it. If a
 * driver cannot report the attribute we fall back to counting each allocation
 * until its free. */
#include "account.h"
#include "capture.h"
#include "cuda_hooks.h"
#include "graphmem.h"

static uint64_t pool_reserved(CUmemoryPool pool, int *ok)
{
    cuuint64_t v = 0;
    *ok = REALT(cuMemPoolGetAttribute_t, cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) ==
          CUDA_SUCCESS;
    return v;
}

/* Brings the count of one pool to its current reserved memory. */
static void pool_sync(CUmemoryPool pool, int qi)
{
    int ok;
    uint64_t now = pool_reserved(pool, &ok), old;
    struct vgpu_rec r = {qi, now, 0};

    if (!ok)
        return;
    if (vgpu_ptr_set_size(VGPU_K_POOL, (uint64_t)(uintptr_t)pool, now, &old) != 0) {
        if (vgpu_ptr_insert(VGPU_K_POOL, (uint64_t)(uintptr_t)pool, &r) != 0)
            return; /* another thread inserted it just now; it counts */
        old = 0;
    }
    vgpu_mem_recount(qi, old, now);
}

static void pool_sync_cb(uint64_t key, const struct vgpu_rec *r) { pool_sync((CUmemoryPool)(uintptr_t)key, r->dev); }

static void resync_all(void) { vgpu_ptr_each(VGPU_K_POOL, pool_sync_cb); }

__attribute__((constructor(101))) static void register_resync(void) { vgpu_mem_on_refusal(resync_all); }

/* the driver's stream-ordered allocation, the call the program made */
static CUresult real_alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s, int from_pool, int ptsz)
{
    if (from_pool)
        return ptsz ? REAL(cuMemAllocFromPoolAsync_ptsz)(dptr, size, pool, s)
                    : REAL(cuMemAllocFromPoolAsync)(dptr, size, pool, s);
    return ptsz ? REAL(cuMemAllocAsync_ptsz)(dptr, size, s) : REAL(cuMemAllocAsync)(dptr, size, s);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s, int from_pool, int ptsz)
{
    CUmemoryPool p = pool;
    int qi, ok;
    CUresult r;
    CUdevice d;

    READY();
    if ((r = REALT(cuCtxGetDevice_t, cuCtxGetDevice)(&d)) != CUDA_SUCCESS)
        return r;
    if (!from_pool && REALT(cuDeviceGetMemPool_t, cuDeviceGetMemPool)(&p, d) != CUDA_SUCCESS)
        p = NULL;
    /* a pool's memory is on its own device; the current one is the closest we know */
    if ((qi = vgpu_quota_index(d)) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    /* into a capturing stream it becomes a graph allocation node: no memory
     * now, graph memory when its graph is launched; refused now if it cannot
     * fit beside what the container holds */
    if (vgpu_capturing(s, ptsz)) {
        vgpu_graph_learn(qi, d);
        if ((r = vgpu_graph_reserve(qi, size)) != CUDA_SUCCESS)
            return r;
        vgpu_mem_unreserve(qi, size);
        return real_alloc_async(dptr, size, pool, s, from_pool, ptsz);
    }
    if ((r = vgpu_mem_reserve(qi, size)) != CUDA_SUCCESS)
        return r;
    VGPU_ROOM_RETRY(r, qi, size, real_alloc_async(dptr, size, pool, s, from_pool, ptsz));
    if (r != CUDA_SUCCESS) {
        vgpu_mem_unreserve(qi, size);
        return r;
    }
    if (p)
        pool_reserved(p, &ok);
    else
        ok = 0;
    if (ok) {
        vgpu_mem_commit(VGPU_K_ASYNC, *dptr, qi, 0, (uint64_t)(uintptr_t)p);
        pool_sync(p, qi);
        vgpu_mem_unreserve(qi, size);
    } else {
        vgpu_mem_commit(VGPU_K_ASYNC, *dptr, qi, size, 0);
    }
    return CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s) { return alloc_async(dptr, n, NULL, s, 0, 0); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s) { return alloc_async(dptr, n, NULL, s, 0, 1); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool p, CUstream s)
{
    return alloc_async(dptr, n, p, s, 1, 0);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t n, CUmemoryPool p, CUstream s)
{
    return alloc_async(dptr, n, p, s, 1, 1);
}

static CUresult free_async(CUdeviceptr dptr, CUstream s, int ptsz)
{
    struct vgpu_rec rec;
    int had;
    CUresult r;

    READY();
    had = vgpu_mem_take(VGPU_K_ASYNC, dptr, &rec) == 0;
    r = ptsz ? REAL(cuMemFreeAsync_ptsz)(dptr, s) : REAL(cuMemFreeAsync)(dptr, s);
    if (!had)
        return r;
    if (r != CUDA_SUCCESS || !rec.aux)
        vgpu_mem_settle(VGPU_K_ASYNC, dptr, &rec, r);
    else
        pool_sync((CUmemoryPool)(uintptr_t)rec.aux, rec.dev);
    return r;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return free_async(dptr, s, 0); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { return free_async(dptr, s, 1); }

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    struct vgpu_rec rec;
    CUresult r;

    READY();
    r = REAL(cuMemPoolTrimTo)(pool, keep);
    if (r == CUDA_SUCCESS && vgpu_ptr_get(VGPU_K_POOL, (uint64_t)(uintptr_t)pool, &rec) == 0)
        pool_sync(pool, rec.dev);
    return r;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    READY();
    VGPU_RELEASE_WITH(VGPU_K_POOL, pool, REAL(cuMemPoolDestroy)(pool));
}
