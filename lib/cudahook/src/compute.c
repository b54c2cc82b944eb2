/* Compute limits: every launch path is paced by the container's measured
 * device time (lib/cudahook/README.md, "Compute limits").
 *
 * Measurement. On a device whose limit P is below 100, each launch is
 * bracketed by two events recorded on its own stream, just before and just
 * after it. elapsed(start, end) is that launch's device time, whatever the
 * stream had queued before (the start event is reached only when that work is
 * done). The pairs wait in a per-process ring; at every launch the completed
 * ones are harvested in order (cuEventQuery, then cuEventElapsedTime).
 *
 * Busy union. Events bracket whatever the device did meanwhile (other streams,
 * other processes' time slices), so a launch is charged only the part of its
 * interval, placed on CLOCK_MONOTONIC, that the container's busy spans in the
 * shared region do not cover yet (uncovered()).
 *
 * Controller. A token bucket of device nanoseconds per device, pooled by all
 * processes of the container in the shared region (atomics, no lock): it fills
 * at P/100 ns per wall-clock ns. A gate, shared too, closes when a launch
 * finds the bucket negative and opens when it holds a burst, P% of the pacing
 * period T (quota compute-period, default VGPU_PERIOD_MS), so the container
 * runs in stretches of about P% of T (sleeps of milliseconds, not one per
 * launch); the bucket is capped at two bursts, so that a wake-up that comes
 * late loses nothing. With a phase from the host (quota phase=, one slot per
 * container sharing the GPU), the stretch is a fixed slot of every period
 * instead, and the cap is one burst. T = 0: no gate, a launch waits while the bucket is
 * negative, cap P% of 100 ms. A launch is charged at once an estimate
 * (moving average of this process's charges on that device), and at harvest
 * the difference between its charge and that estimate. So the bucket always
 * accounts for the work in flight, and what is charged in the end is exactly
 * what was measured. Over any window W the container's device time is at most
 * P/100 * W + cap + what is in flight beyond its estimate.
 *
 * No lock is held across a driver call. One thread at a time harvests (an
 * atomic flag, taken with try-lock semantics); threads that must wait for a
 * measurement (a full ring, the first launch on a device) poll with short
 * sleeps and never block on the driver; after 2 s they go on with the
 * estimate (so work that waits for this very thread cannot deadlock it). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compute.h"
#include "cuda_hooks.h"
#include "region.h"

int vgpu_compute_off;
int vgpu_graph_off;

typedef CUresult (*cuCtxGetCurrent_t)(CUcontext *);
typedef CUresult (*cuEventCreate_t)(CUevent *, unsigned int);
typedef CUresult (*cuEventDestroy_t)(CUevent);
typedef CUresult (*cuEventRecord_t)(CUevent, CUstream);
typedef CUresult (*cuEventQuery_t)(CUevent);
typedef CUresult (*cuEventElapsedTime_t)(float *, CUevent, CUevent);
typedef CUresult (*cuStreamIsCapturing_t)(CUstream, CUstreamCaptureStatus *);
typedef CUresult (*cuStreamGetCtx_t)(CUstream, CUcontext *);
typedef CUresult (*cuCtxPushCurrent_t)(CUcontext);
typedef CUresult (*cuCtxPopCurrent_t)(CUcontext *);
typedef CUresult (*cuThreadExchangeStreamCaptureMode_t)(CUstreamCaptureMode *);

#define RING 256                               /* launches in flight per process, measured */
#define REBASE_NS 1000000000LL                 /* a newer ref once offsets pass 1 s (float ms precision) */
#define SLEEP_MAX_NS 10000000LL                /* re-harvest and re-read the bucket at least every 10 ms */
#define SLEEP_MIN_NS 20000LL
#define POLL_NS 200000LL                       /* waiting for a measurement: poll every 0.2 ms */
#define WAIT_NS 2000000000ULL                  /* ... for at most 2 s (see pace, reserve_slot_locked) */
#define SAMPLE_ALL_NS 50000LL                  /* launches of 50 us or more: every one measured */
#define SAMPLE_EVERY 32                        /* shorter ones: 1 in 32, at random */
_Static_assert((SAMPLE_EVERY & (SAMPLE_EVERY - 1)) == 0, "SAMPLE_EVERY: a power of 2 (sampled_locked masks)");
#define HARVEST_GAP_NS 50000ULL                /* harvest() looks at most every 50 us while the ring has room */
#define BURST_NS_PER_PCT 1000000LL             /* burst = P% of 100 ms (no period) */
#define TOKENS_MIN (-600LL * 1000000000LL)     /* debt never below 10 minutes of device time */
#define CHARGE_MAX (3600LL * 1000000000LL)     /* one launch: at most an hour */
#define REFILL_DT_MAX 1000000000000000ULL      /* 11 days: keeps dt * P from overflowing */

struct pool { /* our events of one context, reused */
    CUcontext ctx; /* NULL: free for another context */
    CUdevice cudev;
    int qi;        /* quota index; -1 not the container's */
    int nfree;
    CUevent ev[2 * RING];
    /* Time origin of this context's measurements: a start event kept for it,
     * and its CLOCK_MONOTONIC estimate, the latest of (host time just before
     * a start event was recorded - its offset from ref) over all launches
     * measured: an event is never reached before it is recorded, and one
     * recorded on an idle device is reached at once, so it is tight. */
    CUevent ref;
    int64_t ref_host;
    struct pool *next;
};

