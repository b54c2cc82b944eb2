/* Measurement (measure.h). On a device whose limit is below 100, each sampled
 * launch is bracketed by two events recorded on its own stream, just before
 * and just after it. elapsed(start, end) is that launch's device time,
 * whatever the stream had queued before (the start event is reached only when
 * that work is done). The pairs wait in a per-process ring; at every launch
 * the completed ones are harvested in order (cuEventQuery, then
 * cuEventElapsedTime).
 *
 * Busy union. Events bracket whatever the device did meanwhile (other streams,
 * other processes' time slices), so a launch is charged only the part of its
 * interval, placed on CLOCK_MONOTONIC, that the container's busy spans in the
 * shared region do not cover yet (uncovered()).
 *
 * Charges. A launch is charged its estimate at once (vgpu_measure_open), and
 * at harvest the difference between its measurement and that estimate, so the
 * bucket always accounts for the work in flight and what is charged in the end
 * is exactly what was measured.
 *
 * No lock is held across a driver call. One thread at a time harvests (an
 * atomic flag, taken with try-lock semantics); threads that must wait for a
 * measurement (a full ring, the first launch on a device) poll with short
 * sleeps and never block on the driver; after 2 s they go on with the
 * estimate (so work that waits for this very thread cannot deadlock it). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "account.h"
#include "capture.h"
#include "compute.h"
#include "cuda_hooks.h"
#include "measure.h"
#include "share.h"
#include "region.h"

typedef CUresult (*cuEventCreate_t)(CUevent *, unsigned int);
typedef CUresult (*cuEventDestroy_t)(CUevent);
typedef CUresult (*cuEventRecord_t)(CUevent, CUstream);
typedef CUresult (*cuEventQuery_t)(CUevent);
typedef CUresult (*cuEventElapsedTime_t)(float *, CUevent, CUevent);

#define RING           256          /* launches in flight per process, measured */
#define REBASE_NS      1000000000LL /* a newer ref once offsets pass 1 s (float ms precision) */
#define POLL_NS        200000LL     /* waiting for a measurement: poll every 0.2 ms */
#define WAIT_NS        VGPU_MEASURE_WAIT_NS
#define HARVEST_GAP_NS 50000ULL /* harvest looks at most every 50 us while the ring has room */
#define CHARGE_MAX     VGPU_PACER_CHARGE_MAX
#define KINDS          1024 /* launch kinds whose device time is kept, per process (a power of 2) */
#define KIND_PROBE     8    /* slots a kind may take, from its hash on */

struct vgpu_evpool { /* our events of one context, reused */
    CUcontext ctx;   /* NULL: free for another context */
    CUdevice cudev;
    int qi; /* quota index; -1 not the container's */
    int nfree;
    CUevent ev[2 * RING];
    /* Time origin of this context's measurements: a start event kept for it,
     * and its CLOCK_MONOTONIC estimate, the latest of (host time just before
     * a start event was recorded - its offset from ref) over all launches
     * measured: an event is never reached before it is recorded, and one
     * recorded on an idle device is reached at once, so it is tight. */
    CUevent ref;
    int64_t ref_host;
    struct vgpu_evpool *next;
};

struct vgpu_pacer vgpu_pacers[VGPU_MAX_DEVICES];
int vgpu_paced[VGPU_MAX_DEVICES];
static uint64_t share_now[VGPU_MAX_DEVICES];   /* the share word vgpu_pacers[i] was built from */
static uint64_t share_quota[VGPU_MAX_DEVICES]; /* the quota file's request and phase, as a word */
static int share_period_ms;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* ring, pools, estimates; never across a driver call */
static struct vgpu_ticket ring[RING];
static unsigned head, count, reserved;
static struct vgpu_estimate est[VGPU_MAX_DEVICES]; /* pending: under mu; known: also read atomically */
static struct vgpu_evpool *pools, *last_pool;
static int harvesting;        /* the harvest flag */
static uint64_t harvested_at; /* CLOCK_MONOTONIC of the last harvest that looked */
static int active;            /* a device is limited */
static cuEventElapsedTime_t elapsed_fn;
static uint64_t rng = 0x9e3779b97f4a7c15ull; /* sampling; under mu */
/* What each launch kind took when last measured: key 0 a free slot, ns -1
 * none yet. Under mu. */
