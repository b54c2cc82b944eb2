/* Device-memory limits for the CUDA stand-in.
 *
 * Every allocation path follows one protocol, with no lock held across the
 * driver call: reserve in the shared region (fails with OUT_OF_MEMORY before
 * the driver is reached when the container would pass its limit), call the
 * driver, then commit (record pointer -> (device, size)) or roll back. A free
 * takes the record out first (so a concurrent allocation that gets the same
 * address back cannot collide with it), calls the driver, and gives back
 * exactly what was counted, or puts the record back if the driver refused.
 * A free of a pointer we never saw goes to the driver untouched. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compute.h"
#include "cuda_hooks.h"
#include "nvml_abi.h"
#include "ptrtab.h"
#include "region.h"

/* ---- CUDA device -> container device (quota order), by UUID ---- */

#define MAXORD 64
static int devmap[MAXORD]; /* 0 = unknown yet, -1 = not the container's, else quota index + 1 */

static void uuid_str(const CUuuid *u, char *out, size_t n)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* Quota index of CUDA device d, -1 when it is not one of the container's.
 * Mapping by UUID keeps each limit on its physical GPU whatever
 * CUDA_VISIBLE_DEVICES did to the ordinals. */
static int quota_index(CUdevice d)
{
    CUuuid u;
    char s[64];
    int v = (d >= 0 && d < MAXORD) ? __atomic_load_n(&devmap[d], __ATOMIC_RELAXED) : 0;
    cuDeviceGetUuid_t get = REALT(cuDeviceGetUuid_t, cuDeviceGetUuid_v2);

    if (v)
        return v > 0 ? v - 1 : -1;
    if ((void *)get == (void *)vgpu_notfound_stub)
        get = REALT(cuDeviceGetUuid_t, cuDeviceGetUuid);
    if (get(&u, d) != CUDA_SUCCESS)
        return -1; /* not cached: may be a transient error (no cuInit yet) */
    uuid_str(&u, s, sizeof s);
    v = -1;
    for (int i = 0; i < vgpu_q.ndev; i++)
        if (strcasecmp(vgpu_q.dev[i].uuid, s) == 0)
            v = i + 1;
    if (v < 0)
        vgpu_log(VGPU_LOG_WARN, "CUDA device %d (%s) is not one of this container's devices", d, s);
    if (d >= 0 && d < MAXORD)
        __atomic_store_n(&devmap[d], v, __ATOMIC_RELAXED);
    return v > 0 ? v - 1 : -1;
}

int vgpu_quota_index(CUdevice d) { return quota_index(d); }

static uint64_t limit_of(int qi) { return vgpu_q.dev[qi].has_memory ? vgpu_q.dev[qi].memory : UINT64_MAX; }

static CUresult current_qi(int *qi)
{
    CUdevice d;
    CUresult r = REALT(cuCtxGetDevice_t, cuCtxGetDevice)(&d);

    if (r != CUDA_SUCCESS)
        return r;
    *qi = quota_index(d);
    /* fail closed: a device the quota does not list gets no memory from us */
    return *qi < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

/* ---- memory pools: count what a pool holds from the device ---- */

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
    if (now > old)
        vgpu_region_add(qi, now - old);
    else
        vgpu_region_release(qi, old - now);
}

static void pool_sync_cb(uint64_t key, const struct vgpu_rec *r) { pool_sync((CUmemoryPool)(uintptr_t)key, r->dev); }

static void graph_sync_cb(uint64_t key, const struct vgpu_rec *r);

/* ---- the protocol ---- */

