/* The pacer (pacer.h): token bucket, gate, slot, estimates, sampling. Pure. */
#include "pacer.h"
#include "vgpu.h"

_Static_assert((VGPU_PACER_SAMPLE_EVERY & (VGPU_PACER_SAMPLE_EVERY - 1)) == 0, "SAMPLE_EVERY: a power of 2");

void vgpu_pacer_init(struct vgpu_pacer *p, int pct, int period_ms, int phase_pct)
{
    pct = pct < 1 ? 1 : pct > 100 ? 100 : pct;
    vgpu_pacer_init_bp(p, pct * 100, period_ms, phase_pct >= 0 ? phase_pct * 100 : -1);
}

void vgpu_pacer_init_bp(struct vgpu_pacer *p, int bp, int period_ms, int phase_bp)
{
    p->bp = bp < 1 ? 1 : bp > VGPU_SHARE_FULL ? VGPU_SHARE_FULL : bp;
    p->pct = p->bp / 100 ? p->bp / 100 : 1;
    p->period_ns = (int64_t)(period_ms > 0 ? period_ms : 0) * 1000000LL;
    p->allot_ns = p->period_ns ? p->period_ns / VGPU_SHARE_FULL * p->bp : p->bp * (VGPU_PACER_ALLOT_NS_PER_PCT / 100);
    p->phase_ns =
        p->period_ns && phase_bp >= 0 && phase_bp < VGPU_SHARE_FULL ? p->period_ns / VGPU_SHARE_FULL * phase_bp : -1;
    p->slot_ns = p->phase_ns >= 0 ? p->allot_ns : 0;
    p->busy_below_ns = p->phase_ns >= 0 ? p->allot_ns - p->allot_ns / 100 * VGPU_PACER_BURST_PCT : 0;
    /* free-running gate: 2 allotments, so that a late wake-up loses nothing of
     * what refilled meanwhile; with a slot: 1, the most a light container may
     * start outside its slot at a stretch; no period: 1 */
    p->cap_ns = p->period_ns && p->phase_ns < 0 ? 2 * p->allot_ns : p->allot_ns;
}