static struct kind {
    uint64_t key;
    int64_t ns;
} kinds[KINDS];

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void charge(int qi, int64_t ns) { vgpu_pacer_charge(&vgpu_pacers[qi], vgpu_region_compute(qi), ns); }
static void account(int qi, int64_t ns) { vgpu_pacer_account(vgpu_region_compute(qi), ns); }

/* ---- launch kinds ---- */

uint64_t vgpu_measure_kind(int qi, const void *fn, unsigned gx, unsigned gy, unsigned gz)
{
    /* the grid by its power of two of blocks: a kernel's time grows with its
     * blocks, and shapes that change at every step (a server's prompts of
     * every length) would otherwise make every launch a new kind, measured */
    uint64_t blocks = (uint64_t)(gx ? gx : 1) * (gy ? gy : 1) * (gz ? gz : 1);
    uint64_t h = (uint64_t)(uintptr_t)fn * 0x9e3779b97f4a7c15ull;

    h ^= ((uint64_t)(64 - __builtin_clzll(blocks)) * 0xff51afd7ed558ccdull) ^ (uint64_t)qi;
    h ^= h >> 29;
    return h ? h : 1;
}

/* kind's slot, or with add one for it (evicting the first of its probes when
 * all are taken); NULL if absent and not added. Under mu. */
static struct kind *kind_slot_locked(uint64_t key, int add)
{
    unsigned h = (unsigned)(key >> 40), i;
    struct kind *k, *empty = NULL;

    for (i = 0; i < KIND_PROBE; i++) {
        k = &kinds[(h + i) & (KINDS - 1)];
        if (k->key == key)
            return k;
        if (!k->key && !empty)
            empty = k;
    }
    if (!add)
        return NULL;
    k = empty ? empty : &kinds[h & (KINDS - 1)];
    k->key = key;
    k->ns = -1;
    return k;
}

/* A measurement of kind: the first stands, later ones move it a quarter of
 * the way (a kernel's time moves with its inputs, and a neighbour's time
 * slices stretch it). Under mu. */
static void kind_learn_locked(uint64_t key, int64_t ns)
{
    struct kind *k;

    if (!key || !(k = kind_slot_locked(key, 1)))
        return;
    k->ns = k->ns < 0 ? ns : k->ns + (ns - k->ns) / 4;
}

int64_t vgpu_measure_kind_estimate(int qi, struct vgpu_ticket *t)
{
    struct kind *k;
    int64_t ns = -1;

    if (t->kind) {
        pthread_mutex_lock(&mu);
        if ((k = kind_slot_locked(t->kind, 0)))
            ns = k->ns;
        pthread_mutex_unlock(&mu);
    }
    t->kind_known = ns >= 0;
    return ns >= 0 ? ns : vgpu_measure_estimate(qi);
}

/* ---- harvesting ---- */

static int take_flag(void) { return __atomic_exchange_n(&harvesting, 1, __ATOMIC_ACQUIRE) == 0; }
static void drop_flag(void) { __atomic_store_n(&harvesting, 0, __ATOMIC_RELEASE); }

static CUresult record(CUevent e, CUstream s, int ptsz)
{
    return ptsz ? REALT(cuEventRecord_t, cuEventRecord_ptsz)(e, s) : REALT(cuEventRecord_t, cuEventRecord)(e, s);
}

/* Puts a pair (or b alone, a NULL: a is kept as the pool's ref) back into its
 * pool, or returns 0 when the pool has moved on. Under mu. */
