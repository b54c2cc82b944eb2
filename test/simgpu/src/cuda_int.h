/* Process-side objects of the simulated libcuda. One process lock (g.mu) guards
 * all of them; it is never held while sleeping on the timeline. Lock order:
 * g.mu, then the shared-state mutex. */
#ifndef SIMGPU_CUDA_INT_H
#define SIMGPU_CUDA_INT_H

#include "sim.h"
#include "cuda_abi.h"

enum obj_type {
    OT_CTX = 1,
    OT_STREAM,
    OT_EVENT,
    OT_MODULE,
    OT_FUNC,
    OT_POOL,
    OT_GRAPH,
    OT_GNODE,
    OT_GEXEC,
    OT_ARRAY,
    OT_MIPMAP,
    OT_MEMHANDLE
};

struct ctx;
struct graph;
struct gexec;

/* first member of every handle object */
struct obj {
    int type;
    struct ctx *ctx;
};

enum { SK_NORMAL,
       SK_LEGACY,
       SK_PERTHREAD };

struct stream {
    struct obj o;
    unsigned flags;
    int prio, kind, destroyed, pending_host;
    uint64_t tail; /* when the last op queued on it completes */
    unsigned long long id;
    struct graph *cap; /* capture target, NULL when not capturing */
    int cap_status, cap_mode, cap_origin;
    unsigned long long cap_id;
    pthread_t cap_thread; /* the thread that began the capture (origin streams) */
    struct stream *next;  /* in ctx->streams */
};

struct ctx {
    struct obj o;
    int ord, cfg; /* visible ordinal, config index */
    unsigned flags;
    int primary, alive;
    unsigned long long id;
    struct stream legacy;   /* the NULL / CU_STREAM_LEGACY stream */
    struct stream *streams; /* created and per-thread streams */
    size_t limits[CU_LIMIT_MAX];
    uint64_t lim_charge[CU_LIMIT_MAX]; /* device memory the limits above their defaults hold */
    int cache_config;
    unsigned sms; /* execution affinity: SMs of this context (0: the client's share) */
};

struct event {
    struct obj o;
    unsigned flags;
    int recorded;
    uint64_t ts;
    struct graph *cap;
};

struct func {
    struct obj o;
    struct module *mod;
    char *name;
    uint64_t dur_ns;
    int max_dyn_shmem;
    size_t local; /* CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: per-thread frame */
};

/* a __device__ variable of a module image */
struct gvar {
    char *name;
    uint64_t size;
};

/* a module's data (its __device__ variables) loaded into one context */
#define SIM_MAX_LOADS 16
struct mload {
    struct ctx *c;
    uint64_t charge;
    void *base;
    size_t map_size;
};

struct module {
    struct obj o;
    int nfunc, library, ngvar, nloads;
    struct func **funcs;
    struct gvar *gvars;
    uint64_t gbytes; /* sum of the variables' sizes */
    struct mload loads[SIM_MAX_LOADS];
};

struct pool {
    struct obj o;
    int cfg, ord, is_default;
    uint64_t reserved, used, threshold, reserved_high, used_high, max_size;
    int reuse[3];
    struct pool *next;
};

/* graph-owned memory (cuGraphAddMemAllocNode, or cuMemAllocAsync in a capture):
 * address fixed at node creation; physical memory (phys, from the process's
 * graph pool of that device) bound at the first upload/launch and kept until a
 * trim finds it idle; live from the allocating node until its free */
struct gmem {
    int refs, live, cfg, ord;
    CUdeviceptr base;
    size_t size, map_size;
    uint64_t phys;       /* bytes of the graph pool bound to it, 0 = none */
    uint64_t busy_until; /* its last launch's work ends then (trim leaves it alone before) */
};

enum { GN_KERNEL = 1,
       GN_MEMALLOC,
       GN_MEMFREE,
       GN_EMPTY,
       GN_HOST,
       GN_MEMCPY,
       GN_MEMSET };

struct gnode {
    struct obj o;
    struct graph *g;
    int kind;
    struct func *f;
    struct gmem *gm;
    CUdeviceptr dptr;
    size_t size;
    CUhostFn fn;
    void *data;
    void *dst;
    const void *src; /* memcpy (host-visible addresses) */
    unsigned memset_val, memset_elem;
    struct gnode *next;
};

struct graph {
    struct obj o;
    struct gnode *head, *tail;
    int n;
};

struct gexec {
    struct obj o;
    int n;
    struct gnode *nodes;
    unsigned long long flags;
};

struct array {
    struct obj o;
    CUDA_ARRAY3D_DESCRIPTOR d;
    size_t bpe, bytes, map_size;
    void *mem;
    uint64_t charge;
    int cfg;
    int levels; /* mipmapped: number of levels */
};

struct memhandle {
    struct obj o;
    int cfg, ord, memfd, released, maps;
    int refs; /* handle references: cuMemCreate's, plus one per cuMemRetainAllocationHandle */
    size_t size;
};

