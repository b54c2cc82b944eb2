/* Graph memory: what the device's graph memory pool holds for this process.
 * vgpu_graph_off starts 0 in a fresh process and is set at setup (launch.c). */
#include <stdlib.h>
#include <string.h>
#include "account.h"
#include "capture.h"
#include "cuda_hooks.h"
#include "graphmem.h"
#include "region.h"

int vgpu_graph_off;

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

void vgpu_graph_learn(int qi, CUdevice d)
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
    vgpu_mem_recount(qi, old, v);
    return 0;
}

static void graph_sync_cb(uint64_t key, const struct vgpu_rec *r)
{
    (void)r;
    graph_sync((int)key);
}

static void resync_all(void) { vgpu_ptr_each(VGPU_K_GRAPHPOOL, graph_sync_cb); }

/* after the stream-ordered pools' resync (pools.c, priority 101) */
__attribute__((constructor(102))) static void register_resync(void) { vgpu_mem_on_refusal(resync_all); }

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

CUresult vgpu_graph_reserve(int qi, uint64_t size)
{
    CUresult r = vgpu_mem_reserve(qi, size);

    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        graph_trim(qi);
        r = vgpu_mem_reserve(qi, size);
    }
    return r;
}

/* Reserves t's bytes on each of its devices, all or nothing. */
static CUresult graph_reserve_all(struct vgpu_graph_ticket *t)
{
    CUresult r;

    for (int i = 0; i < t->n; i++)
        if ((r = vgpu_graph_reserve(t->qi[i], t->need[i])) != CUDA_SUCCESS) {
            while (i-- > 0)
                vgpu_mem_unreserve(t->qi[i], t->need[i]);
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
            vgpu_mem_unreserve(qi, t->need[i]);
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
                (qi = vgpu_quota_index(p.poolProps.location.id)) < 0)
                continue;
            vgpu_graph_learn(qi, p.poolProps.location.id);
            bytes[qi] = vgpu_add_sat(bytes[qi], vgpu_round_up(p.bytesize, GRAPH_GRAN));
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
            vgpu_mem_unreserve(qi, old.size);
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
        if ((qi = vgpu_quota_index(p->poolProps.location.id)) < 0)
            return CUDA_ERROR_INVALID_DEVICE;
        vgpu_graph_learn(qi, p->poolProps.location.id);
        /* early refusal: it cannot fit beside what the container holds now */
        if ((r = vgpu_graph_reserve(qi, p->bytesize)) != CUDA_SUCCESS)
            return r;
        vgpu_mem_unreserve(qi, p->bytesize);
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
            vgpu_mem_unreserve(qi, fb[qi].size);
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
    if (r == CUDA_SUCCESS && (qi = vgpu_quota_index(dev)) >= 0) {
        vgpu_graph_learn(qi, dev);
        __atomic_add_fetch(&graph_gen[qi], 1, __ATOMIC_ACQ_REL);
        graph_sync(qi);
    }
    return r;
}
