/* Launch entry points: every launch path is paced by the container's
 * measured device time (lib/cudahook/README.md, "Compute limits"). Before a
 * launch: the pacer (pacer.h) says when it may start, on the clock, from the
 * container's shared bucket and the measurements (measure.h); after it, the
 * launch's measurement is put in flight. Graph launches also count graph
 * memory (graphmem.h). A library kernel launched as it is gets its library
 * loaded and counted in the launch's context first (modules.c), where the
 * launch can still be refused. */
#include <errno.h>
#include <string.h>
#include <time.h>
#include "capture.h"
#include "cuda_hooks.h"
#include "graphmem.h"
#include "measure.h"
#include "order.h"
#include "region.h"
#include "share.h"

typedef CUresult (*cuCtxGetCurrent_t)(CUcontext *);
typedef CUresult (*cuStreamGetCtx_t)(CUstream, CUcontext *);
typedef CUresult (*cuCtxPushCurrent_t)(CUcontext);
typedef CUresult (*cuCtxPopCurrent_t)(CUcontext *);

/* 1 once the quota is loaded and no device has compute < 100: the launch
 * wrappers then call the driver after this one load and branch. */
int vgpu_compute_off;

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* What this process saw of each device's use at the start of a period (the
 * order's yield lets work below the request start). Threads race on it only
 * to count from a slightly different start: a decision, not an account. */
static struct vgpu_order_period order_period[VGPU_MAX_DEVICES];

/* The device time qi's request guarantees in a period of period_ns: the
 * quota's request, the one the host orders by (a request-0 tenant is owed
 * nothing before it yields), and not above the admission's share where
 * that scaled requests down. The share alone is not it: for a request-0
 * tenant it is what the requests leave, the share it holds without vgpu
 * node, and owed that, a low tenant started through half of every period
 * beside a high one of request 50 as if it had requested the rest. */
static int64_t request_ns(int qi, int64_t period_ns)
{
    int pct = vgpu_q.dev[qi].compute_request;
    uint32_t bp = (uint32_t)(pct < 0 ? 0 : pct > 100 ? 100 : pct) * 100u, share = (uint32_t)vgpu_share_admission(qi);

    if (share && share < bp)
        bp = share;
    return period_ns / VGPU_SHARE_FULL * (int64_t)bp;
}

/* Where a paced device stands in its period (order.h): what it queued past
 * now, what it used, and what of its request it is due by now. */
struct standing {
    int64_t queued, used, due;
};

/* qi's standing at now: 0 where the device has no periods or no region. */
static int stand(int qi, const struct vgpu_pacer *p, struct vgpu_compute_shared *c, uint64_t now, struct standing *st)
{
    int64_t *q, inflight;

    if (!p->period_ns || !c)
        return 0;
    q = vgpu_region_queue_end(qi);
    st->queued = q ? __atomic_load_n(q, __ATOMIC_RELAXED) : 0;
    /* The queue end counts what was launched since the slot began; work
     * queued before it (a burst before the host gave a phase) is still on
     * the device, and a bound that does not see it keeps it there for good,
     * topped up as it drains: what is measured in flight is a floor. */
    inflight = vgpu_measure_inflight_ns(qi);
    if (inflight > 0 && (int64_t)now + inflight > st->queued)
        st->queued = (int64_t)now + inflight;
    st->used = vgpu_order_used(&order_period[qi], p->period_ns, p->phase_ns,
                               __atomic_load_n(&c->busy_ns, __ATOMIC_RELAXED), st->queued, now);
    st->due = vgpu_order_due(request_ns(qi, p->period_ns), p->period_ns, p->phase_ns, p->slot_ns, now);
    return 1;
}

/* Whether the order words o let a launch on qi of est ns start at now
 * (order.h): else 0 and *wait_ns. Only where the device stands in a period
 * (st: its standing if already taken at now, else NULL). */
