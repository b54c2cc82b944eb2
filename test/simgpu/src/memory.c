/* Device memory. Every byte a process holds on a device is charged to its slot
 * in the shared state against the device's fixed capacity; one byte past the
 * capacity is CUDA_ERROR_OUT_OF_MEMORY. Allocations are backed by real host
 * memory (anonymous MAP_NORESERVE mappings, or a memfd for cuMemCreate) so that
 * copies move real bytes; untouched pages cost the host nothing. The device
 * address of an allocation is the address of its backing mapping, which gives
 * unified addressing for free (host pointers never collide with it). */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALLOC_ALIGN 512ULL /* cuMemAlloc alignment; charges are rounded to it */
#define ROUND(x, a) (((x) + (a)-1) / (a) * (a))

static uint64_t ru2m(uint64_t x) { return x > UINT64_MAX - SIM_GRANULARITY ? UINT64_MAX / SIM_GRANULARITY * SIM_GRANULARITY : ROUND(x, SIM_GRANULARITY); }

/* ---- allocation table, sorted by base ---- */
static size_t alloc_lower(uintptr_t p)
{
    size_t lo = 0, hi = g.nalloc;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g.allocs[mid].base <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo; /* first entry with base > p */
}

struct alloc *alloc_find(uintptr_t p)
{
    size_t i = alloc_lower(p);
    if (i == 0) return NULL;
    struct alloc *a = &g.allocs[i - 1];
    return p < a->base + (a->size ? a->size : 1) ? a : NULL;
}

int alloc_add(const struct alloc *a)
{
    if (g.nalloc == g.calloc_) {
        size_t n = g.calloc_ ? g.calloc_ * 2 : 256;
        struct alloc *na = realloc(g.allocs, n * sizeof *na);
        if (!na) return -1;
        g.allocs = na;
        g.calloc_ = n;
    }
    size_t i = alloc_lower(a->base);
    memmove(&g.allocs[i + 1], &g.allocs[i], (g.nalloc - i) * sizeof *a);
    g.allocs[i] = *a;
    g.nalloc++;
    return 0;
}

void alloc_remove(uintptr_t base)
{
    size_t i = alloc_lower(base);
    if (i == 0 || g.allocs[i - 1].base != base) return;
    i--;
    memmove(&g.allocs[i], &g.allocs[i + 1], (g.nalloc - i - 1) * sizeof g.allocs[0]);
    g.nalloc--;
}

void *sim_map(size_t size, size_t *map_size)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    size_t m = ROUND(size ? size : 1, ps);
    void *p = mmap(NULL, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    *map_size = m;
    return p;
}

static int devaccessible(const struct alloc *a)
{
    switch (a->kind) {
    case A_DEV:
    case A_MANAGED:
    case A_POOL:
    case A_HOST:
    case A_HOSTREG: return 1;
    case A_MAPPED: return a->access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    case A_GRAPH: return a->gm && a->gm->live;
    default: return 0;
    }
}

/* [p, p+n) must lie in device-accessible memory (possibly several adjacent VMM
 * mappings). Checked before touching it, so a bad pointer is an error code. */
CUresult dev_range(CUdeviceptr p, size_t n)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (n == 0) n = 1;
    uintptr_t cur = (uintptr_t)p, end = (uintptr_t)p + n;
    if (end < cur) return CUDA_ERROR_INVALID_VALUE;
    while (cur < end) {
        struct alloc *a = alloc_find(cur);
        if (!a || !devaccessible(a)) return CUDA_ERROR_INVALID_VALUE;
        cur = a->base + a->size;
    }
    return CUDA_SUCCESS;
}

static uint64_t cap_of(int cfg) { return sim_usable(&g.env.cfg.dev[cfg]); }