struct ticket {
    struct pool *pool;
    CUcontext ctx;
    CUevent start, end;
    CUstream s;
    int ptsz;
    int qi;      /* -1: this launch is not paced */
    int on;      /* 1: bracketed, a ring slot is reserved */
    int64_t est; /* charged at launch */
    int64_t rec; /* CLOCK_MONOTONIC just before the start event was recorded */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* ring, pools, estimates; never across a driver call */
static struct ticket ring[RING];
static unsigned head, count, reserved;
static int pending[VGPU_MAX_DEVICES];
static int64_t est_ns[VGPU_MAX_DEVICES];
/* moving average of launches' intervals between their events, before the
 * union: what decides sampling (0: none measured yet) */
static int64_t span_ns[VGPU_MAX_DEVICES];
static int est_known[VGPU_MAX_DEVICES];
static struct pool *pools, *last_pool;
static int harvesting; /* the harvest flag */
static uint64_t harvested_at; /* CLOCK_MONOTONIC of the last harvest() that looked */
static int pct[VGPU_MAX_DEVICES];
static int64_t burst[VGPU_MAX_DEVICES]; /* no gate: the bucket's cap; gated: the level that opens the gate */
static int64_t cap[VGPU_MAX_DEVICES];   /* the bucket's cap; gated, 2 bursts, so that a wake-up that comes
                                         * late does not throw away what refilled meanwhile */
static int64_t period_ns; /* 0: paced launch by launch; else gated: on P% of it, off the rest */
static int64_t phase_ns[VGPU_MAX_DEVICES]; /* -1: free-running gate; else the slot's start in each period */
static cuEventElapsedTime_t elapsed_fn;
static uint64_t rng = 0x9e3779b97f4a7c15ull; /* sampling; under mu */
static int open_captures; /* captures begun, not seen to end (capture_begun) */

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- the shared bucket ---- */

static void add_clamped(int64_t *p, int64_t d, int64_t hi)
{
    int64_t o = __atomic_load_n(p, __ATOMIC_RELAXED), n;

    do {
        /* the region is the container's to scribble on: clamp what we read first;
         * then |d| <= CHARGE_MAX or cap - TOKENS_MIN cannot overflow */
        n = o > hi ? hi : o < TOKENS_MIN ? TOKENS_MIN : o;
        n += d;
        if (n > hi)
            n = hi;
        if (n < TOKENS_MIN)
            n = TOKENS_MIN;
    } while (!__atomic_compare_exchange_n(p, &o, n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static void add_sat_atomic(uint64_t *p, uint64_t v)
{
    uint64_t o = __atomic_load_n(p, __ATOMIC_RELAXED);

    while (!__atomic_compare_exchange_n(p, &o, vgpu_add_sat(o, v), 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void charge(int qi, int64_t ns)
{
    struct vgpu_compute_shared *c = vgpu_region_compute(qi);

    if (c && ns)
        add_clamped(&c->tokens, -ns, cap[qi]);
}

/* busy_ns and launches for vgpu status: what was charged in the end */
static void account(int qi, int64_t ns)
{
    struct vgpu_compute_shared *c = vgpu_region_compute(qi);

    if (!c)
        return;
    add_sat_atomic(&c->busy_ns, ns > 0 ? (uint64_t)ns : 0);
    add_sat_atomic(&c->launches, 1);
}

/* Where now falls in qi's period counted from its slot's start (with a phase). */
static int64_t slot_pos(int qi, uint64_t now)
{
    return (int64_t)((now + (uint64_t)(period_ns - phase_ns[qi])) % (uint64_t)period_ns);
}

/* With a slot, the container's device time comes all at the slot's start: a
 * slot's worth less any debt (charged past the last slot's, or measured longer
 * than estimated); what a slot leaves unused is not carried. Launches are
 * charged when they start, so a container that keeps the device busy stops
 * launching once what it has queued fills its slot, and its work does not run
 * on into the next container's. A stamp (the slot's start) in refill_ns makes
 * it once per slot among all the container's processes. */
static void refill_slot(struct vgpu_compute_shared *c, int qi, uint64_t now, uint64_t last)
{
    uint64_t start = now - (uint64_t)slot_pos(qi, now);
    int64_t o, n;

    if ((last >= start && last <= now + 1000000000ULL) ||
        !__atomic_compare_exchange_n(&c->refill_ns, &last, start, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return; /* this slot's is made (or a stamp from before a reboot is replaced just now) */
    o = __atomic_load_n(&c->tokens, __ATOMIC_RELAXED);
    do {
        n = o > 0 ? 0 : o < TOKENS_MIN ? TOKENS_MIN : o;
        n = n + burst[qi] > cap[qi] ? cap[qi] : n + burst[qi];
    } while (!__atomic_compare_exchange_n(&c->tokens, &o, n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

/* Else the interval since the last refill belongs to whoever moves the stamp
 * (CAS), so concurrent refills of several processes never count a nanosecond
 * twice. */
static int64_t refill(int qi, uint64_t now)
{
    struct vgpu_compute_shared *c = vgpu_region_compute(qi);
    uint64_t last, dt;

    if (!c)
        return 0;
    last = __atomic_load_n(&c->refill_ns, __ATOMIC_ACQUIRE);
    if (period_ns && phase_ns[qi] >= 0) {
        refill_slot(c, qi, now, last);
    } else if (last == 0 || last > now + 1000000000ULL) {
        /* first use, or a stamp from before a reboot: start the clock now */
        __atomic_compare_exchange_n(&c->refill_ns, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    } else if (now > last && __atomic_compare_exchange_n(&c->refill_ns, &last, now, 0, __ATOMIC_ACQ_REL,
                                                         __ATOMIC_RELAXED)) {
        dt = now - last;
        if (dt > REFILL_DT_MAX)
            dt = REFILL_DT_MAX;
        dt = dt * (uint64_t)pct[qi] / 100;
        if (dt > (uint64_t)(cap[qi] - TOKENS_MIN))
            dt = (uint64_t)(cap[qi] - TOKENS_MIN); /* enough to go from the deepest debt to full */
        add_clamped(&c->tokens, (int64_t)dt, cap[qi]);
    }
    last = (uint64_t)__atomic_load_n(&c->tokens, __ATOMIC_RELAXED);
    return (int64_t)last < TOKENS_MIN ? TOKENS_MIN : (int64_t)last;
}

/* Our event calls are made in RELAXED capture mode: while another thread
 * captures in GLOBAL mode, cuEventQuery & co. are "potentially unsafe" calls
 * that would fail and invalidate that capture. Our events are never recorded
 * in a capture, so they are safe to use; the caller's mode is restored before
 * its own launch. */
static int relax(void)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;

    if (REALT(cuThreadExchangeStreamCaptureMode_t, cuThreadExchangeStreamCaptureMode)(&m) != CUDA_SUCCESS)
        return -1;
    return (int)m;
}

static void unrelax(int old)
{
    CUstreamCaptureMode m = (CUstreamCaptureMode)old;

    if (old >= 0)
        REALT(cuThreadExchangeStreamCaptureMode_t, cuThreadExchangeStreamCaptureMode)(&m);
}

int vgpu_capture_relax(void) { return relax(); }
void vgpu_capture_restore(int old) { unrelax(old); }

/* ---- harvesting ---- */

static int take_flag(void) { return __atomic_exchange_n(&harvesting, 1, __ATOMIC_ACQUIRE) == 0; }
static void drop_flag(void) { __atomic_store_n(&harvesting, 0, __ATOMIC_RELEASE); }

static CUresult record(CUevent e, CUstream s, int ptsz)
{
    return ptsz ? REALT(cuEventRecord_t, cuEventRecord_ptsz)(e, s) : REALT(cuEventRecord_t, cuEventRecord)(e, s);
}

/* Puts a pair (or b alone, a NULL: a is kept as the pool's ref) back into its
 * pool, or returns 0 when the pool has moved on. Under mu. */
static int give_back_locked(struct pool *p, CUcontext ctx, CUevent a, CUevent b)
{
    if (!p || p->ctx != ctx || p->nfree + (a ? 2 : 1) > 2 * RING)
        return 0;
    if (a)
        p->ev[p->nfree++] = a;
    p->ev[p->nfree++] = b;
    return 1;
}

/* The device time to charge for a launch measured as meas ns between its
 * events: the part of its interval, placed on CLOCK_MONOTONIC, that no other
 * launch of the container covered (the container's busy spans in the shared
 * region). Events bracket whatever the device did meanwhile (other streams,
 * other processes' time slices), so plain sums would count overlaps twice.
 * The first start event measured in a context (and, once offsets pass
 * REBASE_NS, a newer one) becomes its ref and is kept (*kept = 1). With the
 * harvest flag. */
static int64_t uncovered(const struct ticket *e, int64_t meas, int *kept)
{
    struct pool *p = e->pool;
    CUevent ref, old = NULL;
    float ms = 0;
    int64_t off = 0, at;
    int have_off = 0, mine;

    *kept = 0;
    pthread_mutex_lock(&mu);
    ref = p && p->ctx == e->ctx ? p->ref : NULL;
    pthread_mutex_unlock(&mu);
    if (ref && elapsed_fn(&ms, ref, e->start) == CUDA_SUCCESS && isfinite(ms) && fabsf(ms) < 1e6f) {
        off = (int64_t)((double)ms * 1e6);
        have_off = 1;
    }
    pthread_mutex_lock(&mu);
    mine = p && p->ctx == e->ctx && p->ref == ref;
    if (mine && (!ref || !have_off)) { /* a fresh origin */
        old = ref;
        p->ref = e->start;
        p->ref_host = e->rec;
        off = 0;
        *kept = 1;
    } else if (mine) {
        if (e->rec - off > p->ref_host)
            p->ref_host = e->rec - off;
        if (off > REBASE_NS) {
            old = ref;
            p->ref = e->start;
            p->ref_host += off;
            off = 0;
            *kept = 1;
        }
    }
    at = mine ? p->ref_host + off : 0;
    pthread_mutex_unlock(&mu);
    if (old)
        REALT(cuEventDestroy_t, cuEventDestroy_v2)(old);
    return mine ? vgpu_region_cover(e->qi, at, at + meas, (int64_t)vgpu_now_ns()) : meas;
}

/* With the harvest flag: completes the oldest entry once its end event is
 * done, polling for it up to wait_ns. When it is still running then: with
 * drop, the entry goes anyway (its estimate stays charged); else it stays.
 * 1 = an entry left the ring. */
static int harvest_one(uint64_t wait_ns, int drop)
{
    struct ticket e;
    CUresult r;
    float ms = 0;
    int64_t meas, span = 0;
    uint64_t t0 = wait_ns ? vgpu_now_ns() : 0;
    int ok, back = 0, kept = 0;

    pthread_mutex_lock(&mu);
    if (!count) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    e = ring[head]; /* only the flag holder takes entries out: it stays there */
    pthread_mutex_unlock(&mu);
    while ((r = REALT(cuEventQuery_t, cuEventQuery)(e.end)) == CUDA_ERROR_NOT_READY && wait_ns &&
           vgpu_now_ns() - t0 < wait_ns)
        sleep_ns(POLL_NS);
    if (r == CUDA_ERROR_NOT_READY && !drop)
        return 0;
    ok = r == CUDA_SUCCESS && elapsed_fn(&ms, e.start, e.end) == CUDA_SUCCESS && isfinite(ms) && ms >= 0;
    meas = e.est;
    if (ok) {
        span = ms >= (float)(CHARGE_MAX / 1000000) ? CHARGE_MAX : (int64_t)((double)ms * 1e6);
        meas = uncovered(&e, span, &kept);
    }
    pthread_mutex_lock(&mu);
    head = (head + 1) % RING;
    count--;
    if (pending[e.qi] > 0)
        pending[e.qi]--;
    if (ok) {
        est_ns[e.qi] = est_known[e.qi] ? est_ns[e.qi] + (meas - est_ns[e.qi]) / 4 : meas;
        span_ns[e.qi] = span_ns[e.qi] ? span_ns[e.qi] + (span - span_ns[e.qi]) / 4 : span;
        __atomic_store_n(&est_known[e.qi], 1, __ATOMIC_RELEASE);
    }
    if (r == CUDA_SUCCESS)
        back = give_back_locked(e.pool, e.ctx, kept ? NULL : e.start, e.end);
    pthread_mutex_unlock(&mu);
    /* events we do not keep: destroyed while their context is alive; after any
     * other error the context is gone, and its events with it */
    if (!back && r == CUDA_SUCCESS) {
        if (!kept)
            REALT(cuEventDestroy_t, cuEventDestroy_v2)(e.start);
        REALT(cuEventDestroy_t, cuEventDestroy_v2)(e.end);
    }
    charge(e.qi, meas - e.est);
    account(e.qi, meas);
    return 1;
}

/* Completes whatever is done, without waiting; skipped while another thread harvests. */
static void harvest(uint64_t now)
{
    uint64_t last = __atomic_load_n(&harvested_at, __ATOMIC_RELAXED);
    unsigned n = __atomic_load_n(&count, __ATOMIC_RELAXED);
    int mode;

    /* count is read without mu: a hint; a launch of a few us must not pay for
     * event queries at every launch, so at most one try per HARVEST_GAP_NS
     * while the ring has room */
    if (n == 0 || (now - last < HARVEST_GAP_NS && n < RING / 2))
        return;
    if (!take_flag())
        return;
    __atomic_store_n(&harvested_at, now, __ATOMIC_RELAXED);
    mode = relax();
    while (harvest_one(0, 0)) {
    }
    unrelax(mode);
    drop_flag();
}

/* Waits up to wait_ns for the oldest measurement (or lets another thread that
 * harvests do it). 1 = an entry completed. */
static int wait_oldest(uint64_t wait_ns)
{
    int done, mode;

    if (!take_flag()) {
        sleep_ns(POLL_NS);
        return 0;
    }
    mode = relax();
    done = harvest_one(wait_ns, 0);
    while (harvest_one(0, 0)) {
    }
    unrelax(mode);
    drop_flag();
    return done;
}

/* ---- pools of events, per context ---- */

/* The pool of context ctx, which is current (created on first use). NULL: none. */
static struct pool *pool_for(CUcontext ctx)
{
    struct pool *p;
    CUdevice d;
    int qi;

    pthread_mutex_lock(&mu);
    p = last_pool;
    if (!p || p->ctx != ctx)
        for (p = pools; p && p->ctx != ctx; p = p->next) {
        }
    if (p)
        last_pool = p;
    pthread_mutex_unlock(&mu);
    if (p)
        return p;
    if (REALT(cuCtxGetDevice_t, cuCtxGetDevice)(&d) != CUDA_SUCCESS)
        return NULL;
    qi = vgpu_quota_index(d);
    pthread_mutex_lock(&mu);
    for (p = pools; p && p->ctx != ctx; p = p->next) {
    }
    if (!p) {
        for (p = pools; p && p->ctx; p = p->next) {
        }
        if (!p && (p = calloc(1, sizeof *p))) {
            p->next = pools;
            pools = p;
        }
        if (p) {
            p->ctx = ctx;
            p->cudev = d;
            p->qi = qi;
            p->nfree = 0;
            p->ref = NULL; /* a previous context's ref went with it */
        }
    }
    if (p)
        last_pool = p;
    pthread_mutex_unlock(&mu);
    return p;
}

static CUresult capture_status(CUstream s, int ptsz, CUstreamCaptureStatus *st)
{
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    return ptsz ? REALT(cuStreamIsCapturing_t, cuStreamIsCapturing_ptsz)(s, st)
                : REALT(cuStreamIsCapturing_t, cuStreamIsCapturing)(s, st);
}

/* Whether a launch on s would be captured rather than run. Asking the driver
 * costs about a us a launch on the H200 (bench/gpu/pathcost.sh), so it is asked
 * only while a capture this process began may be open (open_captures). */
static int capturing(CUstream s, int ptsz)
{
    CUstreamCaptureStatus st;

    if (!__atomic_load_n(&open_captures, __ATOMIC_ACQUIRE))
        return 0;
    /* an error here (a bad stream, an implicit capture) fails the launch too */
    return capture_status(s, ptsz, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* ---- captures ----
 * open_captures counts the captures begun and not yet seen to end: +1 for a
 * begin that succeeded, -1 for an end after which the stream, capturing
 * before, no longer is. A capture never ended (its context destroyed with it)
 * keeps the count up, and launches keep asking: the safe side. */

static CUresult capture_begun(CUresult r)
{
    if (r == CUDA_SUCCESS)
        __atomic_add_fetch(&open_captures, 1, __ATOMIC_ACQ_REL);
    return r;
}

static CUresult end_capture(CUstream s, CUgraph *g, int ptsz)
{
    CUstreamCaptureStatus st;
    int was, n;
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    was = capture_status(s, ptsz, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
    r = ptsz ? REAL(cuStreamEndCapture_ptsz)(s, g) : REAL(cuStreamEndCapture)(s, g);
    if (was && capture_status(s, ptsz, &st) == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_NONE) {
        n = __atomic_load_n(&open_captures, __ATOMIC_RELAXED);
        while (n > 0 && !__atomic_compare_exchange_n(&open_captures, &n, n - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        }
    }
    return r;
}

#define BEGIN_CAPTURE(call)                                                                                            \
    do {                                                                                                               \
        if (!vgpu_ready())                                                                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                                                         \
        return capture_begun(call);                                                                                    \
    } while (0)

CUresult cuStreamBeginCapture(CUstream s) { BEGIN_CAPTURE(REAL(cuStreamBeginCapture)(s)); }
CUresult cuStreamBeginCapture_ptsz(CUstream s) { BEGIN_CAPTURE(REAL(cuStreamBeginCapture_ptsz)(s)); }
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) { BEGIN_CAPTURE(REAL(cuStreamBeginCapture_v2)(s, m)); }
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m)
{
    BEGIN_CAPTURE(REAL(cuStreamBeginCapture_v2_ptsz)(s, m));
}
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                     size_t n, CUstreamCaptureMode m)
{
    BEGIN_CAPTURE(REAL(cuStreamBeginCaptureToGraph)(s, g, deps, edges, n, m));
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                          const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode m)
{
    BEGIN_CAPTURE(REAL(cuStreamBeginCaptureToGraph_ptsz)(s, g, deps, edges, n, m));
}
CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { return end_capture(s, g, 0); }
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { return end_capture(s, g, 1); }

/* ---- one launch ---- */

/* Estimate of one launch on qi. A process's first launches on a device go one
 * at a time until one is measured, unless the container has measured some
 * already (its average); a first launch still running after WAIT_NS counts as
 * at least that long. Under mu. */
static int estimate_locked(int qi)
{
    struct vgpu_compute_shared *c = vgpu_region_compute(qi);
    uint64_t busy, n;

    if (est_known[qi])
        return 1;
    if (c && (n = __atomic_load_n(&c->launches, __ATOMIC_RELAXED)) > 0) {
        busy = __atomic_load_n(&c->busy_ns, __ATOMIC_RELAXED);
        est_ns[qi] = (int64_t)(busy / n > (uint64_t)CHARGE_MAX ? (uint64_t)CHARGE_MAX : busy / n);
        __atomic_store_n(&est_known[qi], 1, __ATOMIC_RELEASE);
        return 1;
    }
    return pending[qi] == 0;
}

/* Whether a launch on qi may start with tok in the bucket; else *ns is how
 * long the bucket needs to allow it. Without a period: while the bucket is not
 * negative. With one, the container's gate (shared) closes when the bucket goes
 * negative and opens only when it holds a burst again, so the device is the
 * container's for P% of each period at a stretch, then idle for the rest.
 * With a phase from the host (one per container sharing the GPU), the stretch
 * is a fixed slot instead: [phase, phase + P% of T) of every period on
 * CLOCK_MONOTONIC, which all containers of a host share, so containers whose
 * slots do not overlap never time-slice with each other; launches start in it
 * while the slot's device time (refill_slot) is not spent. */
static int may_start(int qi, int64_t tok, uint64_t now, int64_t *ns)
{
    uint32_t *gate;
    int64_t pos;

    if (period_ns && phase_ns[qi] >= 0) {
        pos = slot_pos(qi, now);
        if (pos < burst[qi] && tok >= 0)
            return 1;
        *ns = period_ns - pos; /* the next slot, and its refill */
        return 0;
    }
    gate = period_ns ? vgpu_region_gate(qi) : NULL;
    if (!gate) {
        *ns = -tok * 100 / pct[qi];
        return tok >= 0;
    }
    if (__atomic_load_n(gate, __ATOMIC_ACQUIRE)) {
        if (tok >= burst[qi]) {
            __atomic_store_n(gate, 0, __ATOMIC_RELEASE);
            return 1;
        }
    } else if (tok >= 0) {
        return 1;
    } else {
        __atomic_store_n(gate, 1, __ATOMIC_RELEASE);
    }
    *ns = (burst[qi] - tok) * 100 / pct[qi];
    return 0;
}

/* Waits until a launch on qi may start (may_start). One clock read per round:
 * a launch of a few us must not pay for several (in a VM whose clock source
 * has no vDSO each read is a system call). */
static void pace(int qi)
{
    int64_t tok, ns;
    uint64_t cold_since = 0, now;
    int known;

    for (;;) {
        now = vgpu_now_ns();
        harvest(now);
        /* est_known, once set, stays set (a fork's child starts afresh) */
        if (!(known = __atomic_load_n(&est_known[qi], __ATOMIC_ACQUIRE))) {
            pthread_mutex_lock(&mu);
            known = estimate_locked(qi);
            if (!known && cold_since && now - cold_since >= WAIT_NS) {
                est_ns[qi] = (int64_t)WAIT_NS;
                __atomic_store_n(&est_known[qi], known = 1, __ATOMIC_RELEASE);
            }
            pthread_mutex_unlock(&mu);
        }
        if (!known) {
            if (!cold_since)
                cold_since = now;
            wait_oldest(WAIT_NS);
            continue;
        }
        tok = refill(qi, now);
        if (may_start(qi, tok, now, &ns))
            return;
        sleep_ns(ns < SLEEP_MIN_NS ? SLEEP_MIN_NS : ns > SLEEP_MAX_NS ? SLEEP_MAX_NS : ns);
    }
}

/* A ring slot for one more launch; 0 when none came free within WAIT_NS (the
 * launch is then paced by its estimate only, rather than wait on work that
 * may itself wait for this thread). Under mu, which it lets go while it
 * waits, never across a driver call. */
static int reserve_slot_locked(void)
{
    uint64_t t0 = 0;

    while (count + reserved >= RING) {
        pthread_mutex_unlock(&mu);
        if (!t0) {
            t0 = vgpu_now_ns();
        } else if (vgpu_now_ns() - t0 >= WAIT_NS) {
            pthread_mutex_lock(&mu);
            return 0;
        }
        wait_oldest(WAIT_NS);
        pthread_mutex_lock(&mu);
    }
    reserved++;
    return 1;
}

/* Whether this launch on qi is measured: always while it has no estimate or
 * launches span SAMPLE_ALL_NS or more between their events; else 1 in
 * SAMPLE_EVERY at random (the others are charged the estimate, which these
 * samples keep current). By the span, not the estimate: launches that overlap
 * others (streams, processes) have a small estimate, the part no other launch
 * covered, and charging that to unmeasured ones, whose own spans the union
 * never sees, undercharged two processes of one container (up to 82 % for 50
 * in the simulator, under load). Under mu. */
static int sampled_locked(int qi)
{
    if (!est_known[qi] || !span_ns[qi] || span_ns[qi] >= SAMPLE_ALL_NS)
        return 1;
    rng ^= rng << 13; /* xorshift64 */
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (rng * 0x2545f4914f6cdd1dull) >> 32 & (SAMPLE_EVERY - 1) ? 0 : 1; /* xorshift64*: its high bits */
}

/* begin() in ctx, which is current. */
static void begin_in(CUcontext ctx, CUstream s, int ptsz, struct ticket *t)
{
    struct pool *p;
    int qi, have = 0, mode;

    if (!(p = pool_for(ctx)) || (qi = p->qi) < 0 || qi >= VGPU_MAX_DEVICES || pct[qi] >= 100)
        return;
    if (capturing(s, ptsz))
        return; /* captured work runs, and is paced, when its graph is launched */
    pace(qi);
    t->pool = p;
    t->ctx = ctx;
    t->s = s;
    t->ptsz = ptsz;
    t->qi = qi;
    /* one lock round (unless the ring is full): sampled or not, a ring slot, events */
    pthread_mutex_lock(&mu);
    if ((t->on = sampled_locked(qi) && reserve_slot_locked()) && p->ctx == ctx && p->nfree >= 2) {
        t->end = p->ev[--p->nfree];
        t->start = p->ev[--p->nfree];
        have = 1;
    }
    t->est = est_ns[qi];
    pthread_mutex_unlock(&mu);
    charge(qi, t->est);
    if (!t->on)
        return;
    mode = relax();
    if (!have) {
        if (REALT(cuEventCreate_t, cuEventCreate)(&t->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
            goto unmeasured;
        if (REALT(cuEventCreate_t, cuEventCreate)(&t->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
            REALT(cuEventDestroy_t, cuEventDestroy_v2)(t->start);
            goto unmeasured;
        }
    }
    t->rec = (int64_t)vgpu_now_ns();
    if (record(t->start, s, ptsz) == CUDA_SUCCESS) {
        unrelax(mode);
        return;
    }
    pthread_mutex_lock(&mu);
    have = give_back_locked(p, ctx, t->start, t->end);
    pthread_mutex_unlock(&mu);
    if (!have) {
        REALT(cuEventDestroy_t, cuEventDestroy_v2)(t->start);
        REALT(cuEventDestroy_t, cuEventDestroy_v2)(t->end);
    }
unmeasured: /* paced by its estimate only */
    unrelax(mode);
    pthread_mutex_lock(&mu);
    reserved--;
    pthread_mutex_unlock(&mu);
    t->on = 0;
}

/* Before a launch on stream s. -1: the library failed closed; else 0, and t
 * says what was done. The launch is accounted to the stream's context (an
 * explicit stream may belong to another context than the current one). */
static int begin(CUstream s, int ptsz, struct ticket *t)
{
    CUcontext cur = NULL, ctx, dummy;

    memset(t, 0, sizeof *t);
    t->qi = -1;
    if (!vgpu_ready())
        return -1;
    if (__atomic_load_n(&vgpu_compute_off, __ATOMIC_RELAXED))
        return 0;
    if (REALT(cuCtxGetCurrent_t, cuCtxGetCurrent)(&cur) != CUDA_SUCCESS)
        cur = NULL;
    ctx = cur;
    if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD &&
        (REALT(cuStreamGetCtx_t, cuStreamGetCtx)(s, &ctx) != CUDA_SUCCESS || !ctx))
        ctx = cur;
    if (!ctx)
        return 0; /* the driver will refuse the launch */
    /* our event calls relax the capture mode themselves (relax), only when made */
    if (ctx == cur) {
        begin_in(ctx, s, ptsz, t);
    } else if (REALT(cuCtxPushCurrent_t, cuCtxPushCurrent_v2)(ctx) == CUDA_SUCCESS) {
        begin_in(ctx, s, ptsz, t);
        REALT(cuCtxPopCurrent_t, cuCtxPopCurrent_v2)(&dummy);
    }
    return 0;
}

/* After the launch returned r. */
static CUresult end(struct ticket *t, CUresult r)
{
    int back, mode;

    if (t->qi < 0)
        return r;
    if (!t->on) {
        if (r != CUDA_SUCCESS)
            charge(t->qi, -t->est); /* nothing ran */
        else
            account(t->qi, t->est); /* ran unmeasured: its estimate stands for it */
        return r;
    }
    mode = relax();
    if (r == CUDA_SUCCESS && record(t->end, t->s, t->ptsz) == CUDA_SUCCESS) {
        unrelax(mode);
        pthread_mutex_lock(&mu);
        ring[(head + count) % RING] = *t;
        count++;
        reserved--;
        pending[t->qi]++;
        pthread_mutex_unlock(&mu);
        return r;
    }
    if (r != CUDA_SUCCESS)
        charge(t->qi, -t->est);
    else
        account(t->qi, t->est);
    pthread_mutex_lock(&mu);
    reserved--;
    back = give_back_locked(t->pool, t->ctx, t->start, t->end);
    pthread_mutex_unlock(&mu);
    if (!back) {
        REALT(cuEventDestroy_t, cuEventDestroy_v2)(t->start);
        REALT(cuEventDestroy_t, cuEventDestroy_v2)(t->end);
    }
    unrelax(mode);
    return r;
}

/* ---- the launch entry points ----
 * Fast path, in assembly so that it is exactly that: with no device limited,
 * one load and compare of vgpu_compute_off (graph launches: vgpu_graph_off), a
 * predictable branch, and the same indirect jump into the driver as an unhooked
 * trampoline (arguments untouched). Otherwise a jump to the paced path, a C
 * function of the same signature. */

#define STR_(x) #x
#define STR(x) STR_(x)
#define ENTRY(name) ENTRY_IF(name, vgpu_compute_off)
#define ENTRY_IF(name, flag)                                                                                           \
    __asm__("\t.text\n\t.globl " #name "\n\t.type " #name ",@function\n\t.p2align 4\n" #name ":\n"                     \
            "\tcmpl $0, " #flag "(%rip)\n"                                                                             \
            "\tje vgpu_paced_" #name "\n"                                                                              \
            "\tjmp *vgpu_table+8*" STR(VGPU_IDX_##name) "(%rip)\n"                                                     \
            "\t.size " #name ",.-" #name "\n");
#define PACED __attribute__((used, noinline)) CUresult
#define BRACKET(s, ptsz, call)                                                                                         \
    do {                                                                                                               \
        struct ticket t_;                                                                                              \
        if (begin((s), (ptsz), &t_) < 0)                                                                               \
            return CUDA_ERROR_NOT_INITIALIZED;                                                                         \
        return end(&t_, (call));                                                                                       \
    } while (0)

#define KARGS CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem
#define KPASS f, gx, gy, gz, bx, by, bz, shmem

PACED vgpu_paced_cuLaunchKernel(KARGS, CUstream s, void **params, void **extra);
PACED vgpu_paced_cuLaunchKernel(KARGS, CUstream s, void **params, void **extra)
{
    BRACKET(s, 0, REAL(cuLaunchKernel)(KPASS, s, params, extra));
}
ENTRY(cuLaunchKernel)

PACED vgpu_paced_cuLaunchKernel_ptsz(KARGS, CUstream s, void **params, void **extra);
PACED vgpu_paced_cuLaunchKernel_ptsz(KARGS, CUstream s, void **params, void **extra)
{
    BRACKET(s, 1, REAL(cuLaunchKernel_ptsz)(KPASS, s, params, extra));
}
ENTRY(cuLaunchKernel_ptsz)

PACED vgpu_paced_cuLaunchCooperativeKernel(KARGS, CUstream s, void **params);
PACED vgpu_paced_cuLaunchCooperativeKernel(KARGS, CUstream s, void **params)
{
    BRACKET(s, 0, REAL(cuLaunchCooperativeKernel)(KPASS, s, params));
}
ENTRY(cuLaunchCooperativeKernel)

PACED vgpu_paced_cuLaunchCooperativeKernel_ptsz(KARGS, CUstream s, void **params);
PACED vgpu_paced_cuLaunchCooperativeKernel_ptsz(KARGS, CUstream s, void **params)
{
    BRACKET(s, 1, REAL(cuLaunchCooperativeKernel_ptsz)(KPASS, s, params));
}
ENTRY(cuLaunchCooperativeKernel_ptsz)

/* a NULL config: the driver says what is wrong */
PACED vgpu_paced_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
PACED vgpu_paced_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    BRACKET(c ? c->hStream : NULL, 0, REAL(cuLaunchKernelEx)(c, f, params, extra));
}
ENTRY(cuLaunchKernelEx)

PACED vgpu_paced_cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
PACED vgpu_paced_cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    BRACKET(c ? c->hStream : NULL, 1, REAL(cuLaunchKernelEx_ptsz)(c, f, params, extra));
}
ENTRY(cuLaunchKernelEx_ptsz)

/* Graph launches also count graph memory (memory.c): the exec's allocation
 * nodes are reserved before the launch is paced, and the count settled after.
 * Their fast path tests vgpu_graph_off, which stays 1 only while no exec with
 * allocation nodes exists and compute is not limited. */
static CUresult graph_launch(CUgraphExec g, CUstream s, int ptsz)
{
    struct vgpu_graph_ticket gt;
    struct ticket t;
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if ((r = vgpu_graph_before(g, &gt)) != CUDA_SUCCESS)
        return r; /* refused before it is paced */
    begin(s, ptsz, &t);
    r = end(&t, ptsz ? REAL(cuGraphLaunch_ptsz)(g, s) : REAL(cuGraphLaunch)(g, s));
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
    struct ticket t[VGPU_MAX_DEVICES];
    CUresult r;
    unsigned i;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!list || n == 0 || n > VGPU_MAX_DEVICES) /* the driver says what is wrong */
        return REAL(cuLaunchCooperativeKernelMultiDevice)(list, n, flags);
    for (i = 0; i < n; i++)
        begin(list[i].hStream, 0, &t[i]);
    r = REAL(cuLaunchCooperativeKernelMultiDevice)(list, n, flags);
    for (i = 0; i < n; i++)
        end(&t[i], r);
    return r;
}
ENTRY(cuLaunchCooperativeKernelMultiDevice)

/* ---- contexts that go, fork, setup ---- */

void vgpu_compute_ctx_gone(CUcontext ctx, CUdevice dev, int by_dev)
{
    CUevent ev[2 * RING + 1];
    struct pool *p;
    int n, more, mode;

    if (__atomic_load_n(&vgpu_compute_off, __ATOMIC_RELAXED) || !pools)
        return;
    mode = relax();
    while (!take_flag())
        sleep_ns(POLL_NS);
    /* everything in flight is measured now, while its context still exists
     * (what is still running after 10 s keeps its estimate) */
    while (harvest_one(5 * WAIT_NS, 1)) {
    }
    do {
        more = 0;
        n = 0;
        pthread_mutex_lock(&mu);
        for (p = pools; p; p = p->next) {
            if (!p->ctx || (by_dev ? p->cudev != dev : p->ctx != ctx))
                continue;
            if (n + p->nfree + 1 > 2 * RING + 1) {
                more = 1;
                continue;
            }
            memcpy(ev + n, p->ev, sizeof ev[0] * (size_t)p->nfree);
            n += p->nfree;
            p->nfree = 0;
            if (p->ref)
                ev[n++] = p->ref;
            p->ref = NULL;
            p->ctx = NULL; /* free for the next context (a new one may get the same handle) */
            if (last_pool == p)
                last_pool = NULL;
        }
        pthread_mutex_unlock(&mu);
        while (n > 0)
            REALT(cuEventDestroy_t, cuEventDestroy_v2)(ev[--n]);
    } while (more);
    drop_flag();
    unrelax(mode);
}

static void atfork_child(void)
{
    /* the parent's events belong to the parent's contexts: forget them all */
    pthread_mutex_init(&mu, NULL);
    head = count = reserved = 0;
    memset(pending, 0, sizeof pending);
    memset(est_known, 0, sizeof est_known);
    memset(span_ns, 0, sizeof span_ns);
    pools = last_pool = NULL;
    harvesting = 0;
}

void vgpu_compute_setup(void)
{
    int any = 0;

    period_ns = (int64_t)(vgpu_q.compute_period_ms >= 0 ? vgpu_q.compute_period_ms : VGPU_PERIOD_MS) * 1000000LL;
    for (int i = 0; i < vgpu_q.ndev && i < VGPU_MAX_DEVICES; i++) {
        pct[i] = vgpu_q.dev[i].compute;
        if (pct[i] < 1)
            pct[i] = 1;
        if (pct[i] < 100) {
            any = 1;
            burst[i] = period_ns ? period_ns / 100 * pct[i] : pct[i] * BURST_NS_PER_PCT;
            phase_ns[i] = vgpu_q.dev[i].phase >= 0 ? period_ns / 100 * vgpu_q.dev[i].phase : -1;
            /* free-running gate: 2 bursts, so that a late wake-up loses nothing; in a
             * slot: 1, so that an idle container cannot run into the next slot */
            cap[i] = period_ns && phase_ns[i] < 0 ? 2 * burst[i] : burst[i];
            vgpu_log(VGPU_LOG_INFO, "device %d (%s): compute limited to %d%%", i, vgpu_q.dev[i].uuid, pct[i]);
        }
    }
    elapsed_fn = REALT(cuEventElapsedTime_t, cuEventElapsedTime_v2);
    if ((void *)elapsed_fn == (void *)vgpu_notfound_stub)
        elapsed_fn = REALT(cuEventElapsedTime_t, cuEventElapsedTime);
    if (any)
        pthread_atfork(NULL, NULL, atfork_child);
    __atomic_store_n(&vgpu_graph_off, !any, __ATOMIC_RELEASE);
    __atomic_store_n(&vgpu_compute_off, !any, __ATOMIC_RELEASE);
}