static int lets(int qi, const struct vgpu_pacer *p, struct vgpu_compute_shared *c, const struct standing *st,
                const struct vgpu_share_order *o, int64_t est, uint64_t now, int64_t *wait_ns)
{
    struct standing here;

    if (!o->yield_until_ns && !o->bound_until_ns)
        return 1;
    if (!st) {
        if (!stand(qi, p, c, now, &here))
            return 1;
        st = &here;
    }
    return vgpu_order_may_start(o, st->used, st->due, est, st->queued, now, wait_ns);
}

/* Whether the host's order lets a launch on qi of est ns start at now: only
 * where the share file is mapped (lets). */
static int order_lets(int qi, const struct vgpu_pacer *p, struct vgpu_compute_shared *c, const struct standing *st,
                      int64_t est, uint64_t now, int64_t *wait_ns)
{
    struct vgpu_share_order o;

    if (!p->period_ns || !c || !vgpu_share_mapped())
        return 1;
    vgpu_share_order(qi, &o);
    return lets(qi, p, c, st, &o, est, now, wait_ns);
}

/* Whether a launch that a free run (ending at free_until) starts, one its
 * slot or bucket would have held, fits the run's bound
 * (VGPU_SHARE_FREE_BOUND_NS): a neighbour waking into its own slot then
 * finds at most that queued. The launches the pacer lets are not bounded
 * by the run. st as for lets. */
static int free_run_lets(int qi, const struct vgpu_pacer *p, struct vgpu_compute_shared *c, const struct standing *st,
                         uint64_t free_until, int64_t est, uint64_t now, int64_t *wait_ns)
{
    struct vgpu_share_order o;

    if (!p->period_ns || !c)
        return 1;
    memset(&o, 0, sizeof o);
    o.bound_until_ns = free_until;
    o.bound_ns = VGPU_SHARE_FREE_BOUND_NS;
    return lets(qi, p, c, st, &o, est, now, wait_ns);
}

/* The run's deadline if qi runs free at now, else 0: the host's word says
 * no other tenant of the GPU is active (vgpu_share.h, free_until_ns),
 * believed only ahead of now and not further than VGPU_SHARE_ORDER_MAX_MS,
 * and only for a device whose limit is the whole GPU: a host word never
 * lifts a limit. */
static uint64_t runs_free(int qi, uint64_t now)
{
    uint64_t until;

    if (vgpu_q.dev[qi].compute < 100 || !vgpu_share_mapped())
        return 0;
    until = vgpu_share_free_until(qi);
    return until > now && until - now <= (uint64_t)VGPU_SHARE_ORDER_MAX_MS * 1000000u ? until : 0;
}

/* Counts a wait for the pacer from since to now, less its start while the
 * container's own queued work still ran (its queue end, kept with a slot):
 * the time its share held work the device could have run, as a cgroup's CPU
 * throttling. Without a slot no queue end is kept: the whole wait counts. */
static void pace_waited(const int64_t *queued, uint64_t since, uint64_t now)
{
    int64_t q = queued ? __atomic_load_n(queued, __ATOMIC_RELAXED) : 0;

    if (q > (int64_t)since)
        since = q < (int64_t)now ? (uint64_t)q : now;
    vgpu_region_pace_waited(since, now);
}

/* Waits until a launch on qi may start (vgpu_pacer_may_start) and, with a
 * slot, starts in it behind what the container queued (vgpu_pacer_slot_fits),
 * or the host says it runs free (runs_free), and the host's order lets it
 * (order_lets). A container that has used less
 * this period than its request is due by now starts at once, in its slot or
 * not: a tenant waking from idle is owed that time now, not at its next
 * slot (the busy ones yield to it by the order; what it takes is within its
 * request, so within its grant and its limit). One clock read per round: a
 * launch of a few us must not pay for several (in a VM whose clock source
 * has no vDSO each read is a system call). */