static CUresult reserve(int qi, uint64_t size)
{
    int r = vgpu_region_reserve(qi, size, limit_of(qi));

    if (r == -1) {
        /* freed pool memory is only trimmed at synchronisation: look again */
        vgpu_ptr_each(VGPU_K_POOL, pool_sync_cb);
        vgpu_ptr_each(VGPU_K_GRAPHPOOL, graph_sync_cb);
        r = vgpu_region_reserve(qi, size, limit_of(qi));
    }
    if (r == 0)
        return CUDA_SUCCESS;
    if (r == -1 && vgpu_log_level >= VGPU_LOG_INFO)
        vgpu_log(VGPU_LOG_INFO, "device %d: %llu bytes refused: container uses %llu of %llu", qi,
                 (unsigned long long)size, (unsigned long long)vgpu_region_usage(qi),
                 (unsigned long long)limit_of(qi));
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static void commit(int kind, uint64_t key, int qi, uint64_t size, uint64_t aux)
{
    struct vgpu_rec r = {qi, size, aux};
    if (vgpu_ptr_insert(kind, key, &r) != 0) {
        /* the driver reused a key we still hold: keep the old record, which the
         * next free of this key gives back, and drop this count */
        vgpu_log(VGPU_LOG_WARN, "driver returned a handle we already track (kind %d)", kind);
        vgpu_region_release(qi, size);
    }
}

/* Takes the record of key, calls free(key), and gives back what it counted. */
#define RELEASE_WITH(kind, key, call)                                                                                  \
    do {                                                                                                               \
        struct vgpu_rec rec_;                                                                                          \
        int had_ = vgpu_ptr_take(kind, (uint64_t)(uintptr_t)(key), &rec_) == 0;                                       \
        CUresult r_ = (call);                                                                                          \
        if (had_) {                                                                                                    \
            if (r_ == CUDA_SUCCESS)                                                                                    \
                vgpu_region_release(rec_.dev, rec_.size);                                                              \
            else                                                                                                       \
                vgpu_ptr_insert(kind, (uint64_t)(uintptr_t)(key), &rec_);                                              \
        }                                                                                                              \
        return r_;                                                                                                     \
    } while (0)

#define READY()                                                                                                        \
    do {                                                                                                               \
        if (!vgpu_ready())                                                                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                                                         \
    } while (0)

/* ---- linear memory ---- */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    int qi;
    CUresult r;

    READY();
    if ((r = current_qi(&qi)) != CUDA_SUCCESS || (r = reserve(qi, bytesize)) != CUDA_SUCCESS)
        return r;
    r = REAL(cuMemAlloc_v2)(dptr, bytesize);
    if (r == CUDA_SUCCESS)
        commit(VGPU_K_DPTR, *dptr, qi, bytesize, 0);
    else
        vgpu_region_release(qi, bytesize);
    return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    int qi;
    CUresult r;

    READY();
    /* managed memory may live on the device: count it against the current one */
    if ((r = current_qi(&qi)) != CUDA_SUCCESS || (r = reserve(qi, bytesize)) != CUDA_SUCCESS)
        return r;
    r = REAL(cuMemAllocManaged)(dptr, bytesize, flags);
    if (r == CUDA_SUCCESS)
        commit(VGPU_K_DPTR, *dptr, qi, bytesize, 0);
    else
        vgpu_region_release(qi, bytesize);
    return r;
}

static uint64_t mul_sat(uint64_t a, uint64_t b) { return (a && b > UINT64_MAX / a) ? UINT64_MAX : a * b; }
static uint64_t round_up(uint64_t v, uint64_t a) { return v > UINT64_MAX - (a - 1) ? UINT64_MAX : (v + a - 1) / a * a; }

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
    int qi;
    CUresult r;
    uint64_t est, real;

    READY();
    if ((r = current_qi(&qi)) != CUDA_SUCCESS)
        return r;
    /* reserve an estimate (rows padded to 512 bytes), then settle on the
     * driver's real pitch x height */
    est = mul_sat(round_up(width, 512), height);
    if ((r = reserve(qi, est)) != CUDA_SUCCESS)
        return r;
    r = REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem);
    if (r != CUDA_SUCCESS) {
        vgpu_region_release(qi, est);
        return r;
    }
    real = mul_sat(*pitch, height);
    if (real > est && reserve(qi, real - est) != CUDA_SUCCESS) {
        REAL(cuMemFree_v2)(*dptr);
        vgpu_region_release(qi, est);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (real < est)
        vgpu_region_release(qi, est - real);
    commit(VGPU_K_DPTR, *dptr, qi, real, 0);
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    READY();
    RELEASE_WITH(VGPU_K_DPTR, dptr, REAL(cuMemFree_v2)(dptr));
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

/* ---- what programs see ---- */

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
    if (current_qi(&qi) != CUDA_SUCCESS || !vgpu_q.dev[qi].has_memory) {
        /* no limit: the real values */
        if (free)
            *free = rf;
        if (total)
            *total = rt;
        return CUDA_SUCCESS;
    }
    lim = limit_of(qi) < rt ? limit_of(qi) : rt;
    used = vgpu_region_usage(qi);
    f = vgpu_sub_clamp(lim, used);
    if (f > rf)
        f = rf; /* never promise what the GPU does not have */
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
    qi = quota_index(dev);
    if (qi >= 0 && vgpu_q.dev[qi].has_memory && limit_of(qi) < t)
        t = limit_of(qi);
    if (bytes)
        *bytes = t;
    return CUDA_SUCCESS;
}