static int give_back_locked(struct vgpu_evpool *p, CUcontext ctx, CUevent a, CUevent b)
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
static int64_t uncovered(const struct vgpu_ticket *e, int64_t meas, int *kept)
{
    struct vgpu_evpool *p = e->pool;
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
    struct vgpu_ticket e;
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
    if (est[e.qi].pending > 0)
        est[e.qi].pending--;
    if (ok) {
        vgpu_estimate_learn(&est[e.qi], meas, span);
        kind_learn_locked(e.kind, meas);
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
void vgpu_measure_harvest(uint64_t now)
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
    mode = vgpu_capture_relax();
    while (harvest_one(0, 0)) {
    }
    vgpu_capture_restore(mode);
    drop_flag();
}

/* Waits up to wait_ns for the oldest measurement (or lets another thread that
 * harvests do it). 1 = an entry completed. */
int vgpu_measure_wait_oldest(uint64_t wait_ns)
{
    int done, mode;

    if (!take_flag()) {
        sleep_ns(POLL_NS);
        return 0;
    }
    mode = vgpu_capture_relax();
    done = harvest_one(wait_ns, 0);
    while (harvest_one(0, 0)) {
    }
    vgpu_capture_restore(mode);
    drop_flag();
    return done;
}

/* ---- pools of events, per context ---- */

/* The pool of context ctx, which is current (created on first use). NULL: none. */
static struct vgpu_evpool *pool_for(CUcontext ctx)
{
    struct vgpu_evpool *p;
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
        vgpu_measure_wait_oldest(WAIT_NS);
        pthread_mutex_lock(&mu);
    }
    reserved++;
    return 1;
}

int vgpu_measure_qi(CUcontext ctx, struct vgpu_evpool **pool)
{
    struct vgpu_evpool *p = pool_for(ctx);

    *pool = p;
    return p && p->qi >= 0 && p->qi < VGPU_MAX_DEVICES ? p->qi : -1;
}

int vgpu_measure_estimate_ready(int qi, uint64_t now, uint64_t *cold_since)
{
    int known;

    /* known, once set, stays set (a fork's child starts afresh) */
    if (__atomic_load_n(&est[qi].known, __ATOMIC_ACQUIRE))
        return 1;
    pthread_mutex_lock(&mu);
    known = vgpu_estimate_ready(&est[qi], vgpu_region_compute(qi), now, cold_since);
    pthread_mutex_unlock(&mu);
    return known;
}

int64_t vgpu_measure_estimate(int qi)
{
    return __atomic_load_n(&est[qi].known, __ATOMIC_ACQUIRE) ? __atomic_load_n(&est[qi].est_ns, __ATOMIC_RELAXED) : 0;
}

int64_t vgpu_measure_inflight_ns(int qi)
{
    int n;

    pthread_mutex_lock(&mu);
    n = est[qi].pending;
    pthread_mutex_unlock(&mu);
    return n > 0 ? n * vgpu_measure_estimate(qi) : 0;
}

void vgpu_measure_open(struct vgpu_evpool *p, CUcontext ctx, int qi, CUstream s, int ptsz, struct vgpu_ticket *t)
{
    int have = 0, mode;

    t->pool = p;
    t->ctx = ctx;
    t->s = s;
    t->ptsz = ptsz;
    t->qi = qi;
    /* one lock round (unless the ring is full): sampled or not, a ring slot, events */
    pthread_mutex_lock(&mu);
    /* a kind never measured is measured now: its first launch says how long
     * the next ones keep the device (vgpu_measure_kind_estimate) */
    if ((t->on = (vgpu_estimate_sampled(&est[qi], &rng) || (t->kind && !t->kind_known)) && reserve_slot_locked()) &&
        p->ctx == ctx && p->nfree >= 2) {
        t->end = p->ev[--p->nfree];
        t->start = p->ev[--p->nfree];
        have = 1;
    }
    t->est = est[qi].est_ns;
    pthread_mutex_unlock(&mu);
    charge(qi, t->est);
    if (!t->on)
        return;
    mode = vgpu_capture_relax();
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
        vgpu_capture_restore(mode);
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
    vgpu_capture_restore(mode);
    pthread_mutex_lock(&mu);
    reserved--;
    pthread_mutex_unlock(&mu);
    t->on = 0;
}

CUresult vgpu_measure_close(struct vgpu_ticket *t, CUresult r)
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
    mode = vgpu_capture_relax();
    if (r == CUDA_SUCCESS && record(t->end, t->s, t->ptsz) == CUDA_SUCCESS) {
        vgpu_capture_restore(mode);
        pthread_mutex_lock(&mu);
        ring[(head + count) % RING] = *t;
        count++;
        reserved--;
        est[t->qi].pending++;
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
    vgpu_capture_restore(mode);
    return r;
}

void vgpu_measure_ctx_gone(CUcontext ctx, CUdevice dev, int by_dev)
{
    CUevent ev[2 * RING + 1];
    struct vgpu_evpool *p;
    int n, more, mode;

    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE) || !pools)
        return;
    mode = vgpu_capture_relax();
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
    vgpu_capture_restore(mode);
}