static void pace(int qi, int64_t est)
{
    const struct vgpu_pacer *p;
    struct vgpu_compute_shared *c = vgpu_region_compute(qi);
    struct standing st;
    uint32_t *gate;
    int64_t *queued;
    uint64_t cold_since = 0, now, order_since = 0, pace_since = 0, free_until;
    int64_t tok, wait;
    int paced_lets, stood;

    for (;;) {
        now = vgpu_now_ns();
        p = vgpu_measure_pacer(qi, now); /* the share may change while a launch waits */
        gate = p->period_ns ? vgpu_region_gate(qi) : NULL;
        queued = p->phase_ns >= 0 ? vgpu_region_queue_end(qi) : NULL;
        vgpu_measure_harvest(now);
        if (!vgpu_measure_estimate_ready(qi, now, &cold_since)) {
            vgpu_measure_wait_oldest(VGPU_MEASURE_WAIT_NS);
            continue;
        }
        tok = vgpu_pacer_refill(p, c, now);
        paced_lets =
            vgpu_pacer_may_start(p, gate, tok, now, &wait) &&
            (!queued || vgpu_pacer_slot_fits(p, gate, c, __atomic_load_n(queued, __ATOMIC_RELAXED), now, &wait));
        free_until = paced_lets ? 0 : runs_free(qi, now);
        if (free_until) {
            /* no neighbour is using the device: its slot and its bucket
             * would leave it idle; the order still holds, and the run's
             * bound, so that a neighbour waking finds its slot */
            vgpu_pacer_forgive(c);
            paced_lets = 1;
        }
        /* taken only when the pacer says wait, or a free run's bound will
         * need it too: once for the order and the run */
        stood = (!paced_lets || free_until) && stand(qi, p, c, now, &st);
        if (paced_lets || (stood && st.used < st.due)) {
            if (order_lets(qi, p, c, stood ? &st : NULL, est, now, &wait)) {
                if (order_since)
                    vgpu_region_order_waited(qi, now - order_since);
                order_since = 0;
                if (!free_until || free_run_lets(qi, p, c, stood ? &st : NULL, free_until, est, now, &wait)) {
                    if (pace_since)
                        pace_waited(queued, pace_since, now);
                    if (queued)
                        vgpu_pacer_queued(p, queued, est, now);
                    return;
                }
                /* the run's own bound: its slot would have held the launch
                 * longer, so the pacer's wait, not the order's */
                if (!pace_since)
                    pace_since = now;
                vgpu_region_want(qi, now);
                sleep_ns(wait);
                continue;
            }
            if (pace_since) { /* the order's wait is not the pacer's */
                pace_waited(queued, pace_since, now);
                pace_since = 0;
            }
            if (!order_since)
                order_since = now;
            /* another tenant goes first: short steps, the words are renewed */
            vgpu_region_want(qi, now);
            sleep_ns(wait);
            continue;
        }
        if (order_since) { /* the pacer's wait is not the order's */
            vgpu_region_order_waited(qi, now - order_since);
            order_since = 0;
        }
        if (!pace_since)
            pace_since = now;
        vgpu_region_want(qi, now); /* for the arbitration: more wanted than granted */
        sleep_ns(vgpu_pacer_sleep_ns(wait));
    }
}

/* begin() in ctx, which is current. */
static void begin_in(CUcontext ctx, CUstream s, int ptsz, const void *fn, const unsigned g[3], struct vgpu_ticket *t)
{
    struct vgpu_evpool *p;
    int qi = vgpu_measure_qi(ctx, &p);

    if (qi < 0 || !vgpu_paced[qi])
        return;
    if (vgpu_capturing(s, ptsz))
        return; /* captured work runs, and is paced, when its graph is launched */
    t->kind = fn ? vgpu_measure_kind(qi, fn, g[0], g[1], g[2]) : 0;
    pace(qi, vgpu_measure_kind_estimate(qi, t));
    vgpu_measure_open(p, ctx, qi, s, ptsz, t);
}