/* ---- stream-ordered allocator ----
 * A pool holds device memory beyond the live allocations (freed blocks stay
 * until trimmed). We count what the pool reserves: each allocation first
 * reserves its size (the pool may have to grow by that much: the limit check
 * is made before the driver), then the pool's count is set to
 * CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT and the temporary reservation dropped.
 * Frees, trims and a refused allocation re-read it. If a driver cannot report
 * the attribute we fall back to counting each allocation until its free. */

static CUresult reserve_graph(int qi, uint64_t size);
static void graph_learn(int qi, CUdevice d);
typedef CUresult (*cuStreamIsCapturing_t)(CUstream, CUstreamCaptureStatus *);

/* A stream-ordered allocation into a capturing stream becomes a graph
 * allocation node: no memory now, graph memory when its graph is launched. It is
 * refused now if it cannot fit beside what the container holds. */
static int capturing(CUstream s, int ptsz)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = ptsz ? REALT(cuStreamIsCapturing_t, cuStreamIsCapturing_ptsz)(s, &st)
                      : REALT(cuStreamIsCapturing_t, cuStreamIsCapturing)(s, &st);
    return r == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE; /* an error: the driver's allocation says what */
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
    if ((qi = quota_index(d)) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (capturing(s, ptsz)) {
        graph_learn(qi, d);
        if ((r = reserve_graph(qi, size)) != CUDA_SUCCESS)
            return r;
        vgpu_region_release(qi, size);
        if (from_pool)
            return ptsz ? REAL(cuMemAllocFromPoolAsync_ptsz)(dptr, size, pool, s)
                        : REAL(cuMemAllocFromPoolAsync)(dptr, size, pool, s);
        return ptsz ? REAL(cuMemAllocAsync_ptsz)(dptr, size, s) : REAL(cuMemAllocAsync)(dptr, size, s);
    }
    if ((r = reserve(qi, size)) != CUDA_SUCCESS)
        return r;
    if (from_pool)
        r = ptsz ? REAL(cuMemAllocFromPoolAsync_ptsz)(dptr, size, pool, s) : REAL(cuMemAllocFromPoolAsync)(dptr, size, pool, s);
    else
        r = ptsz ? REAL(cuMemAllocAsync_ptsz)(dptr, size, s) : REAL(cuMemAllocAsync)(dptr, size, s);
    if (r != CUDA_SUCCESS) {
        vgpu_region_release(qi, size);
        return r;
    }
    if (p)
        pool_reserved(p, &ok);
    else
        ok = 0;
    if (ok) {
        commit(VGPU_K_ASYNC, *dptr, qi, 0, (uint64_t)(uintptr_t)p);
        pool_sync(p, qi);
        vgpu_region_release(qi, size);
    } else {
        commit(VGPU_K_ASYNC, *dptr, qi, size, 0);
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
    had = vgpu_ptr_take(VGPU_K_ASYNC, dptr, &rec) == 0;
    r = ptsz ? REAL(cuMemFreeAsync_ptsz)(dptr, s) : REAL(cuMemFreeAsync)(dptr, s);
    if (!had)
        return r;
    if (r != CUDA_SUCCESS) {
        vgpu_ptr_insert(VGPU_K_ASYNC, dptr, &rec);
        return r;
    }
    if (rec.aux)
        pool_sync((CUmemoryPool)(uintptr_t)rec.aux, rec.dev);
    else
        vgpu_region_release(rec.dev, rec.size);
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
    RELEASE_WITH(VGPU_K_POOL, pool, REAL(cuMemPoolDestroy)(pool));
}

/* ---- graph memory ----
 * A graph allocation node (cuGraphAddMemAllocNode, or a stream-ordered
 * allocation captured into a graph) has only an address until its graph exec is
 * uploaded or launched; then the device's graph memory pool maps memory for it,
 * and keeps it across frees, relaunches and cuGraphExecDestroy until
 * cuDeviceGraphMemTrim. As with a stream-ordered pool, we count what the pool
 * holds: after every launch, upload, exec destroy and trim, the process's count
 * of that device's graph pool is set to CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT.
 * The limit is checked before the driver is reached:
 *  - at cuGraphAddMemAllocNode (and a captured allocation), its size against
 *    what the container holds now (an early, conservative refusal);
 *  - at instantiation the graph's allocation nodes are read (cuGraphGetNodes,
 *    cuGraphNodeGetType, cuGraphMemAllocNodeGetParams); their sizes rounded up
 *    to 2 MiB, per device, are the exec's;
 *  - a launch or upload of an exec not launched or uploaded since the device's
 *    last trim (not "bound") reserves those bytes first: the pool may have to
 *    grow that much. A bound exec keeps its memory: its relaunch needs nothing.
 * A graph reservation that is refused trims the device's graph pool (memory no
 * graph uses: the program cannot tell) and tries once more. */

#define GRAPH_GRAN (2ull << 20)

static int graph_cudev[VGPU_MAX_DEVICES];    /* CUDA ordinal + 1 of container device qi; 0 unknown */
static uint64_t graph_gen[VGPU_MAX_DEVICES]; /* trims of qi's graph pool so far */

static uint64_t gexec_key(CUgraphExec e, int qi) { return (uint64_t)(uintptr_t)e << 4 | (uint64_t)qi; }

static void graph_learn(int qi, CUdevice d)
{
    if (qi >= 0 && qi < VGPU_MAX_DEVICES && d >= 0)
        __atomic_store_n(&graph_cudev[qi], d + 1, __ATOMIC_RELAXED);
}

/* Sets the count of qi's graph pool to what the driver reports. -1: unknown. */
static int graph_sync(int qi)
{
    int d = __atomic_load_n(&graph_cudev[qi], __ATOMIC_RELAXED) - 1, mode;
    cuuint64_t v = 0;
    uint64_t old = 0;
    struct vgpu_rec r;
    CUresult rc;

    if (d < 0)
        return -1;
    mode = vgpu_capture_relax();
    rc = REALT(cuDeviceGetGraphMemAttribute_t, cuDeviceGetGraphMemAttribute)(d, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                                                                               &v);
    vgpu_capture_restore(mode);
    if (rc != CUDA_SUCCESS)
        return -1;
    r = (struct vgpu_rec){qi, v, 0};
    while (vgpu_ptr_set_size(VGPU_K_GRAPHPOOL, (uint64_t)qi, v, &old) != 0)
        if (vgpu_ptr_insert(VGPU_K_GRAPHPOOL, (uint64_t)qi, &r) == 0) {
            old = 0;
            break;
        }
    if (v > old)
        vgpu_region_add(qi, v - old);
    else
        vgpu_region_release(qi, old - v);
    return 0;
}

static void graph_sync_cb(uint64_t key, const struct vgpu_rec *r)
{
    (void)r;
    graph_sync((int)key);
}

/* Gives the device what qi's graph pool holds unused, as the program's own trim would. */
static void graph_trim(int qi)
{
    int d = __atomic_load_n(&graph_cudev[qi], __ATOMIC_RELAXED) - 1, mode;

    if (d < 0)
        return;
    mode = vgpu_capture_relax();
    REAL(cuDeviceGraphMemTrim)(d);
    vgpu_capture_restore(mode);
    __atomic_add_fetch(&graph_gen[qi], 1, __ATOMIC_ACQ_REL);
    graph_sync(qi);
}

static CUresult reserve_graph(int qi, uint64_t size)
{
    CUresult r = reserve(qi, size);

    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        graph_trim(qi);
        r = reserve(qi, size);
    }
    return r;
}