static CUresult new_devmem(struct ctx *c, size_t size, int kind, unsigned flags, CUdeviceptr *out)
{
    uint64_t charge = ROUND((uint64_t)size, ALLOC_ALIGN);
    if (charge < size) return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_charge(&g.st, c->cfg, cap_of(c->cfg), charge) < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t ms;
    void *p = sim_map(size, &ms);
    if (!p) {
        sim_uncharge(&g.st, c->cfg, charge);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct alloc a = {.base = (uintptr_t)p, .size = size, .map_size = ms, .charge = charge, .kind = kind, .cfg = c->cfg, .flags = flags, .ctx = c};
    if (alloc_add(&a) < 0) {
        munmap(p, ms);
        sim_uncharge(&g.st, c->cfg, charge);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    LEAVE(new_devmem(c, bytesize, A_DEV, 0, dptr));
}

/* pitch: row width rounded up to 512 bytes, as the driver does on sm_90 */
SIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes)
{
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = ROUND(WidthInBytes, 512);
    if (pitch < WidthInBytes || Height > SIZE_MAX / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    r = new_devmem(c, pitch * Height, A_DEV, 0, dptr);
    if (r == CUDA_SUCCESS) *pPitch = pitch;
    LEAVE(r);
}

/* Managed memory is charged to the device like cuMemAlloc: the simulator has no
 * page migration, and the product must treat it as device memory. */
SIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (!dptr || bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    LEAVE(new_devmem(c, bytesize, A_MANAGED, flags, dptr));
}

static void pool_free_bytes(struct pool *p, uint64_t sz);
static CUresult gmem_free(struct gmem *gm);

static CUresult free_locked(CUdeviceptr dptr)
{
    struct alloc *a = alloc_find((uintptr_t)dptr);
    if (!a || a->base != (uintptr_t)dptr) return CUDA_ERROR_INVALID_VALUE;
    struct alloc copy = *a;
    switch (copy.kind) {
    case A_DEV:
    case A_MANAGED:
        alloc_remove(copy.base);
        munmap((void *)copy.base, copy.map_size);
        sim_uncharge(&g.st, copy.cfg, copy.charge);
        return CUDA_SUCCESS;
    case A_POOL:
        alloc_remove(copy.base);
        munmap((void *)copy.base, copy.map_size);
        pool_free_bytes(copy.pool, copy.charge);
        return CUDA_SUCCESS;
    case A_GRAPH:
        return gmem_free(copy.gm);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    LEAVE(free_locked(dptr));
}

void free_ctx_allocs(struct ctx *c)
{
    for (size_t i = g.nalloc; i-- > 0;) {
        struct alloc *a = &g.allocs[i];
        if (a->ctx != c) continue;
        if (a->kind == A_DEV || a->kind == A_MANAGED || a->kind == A_POOL) {
            free_locked(a->base);
        } else if (a->kind == A_HOST) {
            struct alloc copy = *a;
            alloc_remove(copy.base);
            munmap((void *)copy.base, copy.map_size);
        } else if (a->kind == A_HOSTREG) {
            alloc_remove(a->base);
        }
    }
}

SIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total)
{
    if (!free_ || !total) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    uint64_t cap = cap_of(c->cfg);
    sim_lock(g.st.sh);
    sim_reap_locked(&g.st);
    uint64_t used = sim_used_locked(g.st.sh, c->cfg);
    sim_unlock(g.st.sh);
    *total = cap;
    *free_ = used >= cap ? 0 : cap - used;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    ENTER();
    struct alloc *a = alloc_find((uintptr_t)dptr);
    if (!a || a->kind == A_HOST || a->kind == A_HOSTREG || !devaccessible(a)) LEAVE(CUDA_ERROR_NOT_FOUND);
    if (pbase) *pbase = a->base;
    if (psize) *psize = a->size;
    LEAVE(CUDA_SUCCESS);
}

/* ---- host memory: page-locked in a real driver, never device memory ---- */
static CUresult host_alloc(void **pp, size_t size, unsigned flags)
{
    if (!pp) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    if (size == 0) {
        *pp = NULL;
        LEAVE(CUDA_SUCCESS);
    }
    size_t ps = (size_t)sysconf(_SC_PAGESIZE), ms = ROUND(size, ps);
    void *p = mmap(NULL, ms, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    struct alloc a = {.base = (uintptr_t)p, .size = size, .map_size = ms, .kind = A_HOST, .cfg = c->cfg, .flags = flags, .ctx = c};
    if (alloc_add(&a) < 0) {
        munmap(p, ms);
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    }
    *pp = p;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return host_alloc(pp, bytesize, 0); }
SIM_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) { return host_alloc(pp, bytesize, flags); }

SIM_EXPORT CUresult cuMemFreeHost(void *p)
{
    ENTER();
    struct alloc *a = alloc_find((uintptr_t)p);
    if (!a || a->kind != A_HOST || a->base != (uintptr_t)p) LEAVE(CUDA_ERROR_INVALID_VALUE);
    struct alloc copy = *a;
    alloc_remove(copy.base);
    munmap((void *)copy.base, copy.map_size);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    if (!pdptr || !p || flags) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct alloc *a = alloc_find((uintptr_t)p);
    if (!a || (a->kind != A_HOST && a->kind != A_HOSTREG)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    *pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: same address */
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    if (!pFlags) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct alloc *a = alloc_find((uintptr_t)p);
    if (!a || (a->kind != A_HOST && a->kind != A_HOSTREG)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    *pFlags = a->flags | CU_MEMHOSTALLOC_DEVICEMAP;
    LEAVE(CUDA_SUCCESS);
}

static CUresult host_register(void *p, size_t size, unsigned flags)
{
    if (!p || size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~0xfu) return CUDA_ERROR_INVALID_VALUE;
    if ((uintptr_t)p + size < (uintptr_t)p) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    /* overlap with anything already known (registered, pinned, device) */
    size_t i = alloc_lower((uintptr_t)p + size - 1);
    if (i > 0) {
        struct alloc *a = &g.allocs[i - 1];
        if (a->base + a->size > (uintptr_t)p) LEAVE(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    }
    struct alloc a = {.base = (uintptr_t)p, .size = size, .kind = A_HOSTREG, .cfg = c->cfg, .flags = flags, .ctx = c};
    if (alloc_add(&a) < 0) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    LEAVE(CUDA_SUCCESS);
}
SIM_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags) { return host_register(p, bytesize, flags); }
SIM_EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int flags) { return host_register(p, bytesize, flags); }

SIM_EXPORT CUresult cuMemHostUnregister(void *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct alloc *a = alloc_find((uintptr_t)p);
    if (!a || a->kind != A_HOSTREG || a->base != (uintptr_t)p) LEAVE(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    alloc_remove(a->base);
    LEAVE(CUDA_SUCCESS);
}

/* ---- stream-ordered allocator: pools reserve device memory in 2 MiB steps;
 * freed blocks stay reserved until trimmed (cuMemPoolTrimTo) or until a
 * synchronization finds the pool above its release threshold. Fragmentation is
 * not modelled: free space in a pool is one number. ---- */
static struct pool *pool_new(int ord, int is_default)
{
    struct pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->o.type = OT_POOL;
    p->ord = ord;
    p->cfg = cfg_of(ord);
    p->is_default = is_default;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->next = g.pools;
    g.pools = p;
    reg_add(p, OT_POOL);
    return p;
}

static struct pool *default_pool(int ord)
{
    if (!g.default_pool[ord]) g.default_pool[ord] = pool_new(ord, 1);
    return g.default_pool[ord];
}

static struct pool *current_pool(int ord)
{
    if (!g.cur_pool[ord]) g.cur_pool[ord] = default_pool(ord);
    return g.cur_pool[ord];
}

static void pool_shrink(struct pool *p, uint64_t keep)
{
    if (keep < ru2m(p->used)) keep = ru2m(p->used);
    if (keep >= p->reserved) return;
    sim_uncharge(&g.st, p->cfg, p->reserved - keep);
    p->reserved = keep;
}

static void pool_free_bytes(struct pool *p, uint64_t sz)
{
    p->used = p->used >= sz ? p->used - sz : 0;
    if (!reg_has(p, OT_POOL)) pool_shrink(p, 0); /* destroyed pool: give back at once */
}

void pools_trim_sync(int cfg)
{
    for (struct pool *p = g.pools; p; p = p->next)
        if (p->cfg == cfg && p->reserved > p->threshold) pool_shrink(p, p->threshold);
}

void pool_release_unused_all(int cfg)
{
    for (struct pool *p = g.pools; p; p = p->next)
        if (p->cfg == cfg) pool_shrink(p, 0);
}

static CUresult pool_alloc(struct pool *p, struct ctx *c, size_t size, CUdeviceptr *out)
{
    uint64_t sz = ROUND((uint64_t)size, ALLOC_ALIGN);
    if (sz < size) return CUDA_ERROR_OUT_OF_MEMORY;
    if (p->used + sz > p->reserved) {
        uint64_t grow = ru2m(p->used + sz - p->reserved);
        if (p->max_size && p->reserved + grow > p->max_size) return CUDA_ERROR_OUT_OF_MEMORY;
        if (sim_charge(&g.st, p->cfg, cap_of(p->cfg), grow) < 0) return CUDA_ERROR_OUT_OF_MEMORY;
        p->reserved += grow;
        if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
    }
    size_t ms;
    void *m = sim_map(size, &ms);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    struct alloc a = {.base = (uintptr_t)m, .size = size, .map_size = ms, .charge = sz, .kind = A_POOL, .cfg = p->cfg, .ctx = c, .pool = p};
    if (alloc_add(&a) < 0) {
        munmap(m, ms);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->used += sz;
    if (p->used > p->used_high) p->used_high = p->used;
    *out = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

/* allocation inside a capture becomes a graph allocation node */
static CUresult capture_alloc(struct stream *s, size_t size, CUdeviceptr *out)
{
    struct gmem *gm = gmem_new(s->o.ctx->ord, size);
    if (!gm) return CUDA_ERROR_OUT_OF_MEMORY;
    struct gnode *n = capture_node(s, GN_MEMALLOC);
    if (!n) {
        gmem_unref(gm);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    n->gm = gm;
    n->dptr = gm->base;
    n->size = size;
    *out = gm->base;
    return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, struct pool *pool, CUstream h, int ptsz)
{
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    struct stream *s;
    if ((r = resolve_stream(h, ptsz, &s))) LEAVE(r);
    if (pool && !reg_has(pool, OT_POOL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (!pool) pool = current_pool(s->o.ctx->ord);
    if (s->cap) LEAVE(capture_alloc(s, size, dptr));
    r = pool_alloc(pool, s->o.ctx, size, dptr);
    if (r == CUDA_SUCCESS) stream_done_at(s, stream_ready(s));
    LEAVE(r);
}

SIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) { return alloc_async(dptr, bytesize, NULL, hStream, 0); }
SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) { return alloc_async(dptr, bytesize, NULL, hStream, 1); }
SIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, bytesize, (struct pool *)pool, hStream, 0);
}
SIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, bytesize, (struct pool *)pool, hStream, 1);
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, int ptsz)
{
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    struct stream *s;
    if ((r = resolve_stream(h, ptsz, &s))) LEAVE(r);
    struct alloc *a = alloc_find((uintptr_t)dptr);
    if (!a || a->base != (uintptr_t)dptr) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (s->cap) {
        if (a->kind != A_GRAPH) LEAVE(CUDA_ERROR_INVALID_VALUE);
        struct gnode *n = capture_node(s, GN_MEMFREE);
        if (!n) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        n->gm = a->gm;
        a->gm->refs++;
        n->dptr = dptr;
        LEAVE(CUDA_SUCCESS);
    }
    r = free_locked(dptr);
    if (r == CUDA_SUCCESS) stream_done_at(s, stream_ready(s));
    LEAVE(r);
}
SIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, 0); }
SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, 1); }