/* Before a launch of f (NULL: not a kernel handle) on stream s, of grid g
 * (what a launch of it keeps the device for is learned per function and
 * grid size: vgpu_measure_kind; a graph launch passes its exec as fn): the kernel's
 * library in the stream's context (vgpu_kernel_launch_fit, only for handles
 * the kernel map may hold), then the pacer. NOT_INITIALIZED when the library
 * failed closed, OUT_OF_MEMORY when the kernel's library does not fit; else
 * CUDA_SUCCESS, and t says what was done. The launch is accounted to the
 * stream's context (an explicit stream may belong to another context than
 * the current one). */
static CUresult begin(CUstream s, int ptsz, CUfunction f, const void *fn, const unsigned g[3], struct vgpu_ticket *t)
{
    CUcontext cur = NULL, ctx, dummy;
    int paced, kern;
    CUresult r = CUDA_SUCCESS;

    memset(t, 0, sizeof *t);
    t->qi = -1;
    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    paced = !__atomic_load_n(&vgpu_compute_off, __ATOMIC_RELAXED);
    kern = f && vgpu_kernel_maybe(f);
    if (!paced && !kern)
        return CUDA_SUCCESS;
    if (REALT(cuCtxGetCurrent_t, cuCtxGetCurrent)(&cur) != CUDA_SUCCESS)
        cur = NULL;
    ctx = cur;
    if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD &&
        (REALT(cuStreamGetCtx_t, cuStreamGetCtx)(s, &ctx) != CUDA_SUCCESS || !ctx))
        ctx = cur;
    if (!ctx)
        return CUDA_SUCCESS; /* the driver will refuse the launch */
    if (ctx != cur && REALT(cuCtxPushCurrent_t, cuCtxPushCurrent_v2)(ctx) != CUDA_SUCCESS)
        return CUDA_SUCCESS;
    if (kern)
        r = vgpu_kernel_launch_fit(f);
    /* our event calls relax the capture mode themselves (relax), only when made */
    if (r == CUDA_SUCCESS && paced)
        begin_in(ctx, s, ptsz, fn, g, t);
    if (ctx != cur)
        REALT(cuCtxPopCurrent_t, cuCtxPopCurrent_v2)(&dummy);
    return r;
}

/* ---- the launch entry points ----
 * Fast path, in assembly so that it is exactly that: with no device limited,
 * one load and compare of vgpu_compute_off (graph launches: vgpu_graph_off), a
 * predictable branch, and the same indirect jump into the driver as an unhooked
 * trampoline (arguments untouched). Kernel launches also look up the handle's
 * byte in vgpu_kernel_map (a shift, a mask, a byte compare; scratch registers
 * rax and r11 only): a library kernel takes the paced path, where its library
 * is made to fit first. Otherwise a jump to the paced path, a C function of
 * the same signature. */