/* Reserves t's bytes on each of its devices, all or nothing. */
static CUresult graph_reserve_all(struct vgpu_graph_ticket *t)
{
    CUresult r;

    for (int i = 0; i < t->n; i++)
        if ((r = reserve_graph(t->qi[i], t->need[i])) != CUDA_SUCCESS) {
            while (i-- > 0)
                vgpu_region_release(t->qi[i], t->need[i]);
            t->n = 0;
            return r;
        }
    /* a trim from here on may unbind what this call binds: the exec is bound at this generation */
    for (int i = 0; i < t->n; i++)
        t->gen[i] = __atomic_load_n(&graph_gen[t->qi[i]], __ATOMIC_ACQUIRE);
    return CUDA_SUCCESS;
}

CUresult vgpu_graph_before(CUgraphExec e, struct vgpu_graph_ticket *t)
{
    struct vgpu_rec rec;

    t->n = 0;
    for (int qi = 0; qi < vgpu_q.ndev && qi < VGPU_MAX_DEVICES; qi++) {
        if (vgpu_ptr_get(VGPU_K_GEXEC, gexec_key(e, qi), &rec) != 0 ||
            rec.aux == __atomic_load_n(&graph_gen[qi], __ATOMIC_ACQUIRE) + 1)
            continue; /* no allocation nodes there, or bound: nothing new */
        t->qi[t->n] = qi;
        t->need[t->n++] = rec.size;
    }
    return graph_reserve_all(t);
}