static int loc_ok(const CUmemLocation *l) { return l->type == CU_MEM_LOCATION_TYPE_DEVICE && dev_ok(l->id); }

SIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (props->location.type == CU_MEM_LOCATION_TYPE_HOST || props->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
        LEAVE(CUDA_ERROR_NOT_SUPPORTED);
    if (!loc_ok(&props->location)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (props->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) LEAVE(CUDA_ERROR_NOT_SUPPORTED);
    struct pool *p = pool_new(props->location.id, 0);
    if (!p) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    p->max_size = props->maxSize;
    *pool = (CUmemoryPool)p;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool h)
{
    ENTER();
    struct pool *p = (struct pool *)h;
    if (!reg_has(p, OT_POOL) || p->is_default) LEAVE(CUDA_ERROR_INVALID_VALUE);
    reg_del(p);
    if (g.cur_pool[p->ord] == p) g.cur_pool[p->ord] = NULL;
    pool_shrink(p, 0); /* outstanding allocations give back their bytes on free */
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool h, size_t minBytesToKeep)
{
    ENTER();
    struct pool *p = (struct pool *)h;
    if (!reg_has(p, OT_POOL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    pool_shrink(p, ru2m(minBytesToKeep));
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void *value)
{
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct pool *p = (struct pool *)h;
    if (!reg_has(p, OT_POOL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - 1] = *(int *)value != 0;
        LEAVE(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = *(cuuint64_t *)value; LEAVE(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0) LEAVE(CUDA_ERROR_INVALID_VALUE);
        p->reserved_high = p->reserved;
        LEAVE(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0) LEAVE(CUDA_ERROR_INVALID_VALUE);
        p->used_high = p->used;
        LEAVE(CUDA_SUCCESS);
    default: LEAVE(CUDA_ERROR_INVALID_VALUE);
    }
}

SIM_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void *value)
{
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct pool *p = (struct pool *)h;
    if (!reg_has(p, OT_POOL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse[attr - 1];
        LEAVE(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->threshold; LEAVE(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = p->reserved; LEAVE(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = p->reserved_high; LEAVE(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; LEAVE(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->used_high; LEAVE(CUDA_SUCCESS);
    default: LEAVE(CUDA_ERROR_INVALID_VALUE);
    }
}

SIM_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool h, const CUmemAccessDesc *map, size_t count)
{
    if (!map && count) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!reg_has(h, OT_POOL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < count; i++)
        if (!loc_ok(&map[i].location)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    struct pool *p = default_pool(dev);
    if (!p) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    *pool = (CUmemoryPool)p;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    struct pool *p = current_pool(dev);
    if (!p) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    *pool = (CUmemoryPool)p;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool h)
{
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    struct pool *p = (struct pool *)h;
    if (!reg_has(p, OT_POOL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (p->ord != dev) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    g.cur_pool[dev] = p;
    LEAVE(CUDA_SUCCESS);
}

/* ---- graph memory ----
 * Each process has a graph memory pool per device, as with the driver. A graph
 * allocation gets physical memory from it (its size rounded up to 2 MiB) when
 * its graph exec is uploaded or first launched, and keeps it across launches,
 * frees and relaunches. Only cuDeviceGraphMemTrim shrinks the pool: it unbinds
 * what is bound to allocations that are neither live nor in a launch still
 * executing, and gives the device everything unbound. Destroying the exec (or
 * the graph) unbinds its memory but leaves it reserved: destroying a graph does
 * not return its memory, a trim does. The pool grows, charged to the device,
 * by what its unbound reserve lacks. */

static uint64_t add_sat(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

struct gmem *gmem_new(int ord, size_t size)
{
    struct gmem *gm = calloc(1, sizeof *gm);
    if (!gm) return NULL;
    void *m = sim_map(size, &gm->map_size);
    if (!m) {
        free(gm);
        return NULL;
    }
    gm->base = (CUdeviceptr)(uintptr_t)m;
    gm->size = size;
    gm->ord = ord;
    gm->cfg = cfg_of(ord);
    gm->refs = 1;
    struct alloc a = {.base = (uintptr_t)m, .size = size, .map_size = gm->map_size, .kind = A_GRAPH, .cfg = gm->cfg, .gm = gm};
    if (alloc_add(&a) < 0) {
        munmap(m, gm->map_size);
        free(gm);
        return NULL;
    }
    return gm;
}

void gmem_unbind(struct gmem *gm)
{
    if (!gm->phys) return;
    g.gbound[gm->cfg] = g.gbound[gm->cfg] >= gm->phys ? g.gbound[gm->cfg] - gm->phys : 0;
    gm->phys = 0;
}

static void gmem_destroy(struct gmem *gm)
{
    gmem_unbind(gm); /* stays reserved in the pool until a trim */
    alloc_remove((uintptr_t)gm->base);
    munmap((void *)(uintptr_t)gm->base, gm->map_size);
    free(gm);
}

void gmem_unref(struct gmem *gm)
{
    if (!gm || --gm->refs > 0) return;
    if (!gm->live) gmem_destroy(gm); /* a live allocation outlives its nodes until it is freed */
}

/* cuMemFree / cuMemFreeAsync of a graph allocation */
static CUresult gmem_free(struct gmem *gm)
{
    if (!gm->live) return CUDA_ERROR_INVALID_VALUE;
    gm->live = 0;
    if (gm->refs <= 0) gmem_destroy(gm);
    return CUDA_SUCCESS;
}

/* Physical memory for every allocation node of e that has none, all or nothing. */
CUresult gmem_bind_exec(struct gexec *e)
{
    uint64_t need[SIM_MAX_DEV] = {0}, grown[SIM_MAX_DEV] = {0};
    for (int i = 0; i < e->n; i++) {
        struct gmem *gm = e->nodes[i].gm;
        if (e->nodes[i].kind == GN_MEMALLOC && !gm->phys) need[gm->cfg] = add_sat(need[gm->cfg], ru2m(gm->size));
    }
    for (int c = 0; c < SIM_MAX_DEV; c++) {
        uint64_t spare = g.gres[c] - g.gbound[c];
        if (need[c] <= spare) continue;
        grown[c] = need[c] - spare;
        if (sim_charge(&g.st, c, cap_of(c), grown[c]) < 0) {
            for (int k = 0; k < c; k++)
                if (grown[k]) {
                    sim_uncharge(&g.st, k, grown[k]);
                    g.gres[k] -= grown[k];
                }
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        g.gres[c] += grown[c];
        if (g.gres[c] > g.gres_high[c]) g.gres_high[c] = g.gres[c];
    }
    for (int i = 0; i < e->n; i++) {
        struct gmem *gm = e->nodes[i].gm;
        if (e->nodes[i].kind != GN_MEMALLOC || gm->phys) continue;
        gm->phys = ru2m(gm->size);
        g.gbound[gm->cfg] += gm->phys;
        if (g.gbound[gm->cfg] > g.gbound_high[gm->cfg]) g.gbound_high[gm->cfg] = g.gbound[gm->cfg];
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    int cfg = cfg_of(dev);
    uint64_t now = sim_now();
    for (size_t i = 0; i < g.nalloc; i++) {
        struct alloc *a = &g.allocs[i];
        if (a->kind == A_GRAPH && a->cfg == cfg && !a->gm->live && a->gm->busy_until <= now) gmem_unbind(a->gm);
    }
    if (g.gres[cfg] > g.gbound[cfg]) {
        sim_uncharge(&g.st, cfg, g.gres[cfg] - g.gbound[cfg]);
        g.gres[cfg] = g.gbound[cfg];
    }
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    int c = cfg_of(dev);
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = g.gbound[c]; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = g.gbound_high[c]; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = g.gres[c]; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = g.gres_high[c]; break;
    default: LEAVE(CUDA_ERROR_INVALID_VALUE);
    }
    LEAVE(CUDA_SUCCESS);
}

/* only the high watermarks, and only reset (to the current value) */
SIM_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    if (!value || *(cuuint64_t *)value != 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!dev_ok(dev)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
    int c = cfg_of(dev);
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) g.gbound_high[c] = g.gbound[c];
    else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) g.gres_high[c] = g.gres[c];
    else LEAVE(CUDA_ERROR_INVALID_VALUE);
    LEAVE(CUDA_SUCCESS);
}

/* ---- virtual memory management ---- */
SIM_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option)
{
    if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !loc_ok(&prop->location)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    *granularity = SIM_GRANULARITY;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!handle || !prop || flags || size == 0 || size % SIM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !loc_ok(&prop->location)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) LEAVE(CUDA_ERROR_NOT_SUPPORTED);
    int ord = prop->location.id, cfg = cfg_of(ord);
    if (sim_charge(&g.st, cfg, cap_of(cfg), size) < 0) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    int fd = memfd_create("simgpu-vmm", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
        if (fd >= 0) close(fd);
        sim_uncharge(&g.st, cfg, size);
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    }
    struct memhandle *m = calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        sim_uncharge(&g.st, cfg, size);
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    }
    m->o.type = OT_MEMHANDLE;
    m->cfg = cfg;
    m->ord = ord;
    m->memfd = fd;
    m->size = size;
    m->refs = 1;
    reg_add(m, OT_MEMHANDLE);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)m;
    LEAVE(CUDA_SUCCESS);
}

static void mh_maybe_free(struct memhandle *m)
{
    if (!m->released || m->maps > 0) return;
    sim_uncharge(&g.st, m->cfg, m->size);
    close(m->memfd);
    free(m);
}

SIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ENTER();
    struct memhandle *m = (struct memhandle *)(uintptr_t)handle;
    if (!reg_has(m, OT_MEMHANDLE)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (--m->refs > 0) LEAVE(CUDA_SUCCESS); /* retained: as many releases as references */
    reg_del(m);
    m->released = 1;
    mh_maybe_free(m); /* memory goes when the last mapping goes, as in the driver */
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags)
{
    (void)addr; /* a hint only */
    if (!ptr || size == 0 || size % SIM_GRANULARITY || flags) return CUDA_ERROR_INVALID_VALUE;
    if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    size_t al = alignment > SIM_GRANULARITY ? alignment : SIM_GRANULARITY;
    if (size > SIZE_MAX - al) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    uint8_t *p = mmap(NULL, size + al, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    uintptr_t base = ROUND((uintptr_t)p, al);
    if (base > (uintptr_t)p) munmap(p, base - (uintptr_t)p);
    uintptr_t end = (uintptr_t)p + size + al;
    if (end > base + size) munmap((void *)(base + size), end - (base + size));
    struct reservation *r = malloc(sizeof *r);
    if (!r) {
        munmap((void *)base, size);
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    }
    r->base = base;
    r->size = size;
    r->next = g.resv;
    g.resv = r;
    *ptr = base;
    LEAVE(CUDA_SUCCESS);
}

static struct reservation *resv_containing(uintptr_t p, size_t n)
{
    for (struct reservation *r = g.resv; r; r = r->next)
        if (p >= r->base && p + n <= r->base + r->size && p + n >= p) return r;
    return NULL;
}

static int mapped_overlap(uintptr_t p, size_t n)
{
    for (size_t i = 0; i < g.nalloc; i++) {
        struct alloc *a = &g.allocs[i];
        if (a->kind == A_MAPPED && a->base < p + n && p < a->base + a->size) return 1;
    }
    return 0;
}

SIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    ENTER();
    struct reservation **pp = &g.resv;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->base == ptr && (*pp)->size == size) break;
    if (!*pp) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (mapped_overlap(ptr, size)) LEAVE(CUDA_ERROR_INVALID_VALUE); /* unmap first */
    struct reservation *r = *pp;
    *pp = r->next;
    munmap((void *)r->base, r->size);
    free(r);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    if (flags || size == 0 || size % SIM_GRANULARITY || offset % SIM_GRANULARITY || ptr % SIM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct memhandle *m = (struct memhandle *)(uintptr_t)handle;
    if (!reg_has(m, OT_MEMHANDLE)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if (offset > m->size || size > m->size - offset) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (!resv_containing(ptr, size)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (mapped_overlap(ptr, size)) LEAVE(CUDA_ERROR_ALREADY_MAPPED);
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, m->memfd, (off_t)offset);
    if (p == MAP_FAILED) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    struct alloc a = {.base = ptr, .size = size, .map_size = size, .kind = A_MAPPED, .cfg = m->cfg, .mh = m, .access = CU_MEM_ACCESS_FLAGS_PROT_NONE};
    if (alloc_add(&a) < 0) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    m->maps++;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!resv_containing(ptr, size)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    /* the range must be covered by whole mappings */
    for (size_t i = 0; i < g.nalloc; i++) {
        struct alloc *a = &g.allocs[i];
        if (a->kind != A_MAPPED || !(a->base < ptr + size && ptr < a->base + a->size)) continue;
        if (a->base < ptr || a->base + a->size > ptr + size) LEAVE(CUDA_ERROR_INVALID_VALUE);
    }
    for (size_t i = g.nalloc; i-- > 0;) {
        struct alloc *a = &g.allocs[i];
        if (a->kind != A_MAPPED || !(a->base < ptr + size && ptr < a->base + a->size)) continue;
        struct alloc copy = *a;
        alloc_remove(copy.base);
        /* keep the reservation: put an inaccessible anonymous mapping back */
        mmap((void *)copy.base, copy.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        copy.mh->maps--;
        mh_maybe_free(copy.mh);
    }
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    int flags = -1;
    for (size_t i = 0; i < count; i++) {
        if (!loc_ok(&desc[i].location)) LEAVE(CUDA_ERROR_INVALID_DEVICE);
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            LEAVE(CUDA_ERROR_INVALID_VALUE);
        flags = (int)desc[i].flags;
    }
    /* the whole range must be mapped */
    uintptr_t cur = ptr, end = ptr + size;
    while (cur < end) {
        struct alloc *a = alloc_find(cur);
        if (!a || a->kind != A_MAPPED) LEAVE(CUDA_ERROR_INVALID_VALUE);
        cur = a->base + a->size;
    }
    int prot = flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE : flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ
                                                                                                                             : PROT_NONE;
    for (cur = ptr; cur < end;) {
        struct alloc *a = alloc_find(cur);
        mprotect((void *)a->base, a->size, prot);
        a->access = flags;
        cur = a->base + a->size;
    }
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct alloc *a = alloc_find(ptr);
    if (!a || a->kind != A_MAPPED) LEAVE(CUDA_ERROR_INVALID_VALUE);
    *flags = (unsigned long long)a->access;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct alloc *a = alloc_find((uintptr_t)addr);
    if (!a || a->kind != A_MAPPED) LEAVE(CUDA_ERROR_INVALID_VALUE);
    /* the handle used to map it, one more reference (valid again if it had
     * been released while mapped) */
    struct memhandle *m = a->mh;
    if (!reg_has(m, OT_MEMHANDLE)) {
        reg_add(m, OT_MEMHANDLE);
        m->released = 0;
        m->refs = 0;
    }
    m->refs++;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)m;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    if (!prop) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct memhandle *m = (struct memhandle *)(uintptr_t)handle;
    if (!reg_has(m, OT_MEMHANDLE)) LEAVE(CUDA_ERROR_INVALID_VALUE);
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = m->ord;
    LEAVE(CUDA_SUCCESS);
}

/* ---- arrays: device memory with no address; charged like cuMemAlloc ---- */
static size_t fmt_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

static CUresult array_check(const CUDA_ARRAY3D_DESCRIPTOR *d, size_t *bpe)
{
    size_t fb = fmt_bytes(d->Format);
    if (!fb || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)) return CUDA_ERROR_INVALID_VALUE;
    if (d->Width == 0 || (d->Depth && !d->Height)) return CUDA_ERROR_INVALID_VALUE;
    if (d->Flags & ~0x3fu) return CUDA_ERROR_INVALID_VALUE;
    /* sm_90 texture limits */
    if (d->Depth) {
        if (d->Width > 16384 || d->Height > 16384 || d->Depth > 16384) return CUDA_ERROR_INVALID_VALUE;
    } else if (d->Height) {
        if (d->Width > 131072 || d->Height > 65536) return CUDA_ERROR_INVALID_VALUE;
    } else if (d->Width > 131072) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *bpe = fb * d->NumChannels;
    return CUDA_SUCCESS;
}

static CUresult array_make(struct ctx *c, const CUDA_ARRAY3D_DESCRIPTOR *d, size_t bpe, size_t bytes, int type, int levels, struct array **out)
{
    uint64_t charge = ROUND((uint64_t)bytes, ALLOC_ALIGN);
    if (sim_charge(&g.st, c->cfg, cap_of(c->cfg), charge) < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    struct array *a = calloc(1, sizeof *a);
    size_t ms = 0;
    void *m = a ? sim_map(bytes, &ms) : NULL;
    if (!m) {
        free(a);
        sim_uncharge(&g.st, c->cfg, charge);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->o.type = type;
    a->o.ctx = c;
    a->d = *d;
    a->bpe = bpe;
    a->bytes = bytes;
    a->map_size = ms;
    a->mem = m;
    a->charge = charge;
    a->cfg = c->cfg;
    a->levels = levels;
    reg_add(a, type);
    *out = a;
    return CUDA_SUCCESS;
}

static CUresult array3d_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!out || !d) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    size_t bpe;
    if ((r = array_check(d, &bpe))) LEAVE(r);
    size_t bytes = d->Width * bpe * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1);
    struct array *a;
    r = array_make(c, d, bpe, bytes, OT_ARRAY, 0, &a);
    if (r == CUDA_SUCCESS) *out = (CUarray)a;
    LEAVE(r);
}

SIM_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d) { return array3d_create(pHandle, d); }

SIM_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = d->Width, .Height = d->Height, .Depth = 0, .Format = d->Format, .NumChannels = d->NumChannels};
    return array3d_create(pHandle, &d3);
}

static void array_free(struct array *a)
{
    reg_del(a);
    munmap(a->mem, a->map_size);
    sim_uncharge(&g.st, a->cfg, a->charge);
    free(a);
}

SIM_EXPORT CUresult cuArrayDestroy(CUarray h)
{
    ENTER();
    struct array *a = (struct array *)h;
    if (!reg_has(a, OT_ARRAY)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    array_free(a);
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h)
{
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    if (!reg_has(h, OT_ARRAY)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    *d = ((struct array *)h)->d;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray h)
{
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct array *a = (struct array *)h;
    if (!reg_has(a, OT_ARRAY)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if (a->d.Depth) LEAVE(CUDA_ERROR_INVALID_VALUE); /* 3D array: use the 3D call */
    d->Width = a->d.Width;
    d->Height = a->d.Height;
    d->Format = a->d.Format;
    d->NumChannels = a->d.NumChannels;
    LEAVE(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *out, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int numLevels)
{
    if (!out || !d || numLevels == 0) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    struct ctx *c;
    CUresult r = cur_ctx_checked(&c);
    if (r) LEAVE(r);
    size_t bpe;
    if ((r = array_check(d, &bpe))) LEAVE(r);
    size_t maxd = d->Width;
    if (d->Height > maxd) maxd = d->Height;
    if (d->Depth > maxd) maxd = d->Depth;
    unsigned maxlev = 1;
    while ((maxd >> maxlev) > 0) maxlev++;
    if (numLevels > maxlev) LEAVE(CUDA_ERROR_INVALID_VALUE);
    size_t bytes = 0;
    for (unsigned l = 0; l < numLevels; l++) {
        size_t w = d->Width >> l, h = d->Height >> l, z = d->Depth >> l;
        bytes += (w ? w : 1) * bpe * (d->Height ? (h ? h : 1) : 1) * (d->Depth ? (z ? z : 1) : 1);
    }
    struct array *a;
    r = array_make(c, d, bpe, bytes, OT_MIPMAP, (int)numLevels, &a);
    if (r == CUDA_SUCCESS) *out = (CUmipmappedArray)a;
    LEAVE(r);
}

SIM_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    ENTER();
    if (!reg_has(h, OT_MIPMAP)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
    array_free((struct array *)h);
    LEAVE(CUDA_SUCCESS);
}

/* ---- pointer attributes ---- */
static CUresult ptr_attr(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    struct alloc *a = alloc_find((uintptr_t)ptr);
    if (!a || !devaccessible(a)) {
        /* unknown memory: the driver answers a few attributes for host memory */
        if (attr == CU_POINTER_ATTRIBUTE_MEMORY_TYPE || attr == CU_POINTER_ATTRIBUTE_IS_MANAGED ||
            attr == CU_POINTER_ATTRIBUTE_MAPPED)
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_ERROR_INVALID_VALUE;
    }
    int host = a->kind == A_HOST || a->kind == A_HOSTREG;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)a->ctx; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host && a->kind != A_MANAGED) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = 0; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = a->base; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = a->kind == A_MANAGED; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
        int ord = 0;
        for (int i = 0; i < g.env.nvis; i++)
            if (g.env.vis[i] == a->cfg) ord = i;
        *(int *)data = ord;
        return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = a->base; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = a->kind == A_DEV; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(unsigned long long *)data = 0; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *(int *)data = 0; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(int *)data = 3; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data = (CUmemoryPool)a->pool; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    LEAVE(ptr_attr(data, attribute, ptr));
}

SIM_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr)
{
    if (!attributes || !data) return CUDA_ERROR_INVALID_VALUE;
    ENTER();
    int known = alloc_find((uintptr_t)ptr) != NULL;
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i]) LEAVE(CUDA_ERROR_INVALID_VALUE);
        if (!known) { /* unlike the single query, unknown memory is not an error here */
            if (attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) *(unsigned *)data[i] = 0;
            else if (attributes[i] == CU_POINTER_ATTRIBUTE_CONTEXT) *(CUcontext *)data[i] = NULL;
            else *(int *)data[i] = 0;
            continue;
        }
        CUresult r = ptr_attr(data[i], attributes[i], ptr);
        if (r) LEAVE(r);
    }
    LEAVE(CUDA_SUCCESS);
}