#define STR_(x) #x
#define STR(x)  STR_(x)
#define ENTRY_IF(name, flag)                                                                                           \
    __asm__("\t.text\n\t.globl " #name "\n\t.type " #name ",@function\n\t.p2align 4\n" #name ":\n"                     \
            "\tcmpl $0, " #flag "(%rip)\n"                                                                             \
            "\tje vgpu_paced_" #name "\n"                                                                              \
            "\tjmp *vgpu_table+8*" STR(VGPU_IDX_##name) "(%rip)\n"                                                     \
                                                        "\t.size " #name ",.-" #name "\n");
/* kernel launches: reg holds the CUfunction */
#define ENTRY_K(name, reg)                                                                                             \
    __asm__("\t.text\n\t.globl " #name "\n\t.type " #name ",@function\n\t.p2align 4\n" #name ":\n"                     \
            "\tcmpl $0, vgpu_compute_off(%rip)\n"                                                                      \
            "\tje vgpu_paced_" #name "\n"                                                                              \
            "\tmov %" reg ", %rax\n"                                                                                   \
            "\tshr $4, %rax\n"                                                                                         \
            "\tand $" STR(VGPU_KERNEL_MAP_MASK) ", %eax\n"                                                             \
                                                "\tlea vgpu_kernel_map(%rip), %r11\n"                                  \
                                                "\tcmpb $0, (%r11,%rax)\n"                                             \
                                                "\tjne vgpu_paced_" #name "\n"                                         \
                                                "\tjmp *vgpu_table+8*" STR(VGPU_IDX_##name) "(%rip)\n"                 \
                                                                                            "\t.size " #name           \
                                                                                            ",.-" #name "\n");
#define VGPU_KERNEL_MAP_MASK 4095 /* VGPU_KERNEL_MAP - 1, checked below */
_Static_assert(VGPU_KERNEL_MAP_MASK == VGPU_KERNEL_MAP - 1, "the fast path's mask is the kernel map's");
#define PACED __attribute__((used, noinline)) CUresult
#define BRACKET(s, ptsz, grid, call)                                                                                   \
    do {                                                                                                               \
        struct vgpu_ticket t_;                                                                                         \
        CUresult b_ = begin((s), (ptsz), (f), (f), (grid), &t_);                                                       \
        if (b_ != CUDA_SUCCESS)                                                                                        \
            return b_;                                                                                                 \
        return vgpu_measure_close(&t_, (call));                                                                        \
    } while (0)

#define KARGS     CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem
#define KPASS     f, gx, gy, gz, bx, by, bz, shmem
#define GRID      ((const unsigned[3]){gx, gy, gz})
#define EXGRID(c) ((const unsigned[3]){(c) ? (c)->gridDimX : 0, (c) ? (c)->gridDimY : 0, (c) ? (c)->gridDimZ : 0})

PACED vgpu_paced_cuLaunchKernel(KARGS, CUstream s, void **params, void **extra);
PACED vgpu_paced_cuLaunchKernel(KARGS, CUstream s, void **params, void **extra)
{
    BRACKET(s, 0, GRID, REAL(cuLaunchKernel)(KPASS, s, params, extra));
}
ENTRY_K(cuLaunchKernel, "rdi")

PACED vgpu_paced_cuLaunchKernel_ptsz(KARGS, CUstream s, void **params, void **extra);
PACED vgpu_paced_cuLaunchKernel_ptsz(KARGS, CUstream s, void **params, void **extra)
{
    BRACKET(s, 1, GRID, REAL(cuLaunchKernel_ptsz)(KPASS, s, params, extra));
}
ENTRY_K(cuLaunchKernel_ptsz, "rdi")

PACED vgpu_paced_cuLaunchCooperativeKernel(KARGS, CUstream s, void **params);
PACED vgpu_paced_cuLaunchCooperativeKernel(KARGS, CUstream s, void **params)
{
    BRACKET(s, 0, GRID, REAL(cuLaunchCooperativeKernel)(KPASS, s, params));
}
ENTRY_K(cuLaunchCooperativeKernel, "rdi")

PACED vgpu_paced_cuLaunchCooperativeKernel_ptsz(KARGS, CUstream s, void **params);
PACED vgpu_paced_cuLaunchCooperativeKernel_ptsz(KARGS, CUstream s, void **params)
{
    BRACKET(s, 1, GRID, REAL(cuLaunchCooperativeKernel_ptsz)(KPASS, s, params));
}
ENTRY_K(cuLaunchCooperativeKernel_ptsz, "rdi")

/* a NULL config: the driver says what is wrong */
PACED vgpu_paced_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
PACED vgpu_paced_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    BRACKET(c ? c->hStream : NULL, 0, EXGRID(c), REAL(cuLaunchKernelEx)(c, f, params, extra));
}
ENTRY_K(cuLaunchKernelEx, "rsi")

PACED vgpu_paced_cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
PACED vgpu_paced_cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    BRACKET(c ? c->hStream : NULL, 1, EXGRID(c), REAL(cuLaunchKernelEx_ptsz)(c, f, params, extra));
}
ENTRY_K(cuLaunchKernelEx_ptsz, "rsi")

/* Graph launches also count graph memory (graphmem.c): the exec's allocation
 * nodes are reserved before the launch is paced, and the count settled after.
 * Their fast path tests vgpu_graph_off, which stays 1 only while no exec with
 * allocation nodes exists and compute is not limited. */
static CUresult graph_launch(CUgraphExec g, CUstream s, int ptsz)
{
    struct vgpu_graph_ticket gt;
    struct vgpu_ticket t;
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if ((r = vgpu_graph_before(g, &gt)) != CUDA_SUCCESS)
        return r; /* refused before it is paced */
    begin(s, ptsz, NULL, g, (const unsigned[3]){0, 0, 0}, &t);
    r = vgpu_measure_close(&t, ptsz ? REAL(cuGraphLaunch_ptsz)(g, s) : REAL(cuGraphLaunch)(g, s));
    vgpu_graph_after(g, &gt, r);
    return r;
}

PACED vgpu_paced_cuGraphLaunch(CUgraphExec g, CUstream s);
PACED vgpu_paced_cuGraphLaunch(CUgraphExec g, CUstream s) { return graph_launch(g, s, 0); }
ENTRY_IF(cuGraphLaunch, vgpu_graph_off)

PACED vgpu_paced_cuGraphLaunch_ptsz(CUgraphExec g, CUstream s);
PACED vgpu_paced_cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) { return graph_launch(g, s, 1); }
ENTRY_IF(cuGraphLaunch_ptsz, vgpu_graph_off)

/* One kernel per device, each on an explicitly created stream of that
 * device's context: each is paced and bracketed in its own context. */
PACED vgpu_paced_cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n, unsigned int flags);
PACED vgpu_paced_cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n, unsigned int flags)
{
    struct vgpu_ticket t[VGPU_MAX_DEVICES];
    CUresult r;
    unsigned i;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!list || n == 0 || n > VGPU_MAX_DEVICES) /* the driver says what is wrong */
        return REAL(cuLaunchCooperativeKernelMultiDevice)(list, n, flags);
    for (i = 0; i < n; i++)
        if ((r = begin(list[i].hStream, 0, list[i].function, list[i].function,
                       (const unsigned[3]){list[i].gridDimX, list[i].gridDimY, list[i].gridDimZ}, &t[i])) !=
            CUDA_SUCCESS) {
            while (i-- > 0)
                vgpu_measure_close(&t[i], r); /* nothing ran */
            return r;
        }
    r = REAL(cuLaunchCooperativeKernelMultiDevice)(list, n, flags);
    for (i = 0; i < n; i++)
        vgpu_measure_close(&t[i], r);
    return r;
}
/* its kernels are in a list: the fast path only while no library kernel exists */
__asm__(
    "\t.text\n\t.globl cuLaunchCooperativeKernelMultiDevice\n\t.type cuLaunchCooperativeKernelMultiDevice,@function\n"
    "\t.p2align 4\ncuLaunchCooperativeKernelMultiDevice:\n"
    "\tcmpl $0, vgpu_compute_off(%rip)\n"
    "\tje vgpu_paced_cuLaunchCooperativeKernelMultiDevice\n"
    "\tcmpl $0, vgpu_kernel_none(%rip)\n"
    "\tje vgpu_paced_cuLaunchCooperativeKernelMultiDevice\n"
    "\tjmp *vgpu_table+8*" STR(VGPU_IDX_cuLaunchCooperativeKernelMultiDevice) "(%rip)\n"
                                                                              "\t.size "
                                                                              "cuLaunchCooperativeKernelMultiDevice,.-"
                                                                              "cuLaunchCooperativeKernelMultiDevice\n");

/* After the loader resolved the driver (registered below): compute limits,
 * then the fast paths' flags. */
static void compute_setup(void)
{
    int any = vgpu_measure_setup();

    __atomic_store_n(&vgpu_graph_off, !any, __ATOMIC_RELEASE);
    __atomic_store_n(&vgpu_compute_off, !any, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void register_setup(void) { vgpu_after_resolve(compute_setup); }