enum { A_DEV = 1,
       A_MANAGED,
       A_POOL,
       A_MAPPED,
       A_GRAPH,
       A_HOST,
       A_HOSTREG };

struct alloc {
    uintptr_t base;
    size_t size, map_size;
    uint64_t charge;
    int kind, cfg, access;
    unsigned flags;
    struct ctx *ctx;
    struct pool *pool;
    struct memhandle *mh;
    struct gmem *gm;
};

struct reservation {
    uintptr_t base;
    size_t size;
    struct reservation *next;
};

struct hostjob {
    uint64_t t;
    CUhostFn fn;
    void *data;
    CUstreamCallback cb;
    CUstream h;
    struct stream *s;
    struct hostjob *next;
};

struct simg {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* host jobs finished */
    pid_t pid;
    int need_reset;
    int init_state; /* 0 never, 1 ok, -1 failed */
    CUresult init_rc;
    struct sim_env env;
    struct sim_state st;
    unsigned long long gen, next_id;
    struct ctx *primary[SIM_MAX_DEV];
    int prim_refs[SIM_MAX_DEV];
    unsigned prim_flags[SIM_MAX_DEV];
    struct pool *default_pool[SIM_MAX_DEV], *cur_pool[SIM_MAX_DEV], *pools;
    /* graph memory pool per device (config index): reserved from the device, bound to graph allocations */
    uint64_t gres[SIM_MAX_DEV], gbound[SIM_MAX_DEV], gres_high[SIM_MAX_DEV], gbound_high[SIM_MAX_DEV];
    struct alloc *allocs;
    size_t nalloc, calloc_;
    struct reservation *resv;
    /* host-function worker */
    int worker_started;
    pthread_t worker;
    pthread_cond_t wcond;
    struct hostjob *jobs;
    /* MPS client (mps.c): connected at cuInit, the connection kept */
    int mps, mps_fd, mps_pct;
};

extern struct simg g;

/* proc.c */
CUresult sim_enter(void); /* checks init, takes g.mu */
void sim_leave(void);
#define ENTER()                            \
    do {                                   \
        CUresult _e = sim_enter();         \
        if (_e != CUDA_SUCCESS) return _e; \
    } while (0)
#define LEAVE(rc)           \
    do {                    \
        CUresult _l = (rc); \
        sim_leave();        \
        return _l;          \
    } while (0)
void reg_add(void *p, int type);
int reg_has(const void *p, int type);
void reg_del(void *p);
void reg_foreach(void (*fn)(void *obj, void *arg), void *arg);
struct ctx *cur_ctx(void);
CUresult cur_ctx_checked(struct ctx **out);
CUresult ctx_usable(struct ctx *c);
void tls_ctx_push(struct ctx *c);
struct ctx *tls_ctx_pop(void);
void tls_ctx_set(struct ctx *c);
int tls_ctx_depth(void);
struct stream *tls_perthread(struct ctx *c, int create);
int dev_ok(CUdevice d);
struct sim_devcfg *devcfg(int ord);
int cfg_of(int ord);

void sim_apply_cvd(struct sim_env *env);

/* checkpoint.c */
void sim_checkpoint_attach(void); /* starts the restore thread */
void sim_checkpoint_gate(void);   /* on entry, g.mu held: waits while locked or checkpointed */
void sim_checkpoint_leave(void);

/* mps.c */
CUresult sim_mps_connect(void);                              /* at cuInit: an MPS client or not */
int sim_mps_sms(int sms);                                    /* SMs the process sees of a device's sms */
int sim_mps_affinity(unsigned want, int sms, unsigned *got); /* a context asking want: what it reports; -1 above the share */

/* context.c */
struct ctx *ctx_new(int ord, unsigned flags, int primary, CUresult *rc);
void ctx_teardown(struct ctx *c);
CUresult ctx_grow_stack(struct ctx *c, size_t per_thread);

/* memory.c */
struct alloc *alloc_find(uintptr_t p);
int alloc_add(const struct alloc *a);
void alloc_remove(uintptr_t base);
CUresult dev_range(CUdeviceptr p, size_t n);
void pools_trim_sync(int cfg);
void pool_release_unused_all(int cfg);
void free_ctx_allocs(struct ctx *c);
void *sim_map(size_t size, size_t *map_size);
struct gmem *gmem_new(int ord, size_t size);
CUresult gmem_bind_exec(struct gexec *e);
void gmem_unbind(struct gmem *gm);
void gmem_unref(struct gmem *gm);

/* exec.c */
void modules_ctx_gone(struct ctx *c);
CUresult resolve_stream(CUstream h, int ptsz, struct stream **out);
uint64_t stream_ready(struct stream *s);
void stream_done_at(struct stream *s, uint64_t t);
CUresult stream_sync_wait(struct stream *s); /* called with g.mu held; returns with it held */
void ctx_sync_wait(struct ctx *c);
struct gnode *capture_node(struct stream *s, int kind);
void capture_invalidate(struct stream *s);
void stream_free(struct stream *s);

#endif