static void atfork_child(void)
{
    /* the parent's events belong to the parent's contexts: forget them all */
    pthread_mutex_init(&mu, NULL);
    head = count = reserved = 0;
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) /* the parent's measurements: learn afresh */
        est[i].pending = est[i].known = 0, est[i].span_ns = est[i].unmeasured_ns = 0;
    pools = last_pool = NULL;
    harvesting = 0;
}

/* The share that holds for qi at now (vgpu_share_pick); with a new one the
 * device's pacer is built anew from it. */
const struct vgpu_pacer *vgpu_measure_pacer(int qi, uint64_t now)
{
    uint64_t w = share_quota[qi];
    struct vgpu_pacer p;

    if (vgpu_share_mapped())
        w = vgpu_share_pick(vgpu_share_stamp(), vgpu_share_arbitration(qi), vgpu_share_admission(qi), w, now);
    if ((uint32_t)w > (uint32_t)vgpu_q.dev[qi].compute * 100u) /* never above the limit, whoever wrote it */
        w = (w & 0xffffffff00000000ull) | (uint32_t)vgpu_q.dev[qi].compute * 100u;
    if (w != __atomic_load_n(&share_now[qi], __ATOMIC_RELAXED)) {
        /* threads racing here build the same pacer; a launch that reads it
         * half-built is paced by a mix of two shares once */
        vgpu_pacer_init_bp(&p, (int)(uint32_t)w, share_period_ms,
                           (uint32_t)(w >> 32) == VGPU_SHARE_NO_PHASE ? -1 : (int)(w >> 32));
        vgpu_pacers[qi] = p;
        __atomic_store_n(&share_now[qi], w, __ATOMIC_RELAXED);
        VGPU_DEBUG("device %d: share %d.%02d%%", qi, p.bp / 100, p.bp % 100);
    }
    return &vgpu_pacers[qi];
}

int vgpu_measure_setup(void)
{
    int period_ms = vgpu_q.compute_period_ms >= 0 ? vgpu_q.compute_period_ms : VGPU_DEFAULT_PERIOD_MS, any = 0;

    share_period_ms = period_ms;
    for (int i = 0; i < VGPU_MAX_DEVICES; i++)
        vgpu_pacer_init(&vgpu_pacers[i], 100, period_ms, -1);
    for (int i = 0; i < vgpu_q.ndev && i < VGPU_MAX_DEVICES; i++) {
        const struct vgpu_quota_dev *d = &vgpu_q.dev[i];
        /* paced: a request below the whole GPU (limit 100 with a request is
         * paced, by the arbitration) */
        if (d->compute_request >= 100 || d->spatial) /* spatial: MPS holds the share (mps.c) */
            continue;
        vgpu_paced[i] = any = 1;
        share_quota[i] = (uint64_t)(uint32_t)(d->compute_request > 0 ? d->compute_request * 100 : 100) |
                         (d->phase >= 0 ? (uint64_t)(d->phase * 100) : (uint64_t)VGPU_SHARE_NO_PHASE) << 32;
        share_now[i] = share_quota[i];
        vgpu_pacer_init_bp(&vgpu_pacers[i], (int)(uint32_t)share_quota[i], period_ms,
                           d->phase >= 0 ? d->phase * 100 : -1);
        /* the pacer's own share, not the quota's: a test compares the two */
        vgpu_log(VGPU_LOG_INFO, "device %d (%s): compute request %d%%, limit %d%%, paced at %d.%02d%%", i, d->uuid,
                 d->compute_request, d->compute, vgpu_pacers[i].bp / 100, vgpu_pacers[i].bp % 100);
    }
    if (any)
        vgpu_share_open();
    elapsed_fn = REALT(cuEventElapsedTime_t, cuEventElapsedTime_v2);
    if ((void *)elapsed_fn == (void *)vgpu_notfound_stub)
        elapsed_fn = REALT(cuEventElapsedTime_t, cuEventElapsedTime);
    if (any)
        pthread_atfork(NULL, NULL, atfork_child);
    __atomic_store_n(&active, any, __ATOMIC_RELEASE);
    return any;
}