void vgpu_graph_after(CUgraphExec e, struct vgpu_graph_ticket *t, CUresult r)
{
    for (int i = 0; i < t->n; i++) {
        int qi = t->qi[i];
        uint64_t key = gexec_key(e, qi);
        struct vgpu_rec fb = {qi, t->need[i], 0};

        if (r == CUDA_SUCCESS)
            vgpu_ptr_set_aux(VGPU_K_GEXEC, key, t->gen[i] + 1);
        /* the driver cannot report its graph pool: the exec's bytes count until it is destroyed */
        if (graph_sync(qi) == 0 || r != CUDA_SUCCESS || vgpu_ptr_insert(VGPU_K_GEXEC_FB, key, &fb) != 0)
            vgpu_region_release(qi, t->need[i]);
    }
}

/* The bytes of g's allocation nodes per container device, each rounded up to
 * 2 MiB; 1 when there are any. */
static int graph_alloc_bytes(CUgraph g, uint64_t bytes[VGPU_MAX_DEVICES])
{
    CUgraphNode *nodes;
    size_t n = 0;
    int any = 0;

    memset(bytes, 0, sizeof(uint64_t) * VGPU_MAX_DEVICES);
    if (REALT(cuGraphGetNodes_t, cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS || n == 0 ||
        n > SIZE_MAX / sizeof *nodes || !(nodes = malloc(n * sizeof *nodes)))
        return 0;
    if (REALT(cuGraphGetNodes_t, cuGraphGetNodes)(g, nodes, &n) == CUDA_SUCCESS)
        for (size_t i = 0; i < n; i++) {
            CUgraphNodeType type;
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            int qi;

            if (REALT(cuGraphNodeGetType_t, cuGraphNodeGetType)(nodes[i], &type) != CUDA_SUCCESS ||
                type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
                continue;
            memset(&p, 0, sizeof p);
            if (REALT(cuGraphMemAllocNodeGetParams_t, cuGraphMemAllocNodeGetParams)(nodes[i], &p) != CUDA_SUCCESS ||
                p.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
                (qi = quota_index(p.poolProps.location.id)) < 0)
                continue;
            graph_learn(qi, p.poolProps.location.id);
            bytes[qi] = vgpu_add_sat(bytes[qi], round_up(p.bytesize, GRAPH_GRAN));
            any = 1;
        }
    free(nodes);
    return any;
}

/* A new exec of a graph with allocation nodes: its bytes per device, not bound. */
static void graph_exec_record(CUgraphExec e, const uint64_t bytes[VGPU_MAX_DEVICES])
{
    for (int qi = 0; qi < vgpu_q.ndev && qi < VGPU_MAX_DEVICES; qi++) {
        struct vgpu_rec r = {qi, bytes[qi], 0}, old;
        uint64_t key = gexec_key(e, qi);

        if (!bytes[qi] || vgpu_ptr_insert(VGPU_K_GEXEC, key, &r) == 0)
            continue;
        /* a handle we still track: its destroy went past us; the new exec replaces it */
        vgpu_ptr_take(VGPU_K_GEXEC, key, &old);
        if (vgpu_ptr_take(VGPU_K_GEXEC_FB, key, &old) == 0)
            vgpu_region_release(qi, old.size);
        vgpu_ptr_insert(VGPU_K_GEXEC, key, &r);
    }
    /* graph launches leave their fast path for good (before the exec is handed out) */
    __atomic_store_n(&vgpu_graph_off, 0, __ATOMIC_RELEASE);
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *pn, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    int qi;
    CUresult r;

    READY();
    if (p && p->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if ((qi = quota_index(p->poolProps.location.id)) < 0)
            return CUDA_ERROR_INVALID_DEVICE;
        graph_learn(qi, p->poolProps.location.id);
        /* early refusal: it cannot fit beside what the container holds now */
        if ((r = reserve_graph(qi, p->bytesize)) != CUDA_SUCCESS)
            return r;
        vgpu_region_release(qi, p->bytesize);
    }
    return REAL(cuGraphAddMemAllocNode)(pn, g, deps, ndeps, p);
}

#define INSTANTIATE(pe, g, call)                                                                                       \
    do {                                                                                                               \
        uint64_t bytes_[VGPU_MAX_DEVICES];                                                                             \
        int any_;                                                                                                      \
        CUresult r_;                                                                                                   \
        READY();                                                                                                       \
        any_ = graph_alloc_bytes((g), bytes_);                                                                         \
        r_ = (call);                                                                                                   \
        if (r_ == CUDA_SUCCESS && any_ && (pe))                                                                        \
            graph_exec_record(*(pe), bytes_);                                                                          \
        return r_;                                                                                                     \
    } while (0)

CUresult cuGraphInstantiate(CUgraphExec *pe, CUgraph g, CUgraphNode *errNode, char *log, size_t logSize)
{
    INSTANTIATE(pe, g, REAL(cuGraphInstantiate)(pe, g, errNode, log, logSize));
}
CUresult cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph g, CUgraphNode *errNode, char *log, size_t logSize)
{
    INSTANTIATE(pe, g, REAL(cuGraphInstantiate_v2)(pe, g, errNode, log, logSize));
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph g, unsigned long long flags)
{
    INSTANTIATE(pe, g, REAL(cuGraphInstantiateWithFlags)(pe, g, flags));
}

/* CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: the instantiation uploads, as cuGraphUpload */
static CUresult instantiate_params(CUgraphExec *pe, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p, int ptsz)
{
    uint64_t bytes[VGPU_MAX_DEVICES];
    struct vgpu_graph_ticket t;
    int any, upload;
    CUresult r;

    READY();
    any = graph_alloc_bytes(g, bytes);
    upload = any && p && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
    t.n = 0;
    if (upload) {
        for (int qi = 0; qi < VGPU_MAX_DEVICES; qi++)
            if (bytes[qi]) {
                t.qi[t.n] = qi;
                t.need[t.n++] = bytes[qi];
            }
        if ((r = graph_reserve_all(&t)) != CUDA_SUCCESS) {
            p->hErrNode_out = NULL;
            p->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
            return r;
        }
    }
    r = ptsz ? REAL(cuGraphInstantiateWithParams_ptsz)(pe, g, p) : REAL(cuGraphInstantiateWithParams)(pe, g, p);
    if (r == CUDA_SUCCESS && any && pe)
        graph_exec_record(*pe, bytes);
    if (upload)
        vgpu_graph_after(r == CUDA_SUCCESS ? *pe : NULL, &t, r);
    return r;
}

CUresult cuGraphInstantiateWithParams(CUgraphExec *pe, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_params(pe, g, p, 0);
}
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *pe, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_params(pe, g, p, 1);
}