static void add_clamped(int64_t *t, int64_t d, int64_t hi)
{
    int64_t o = __atomic_load_n(t, __ATOMIC_RELAXED), n;

    do {
        /* the region is the container's to scribble on: clamp what we read first;
         * then |d| <= CHARGE_MAX or cap - TOKENS_MIN cannot overflow */
        n = o > hi ? hi : o < VGPU_PACER_TOKENS_MIN ? VGPU_PACER_TOKENS_MIN : o;
        n += d;
        if (n > hi)
            n = hi;
        if (n < VGPU_PACER_TOKENS_MIN)
            n = VGPU_PACER_TOKENS_MIN;
    } while (!__atomic_compare_exchange_n(t, &o, n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static void add_sat_atomic(uint64_t *v, uint64_t d)
{
    uint64_t o = __atomic_load_n(v, __ATOMIC_RELAXED);

    while (!__atomic_compare_exchange_n(v, &o, vgpu_add_sat(o, d), 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

void vgpu_pacer_charge(const struct vgpu_pacer *p, struct vgpu_compute_shared *c, int64_t ns)
{
    if (c && ns)
        add_clamped(&c->tokens, -ns, p->cap_ns);
}

void vgpu_pacer_forgive(struct vgpu_compute_shared *c)
{
    int64_t o;

    if (!c)
        return;
    o = __atomic_load_n(&c->tokens, __ATOMIC_RELAXED);
    while (o < 0 && !__atomic_compare_exchange_n(&c->tokens, &o, 0, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

void vgpu_pacer_account(struct vgpu_compute_shared *c, int64_t ns)
{
    if (!c)
        return;
    add_sat_atomic(&c->busy_ns, ns > 0 ? (uint64_t)ns : 0);
    add_sat_atomic(&c->launches, 1);
}

/* Where now falls in the period counted from the slot's start. */
static int64_t slot_pos(const struct vgpu_pacer *p, uint64_t now)
{
    return (int64_t)((now + (uint64_t)(p->period_ns - p->phase_ns)) % (uint64_t)p->period_ns);
}

/* The bucket refills continuously in every mode, a slot included: the
 * interval since the last refill belongs to whoever moves the stamp (CAS), so
 * concurrent refills of several processes never count a nanosecond twice. */
int64_t vgpu_pacer_refill(const struct vgpu_pacer *p, struct vgpu_compute_shared *c, uint64_t now)
{
    uint64_t last, dt;
    int64_t tok;

    if (!c)
        return 0;
    last = __atomic_load_n(&c->refill_ns, __ATOMIC_ACQUIRE);
    if (last == 0) {
        /* first use: the clock starts, with one allotment, so that a new
         * container is light (its first requests wait for no slot) */
        if (__atomic_compare_exchange_n(&c->refill_ns, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            add_clamped(&c->tokens, p->allot_ns, p->cap_ns);
    } else if (last > now + 1000000000ULL) {
        /* a stamp from before a reboot: start the clock now */
        __atomic_compare_exchange_n(&c->refill_ns, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    } else if (now > last &&
               __atomic_compare_exchange_n(&c->refill_ns, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        dt = now - last;
        if (dt > VGPU_PACER_REFILL_DT_MAX)
            dt = VGPU_PACER_REFILL_DT_MAX;
        dt = dt * (uint64_t)p->bp / VGPU_SHARE_FULL;
        if (dt > (uint64_t)(p->cap_ns - VGPU_PACER_TOKENS_MIN))
            dt = (uint64_t)(p->cap_ns - VGPU_PACER_TOKENS_MIN); /* enough to go from the deepest debt to full */
        add_clamped(&c->tokens, (int64_t)dt, p->cap_ns);
    }
    tok = __atomic_load_n(&c->tokens, __ATOMIC_RELAXED);
    return tok < VGPU_PACER_TOKENS_MIN ? VGPU_PACER_TOKENS_MIN : tok;
}

/* Without a period: while the bucket is not negative. With one, the
 * container's gate closes when a launch finds the bucket negative and opens
 * only when it holds an allotment again.
 *
 * Without a phase the device is then the container's for pct% of each period
 * at a stretch, idle for the rest.
 *
 * With a phase (one per container sharing the GPU, from the host) the gate
 * tells a light container from a busy one. Open (light: below its share on
 * average, the bucket never fell a burst below full), a launch starts at
 * once, wherever the clock is: a light tenant never waits for a slot, it
 * spends credit saved below its share, a burst (BURST_PCT of an allotment) at
 * a stretch. Only a burst: a busy container that started with a full bucket
 * and shares the device with others gets less than the device and drains its
 * bucket slowly; spending it all outside its slot costs the neighbour whose
 * slot it runs in. Closed (busy: it spent the burst), launches start only in
 * the slot [phase, phase + slot_ns) on CLOCK_MONOTONIC, which all containers
 * of a host share, while the bucket is not negative and, behind what the
 * container queued, before the slot ends (vgpu_pacer_slot_fits); so busy
 * containers on one GPU take turns and time-slice with each other for one
 * launch at most. A busy container's bucket, refilled
 * continuously and spent in its slot, never reaches a whole allotment again
 * (at the slot's start it holds at most (100 - pct)% of one); only one that
 * left the device alone long enough does, and is light again. No lock, no
 * owner: a process stopped anywhere leaves a level and a flag that the
 * container's other processes move on from. */
int vgpu_pacer_may_start(const struct vgpu_pacer *p, uint32_t *gate, int64_t tok, uint64_t now, int64_t *wait_ns)
{
    int64_t pos, reopen;

    if (p->bp >= VGPU_SHARE_FULL)
        return 1; /* the whole GPU: nothing to wait for (launches are still measured) */
    if (!p->period_ns || !gate) {
        *wait_ns = -tok * VGPU_SHARE_FULL / p->bp;
        return tok >= 0;
    }
    if (__atomic_load_n(gate, __ATOMIC_ACQUIRE)) {
        if (tok >= p->allot_ns) {
            __atomic_store_n(gate, 0, __ATOMIC_RELEASE);
            return 1;
        }
    } else if (tok >= p->busy_below_ns) {
        return 1;
    } else {
        __atomic_store_n(gate, 1, __ATOMIC_RELEASE);
    }
    reopen = (p->allot_ns - tok) * VGPU_SHARE_FULL / p->bp;
    if (p->phase_ns < 0) {
        *wait_ns = reopen;
        return 0;
    }
    pos = slot_pos(p, now);
    if (pos < p->slot_ns) {
        if (tok >= 0)
            return 1;
        /* spent: until it refills to 0 if that falls in the slot, else the next slot */
        *wait_ns = -tok * VGPU_SHARE_FULL / p->bp;
        if (*wait_ns >= p->slot_ns - pos)
            *wait_ns = p->period_ns - pos;
    } else {
        *wait_ns = p->period_ns - pos;
    }
    if (reopen < *wait_ns)
        *wait_ns = reopen;
    return 0;
}

/* The queue's end as believed at now: not before now, not beyond a period
 * ahead (a launch longer than the period leaves such a value; the bucket
 * still bounds the share). */
static int64_t queue_end(const struct vgpu_pacer *p, int64_t queued_until, uint64_t now)
{
    return queued_until < (int64_t)now || queued_until - (int64_t)now > p->period_ns ? (int64_t)now : queued_until;
}

int vgpu_pacer_slot_fits(const struct vgpu_pacer *p, const uint32_t *gate, struct vgpu_compute_shared *c,
                         int64_t queued_until, uint64_t now, int64_t *wait_ns)
{
    int64_t pos, end, q;

    if (!p->period_ns || p->phase_ns < 0 || !gate || p->bp >= VGPU_SHARE_FULL ||
        !__atomic_load_n(gate, __ATOMIC_ACQUIRE))
        return 1;
    pos = slot_pos(p, now);
    if (pos >= p->slot_ns) { /* may_start lets none start here; say so all the same */
        *wait_ns = p->period_ns - pos;
        return 0;
    }
    end = (int64_t)now + (p->slot_ns - pos);
    q = queue_end(p, queued_until, now);
    if (q < end)
        return 1;
    /* what is left of the slot is committed: tokens still held were for it */
    if (c)
        add_clamped(&c->tokens, 0, 0);
    *wait_ns = p->period_ns - pos;
    return 0;
}

void vgpu_pacer_queued(const struct vgpu_pacer *p, int64_t *queued_until, int64_t est, uint64_t now)
{
    int64_t o = __atomic_load_n(queued_until, __ATOMIC_RELAXED), n;

    if (!p->period_ns || p->phase_ns < 0)
        return;
    if (est < 0)
        est = 0;
    if (est > VGPU_PACER_CHARGE_MAX)
        est = VGPU_PACER_CHARGE_MAX;
    do
        n = queue_end(p, o, now) + est;
    while (!__atomic_compare_exchange_n(queued_until, &o, n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

int64_t vgpu_pacer_sleep_ns(int64_t w)
{
    return w < VGPU_PACER_SLEEP_MIN_NS   ? VGPU_PACER_SLEEP_MIN_NS
           : w > VGPU_PACER_SLEEP_MAX_NS ? VGPU_PACER_SLEEP_MAX_NS
                                         : w;
}

int vgpu_estimate_ready(struct vgpu_estimate *e, const struct vgpu_compute_shared *c, uint64_t now,
                        uint64_t *cold_since)
{
    uint64_t busy, n;

    if (__atomic_load_n(&e->known, __ATOMIC_ACQUIRE))
        return 1;
    if (c && (n = __atomic_load_n(&c->launches, __ATOMIC_RELAXED)) > 0) {
        busy = __atomic_load_n(&c->busy_ns, __ATOMIC_RELAXED);
        e->est_ns = (int64_t)(busy / n > (uint64_t)VGPU_PACER_CHARGE_MAX ? (uint64_t)VGPU_PACER_CHARGE_MAX : busy / n);
        __atomic_store_n(&e->known, 1, __ATOMIC_RELEASE);
        return 1;
    }
    if (e->pending == 0)
        return 1;
    if (*cold_since && now - *cold_since >= VGPU_PACER_COLD_NS) {
        e->est_ns = (int64_t)VGPU_PACER_COLD_NS;
        __atomic_store_n(&e->known, 1, __ATOMIC_RELEASE);
        return 1;
    }
    if (!*cold_since)
        *cold_since = now;
    return 0;
}

void vgpu_estimate_learn(struct vgpu_estimate *e, int64_t charged, int64_t span)
{
    /* atomic: launches read it without the measurement lock (vgpu_measure_estimate) */
    __atomic_store_n(&e->est_ns, e->known ? e->est_ns + (charged - e->est_ns) / 4 : charged, __ATOMIC_RELAXED);
    e->span_ns = e->span_ns ? e->span_ns + (span - e->span_ns) / 4 : span;
    __atomic_store_n(&e->known, 1, __ATOMIC_RELEASE);
}

int vgpu_estimate_sampled(struct vgpu_estimate *e, uint64_t *rng)
{
    uint64_t x = *rng;

    if (!e->known || !e->span_ns) {
        e->unmeasured_ns = 0;
        return 1;
    }
    e->unmeasured_ns += e->span_ns < VGPU_PACER_SAMPLE_DEVICE_NS ? e->span_ns : VGPU_PACER_SAMPLE_DEVICE_NS;
    if (e->unmeasured_ns >= VGPU_PACER_SAMPLE_DEVICE_NS) {
        e->unmeasured_ns = 0;
        return 1;
    }
    x ^= x << 13; /* xorshift64 */
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    if ((x * 0x2545f4914f6cdd1dull) >> 32 & (VGPU_PACER_SAMPLE_EVERY - 1)) /* xorshift64*: high bits */
        return 0;
    e->unmeasured_ns = 0;
    return 1;
}

void vgpu_captures_begun(int *open) { __atomic_add_fetch(open, 1, __ATOMIC_ACQ_REL); }

void vgpu_captures_ended(int *open)
{
    int n = __atomic_load_n(open, __ATOMIC_RELAXED);

    while (n > 0 && !__atomic_compare_exchange_n(open, &n, n - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    }
}

int vgpu_captures_open(const int *open) { return __atomic_load_n(open, __ATOMIC_ACQUIRE) > 0; }

uint64_t vgpu_share_pick(uint64_t stamp, uint64_t arbitration, uint64_t admission, uint64_t fallback, uint64_t now)
{
    uint64_t stale = (uint64_t)VGPU_SHARE_STALE_MS * 1000000ull;

    /* the arbitration's, while it is recent (a stamp ahead of now by more
     * than a period is not the host's clock: not believed) */
    if (stamp && arbitration && (uint32_t)arbitration && now + stale >= stamp && now - stamp < stale)
        return arbitration;
    if (admission && (uint32_t)admission)
        return admission;
    return fallback;
}