static CUresult upload(CUgraphExec e, CUstream s, int ptsz)
{
    struct vgpu_graph_ticket t;
    CUresult r;

    READY();
    if ((r = vgpu_graph_before(e, &t)) != CUDA_SUCCESS)
        return r;
    r = ptsz ? REAL(cuGraphUpload_ptsz)(e, s) : REAL(cuGraphUpload)(e, s);
    vgpu_graph_after(e, &t, r);
    return r;
}

CUresult cuGraphUpload(CUgraphExec e, CUstream s) { return upload(e, s, 0); }
CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s) { return upload(e, s, 1); }

CUresult cuGraphExecDestroy(CUgraphExec e)
{
    struct vgpu_rec rec[VGPU_MAX_DEVICES], fb[VGPU_MAX_DEVICES];
    int had[VGPU_MAX_DEVICES], hadfb[VGPU_MAX_DEVICES], n;
    CUresult r;

    READY();
    n = vgpu_q.ndev < VGPU_MAX_DEVICES ? vgpu_q.ndev : VGPU_MAX_DEVICES;
    for (int qi = 0; qi < n; qi++) {
        had[qi] = vgpu_ptr_take(VGPU_K_GEXEC, gexec_key(e, qi), &rec[qi]) == 0;
        hadfb[qi] = vgpu_ptr_take(VGPU_K_GEXEC_FB, gexec_key(e, qi), &fb[qi]) == 0;
    }
    r = REAL(cuGraphExecDestroy)(e);
    for (int qi = 0; qi < n; qi++) {
        if (r != CUDA_SUCCESS) {
            if (had[qi])
                vgpu_ptr_insert(VGPU_K_GEXEC, gexec_key(e, qi), &rec[qi]);
            if (hadfb[qi])
                vgpu_ptr_insert(VGPU_K_GEXEC_FB, gexec_key(e, qi), &fb[qi]);
            continue;
        }
        if (hadfb[qi])
            vgpu_region_release(qi, fb[qi].size);
        if (had[qi])
            graph_sync(qi); /* a driver may keep the memory until a trim, or give it back now */
    }
    return r;
}

CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    int qi;
    CUresult r;

    READY();
    r = REAL(cuDeviceGraphMemTrim)(dev);
    if (r == CUDA_SUCCESS && (qi = quota_index(dev)) >= 0) {
        graph_learn(qi, dev);
        __atomic_add_fetch(&graph_gen[qi], 1, __ATOMIC_ACQ_REL);
        graph_sync(qi);
    }
    return r;
}

/* ---- virtual memory management ---- */

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    int qi;
    CUresult r;

    READY();
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return REAL(cuMemCreate)(h, size, prop, flags); /* host memory is not device memory */
    if ((qi = quota_index(prop->location.id)) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if ((r = reserve(qi, size)) != CUDA_SUCCESS)
        return r;
    r = REAL(cuMemCreate)(h, size, prop, flags);
    if (r == CUDA_SUCCESS)
        commit(VGPU_K_VMM, *h, qi, size, 0);
    else
        vgpu_region_release(qi, size);
    return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    READY();
    RELEASE_WITH(VGPU_K_VMM, h, REAL(cuMemRelease)(h));
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
    uint64_t row = round_up(mul_sat(mul_sat(w ? w : 1, ch ? ch : 1), elem_size(f)), 512);
    return round_up(mul_sat(mul_sat(row, h ? h : 1), d ? d : 1), 65536);
}

#define ARRAY_ALLOC(kind, handle, bytes, call)                                                                         \
    do {                                                                                                               \
        int qi_;                                                                                                       \
        uint64_t n_ = (bytes);                                                                                         \
        CUresult r_;                                                                                                   \
        READY();                                                                                                       \
        if ((r_ = current_qi(&qi_)) != CUDA_SUCCESS || (r_ = reserve(qi_, n_)) != CUDA_SUCCESS)                        \
            return r_;                                                                                                 \
        r_ = (call);                                                                                                   \
        if (r_ == CUDA_SUCCESS)                                                                                        \
            commit(kind, (uint64_t)(uintptr_t)*(handle), qi_, n_, 0);                                                  \
        else                                                                                                           \
            vgpu_region_release(qi_, n_);                                                                              \
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
    RELEASE_WITH(VGPU_K_ARRAY, arr, REAL(cuArrayDestroy)(arr));
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
    RELEASE_WITH(VGPU_K_MIPMAP, mh, REAL(cuMipmappedArrayDestroy)(mh));
}

/* ---- contexts ----
 * A context costs device memory the program never asked for. We measure it:
 * the device's free memory (real NVML, opened privately) before and after the
 * creation, clamped at 0, and count it until the context goes. Concurrent
 * activity of other processes can blur one measurement; it is never negative. */

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
    qi = quota_index(dev);
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
    struct vgpu_rec rec;

    if (REALT(cuDevicePrimaryCtxGetState_t, cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS &&
        !active && vgpu_ptr_take(VGPU_K_PRIMARY, (uint64_t)dev, &rec) == 0)
        vgpu_region_release(rec.dev, rec.size);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult r;

    READY();
    vgpu_compute_ctx_gone(NULL, dev, 1);
    r = REAL(cuDevicePrimaryCtxRelease_v2)(dev);
    if (r == CUDA_SUCCESS)
        primary_gone_if_inactive(dev);
    return r;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUresult r;

    READY();
    vgpu_compute_ctx_gone(NULL, dev, 1);
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
        if ((qi_ = quota_index(dev)) < 0)                                                                              \
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
    vgpu_compute_ctx_gone(ctx, 0, 0);
    RELEASE_WITH(VGPU_K_CTX, ctx, REAL(cuCtxDestroy_v2)(ctx));
}
