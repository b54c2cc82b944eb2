/* The pacer (src/pacer.c) on an injected clock with synthetic spans: exact
 * expectations, no driver, no real time. Built by cudahook.mk with pacer.c
 * alone; run by TestPacer (pacer_test.go). Exit status 0 = every check held. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "borrow.h"
#include "order.h"
#include "pacer.h"

#define MS 1000000LL
#define T0 (1000000LL * MS) /* a clock value far from 0, as CLOCK_MONOTONIC is */

static int failed, checks;

#define EQ(got, want)                                                                                                  \
    do {                                                                                                               \
        long long g_ = (long long)(got), w_ = (long long)(want);                                                       \
        checks++;                                                                                                      \
        if (g_ != w_) {                                                                                                \
            failed++;                                                                                                  \
            printf("FAIL %s:%d: %s = %lld, want %lld\n", __func__, __LINE__, #got, g_, w_);                            \
        }                                                                                                              \
    } while (0)

static void test_init(void)
{
    struct vgpu_pacer p;

    vgpu_pacer_init(&p, 30, 500, -1); /* free-running gate */
    EQ(p.pct, 30);
    EQ(p.period_ns, 500 * MS);
    EQ(p.allot_ns, 150 * MS);
    EQ(p.phase_ns, -1);
    EQ(p.cap_ns, 300 * MS);           /* two allotments: a late wake-up loses nothing */
    EQ(p.busy_below_ns, 0);           /* no slot: the gate closes when the bucket runs dry */
    vgpu_pacer_init(&p, 30, 500, 20); /* a slot */
    EQ(p.phase_ns, 100 * MS);
    EQ(p.slot_ns, 150 * MS);
    EQ(p.cap_ns, 150 * MS);
    vgpu_pacer_init(&p, 30, 0, 20); /* no period: launch by launch, no slot */
    EQ(p.period_ns, 0);
    EQ(p.phase_ns, -1);
    EQ(p.allot_ns, 30 * MS);
    EQ(p.cap_ns, 30 * MS);
    vgpu_pacer_init(&p, 0, 500, -1);
    EQ(p.pct, 1); /* at least 1 % */
}

static void test_refill_bucket(void)
{
    struct vgpu_pacer p;
    struct vgpu_compute_shared c;

    memset(&c, 0, sizeof c);
    vgpu_pacer_init(&p, 30, 500, -1);
    EQ(vgpu_pacer_refill(&p, &c, T0), 150 * MS); /* first use: the clock starts, with one allotment */
    EQ(c.refill_ns, T0);
    EQ(vgpu_pacer_refill(&p, &c, T0), 150 * MS);           /* once */
    EQ(vgpu_pacer_refill(&p, &c, T0 + 10 * MS), 153 * MS); /* 30 % of 10 ms */
    /* a second process refilling at the same instant adds nothing: the
     * interval belongs to whoever moved the stamp */
    EQ(vgpu_pacer_refill(&p, &c, T0 + 10 * MS), 153 * MS);
    EQ(vgpu_pacer_refill(&p, &c, T0 + 5 * MS), 153 * MS);      /* an older clock value: nothing */
    EQ(vgpu_pacer_refill(&p, &c, T0 + 100000 * MS), 300 * MS); /* capped */
    /* a stamp from before a reboot (far ahead of now): the clock restarts, nothing added */
    c.tokens = 0;
    c.refill_ns = T0 + 5000 * MS;
    EQ(vgpu_pacer_refill(&p, &c, T0), 0);
    EQ(c.refill_ns, T0);
    /* the region is the container's to scribble on: what it holds is clamped */
    c.tokens = INT64_MAX;
    EQ(vgpu_pacer_refill(&p, &c, T0 + 1 * MS), 300 * MS);
    c.tokens = INT64_MIN;
    EQ(vgpu_pacer_refill(&p, &c, T0 + 1 * MS), VGPU_PACER_TOKENS_MIN);
}

static void test_charge_account(void)
{
    struct vgpu_pacer p;
    struct vgpu_compute_shared c;

    memset(&c, 0, sizeof c);
    vgpu_pacer_init(&p, 50, 100, -1);
    vgpu_pacer_charge(&p, &c, 7 * MS);
    EQ(c.tokens, -7 * MS);
    vgpu_pacer_charge(&p, &c, -1000 * MS); /* a refund never passes the cap */
    EQ(c.tokens, 100 * MS);
    vgpu_pacer_charge(&p, &c, VGPU_PACER_CHARGE_MAX);
    vgpu_pacer_charge(&p, &c, VGPU_PACER_CHARGE_MAX);
    EQ(c.tokens, VGPU_PACER_TOKENS_MIN); /* debt is bounded */
    vgpu_pacer_account(&c, 3 * MS);
    vgpu_pacer_account(&c, -1); /* a negative measurement counts a launch of 0 */
    EQ(c.busy_ns, 3 * MS);
    EQ(c.launches, 2);
    c.busy_ns = UINT64_MAX - 1;
    vgpu_pacer_account(&c, 5);
    EQ(c.busy_ns == UINT64_MAX, 1); /* saturates, never wraps */
}

static void test_no_period(void)
{
    struct vgpu_pacer p;
    int64_t w = 0;

    vgpu_pacer_init(&p, 25, 0, -1);
    EQ(vgpu_pacer_may_start(&p, NULL, 0, T0, &w), 1);
    EQ(vgpu_pacer_may_start(&p, NULL, -2 * MS, T0, &w), 0);
    EQ(w, 8 * MS); /* 2 ms of debt refill in 8 ms at 25 % */
}

static void test_gate(void)
{
    struct vgpu_pacer p;
    uint32_t gate = 0;
    int64_t w = 0;

    vgpu_pacer_init(&p, 50, 100, -1); /* allotment 50 ms */
    EQ(vgpu_pacer_may_start(&p, &gate, 0, T0, &w), 1);
    EQ(vgpu_pacer_may_start(&p, &gate, -10 * MS, T0, &w), 0); /* negative: the gate closes */
    EQ(gate, 1);
    EQ(w, 120 * MS);                                         /* until 50 ms are back: 60 ms of tokens at 50 % */
    EQ(vgpu_pacer_may_start(&p, &gate, 49 * MS, T0, &w), 0); /* closed until a whole allotment */
    EQ(w, 2 * MS);
    EQ(vgpu_pacer_may_start(&p, &gate, 50 * MS, T0, &w), 1);
    EQ(gate, 0);
    EQ(vgpu_pacer_may_start(&p, &gate, 1, T0, &w), 1); /* open: runs down to 0 */
    EQ(vgpu_pacer_sleep_ns(1), VGPU_PACER_SLEEP_MIN_NS);
    EQ(vgpu_pacer_sleep_ns(120 * MS), VGPU_PACER_SLEEP_MAX_NS);
    EQ(vgpu_pacer_sleep_ns(3 * MS), 3 * MS);
}

static void test_slot(void)
{
    struct vgpu_pacer p;
    struct vgpu_compute_shared c;
    uint32_t gate = 0;
    int64_t w = 0, tok;
    uint64_t base = (uint64_t)T0; /* a multiple of the period */

    memset(&c, 0, sizeof c);
    vgpu_pacer_init(&p, 30, 100, 20);             /* slot [20, 50) ms of every 100 ms */
    EQ(vgpu_pacer_refill(&p, &c, base), 30 * MS); /* the clock starts, with one allotment */
    EQ(p.busy_below_ns, 24 * MS);                 /* a burst: a fifth of the allotment */
    vgpu_pacer_charge(&p, &c, 9 * MS);
    tok = vgpu_pacer_refill(&p, &c, base + 10 * MS);
    EQ(tok, 24 * MS); /* continuous refill, as without a slot */
    /* light (gate open): starts at once, outside its slot */
    EQ(vgpu_pacer_may_start(&p, &gate, tok, base + 10 * MS, &w), 1);
    /* spent more than a burst: busy, waits for its slot */
    EQ(vgpu_pacer_may_start(&p, &gate, tok - 1, base + 10 * MS, &w), 0);
    EQ(gate, 1);
    EQ(w, 10 * MS);
    gate = 0;
    EQ(vgpu_pacer_refill(&p, &c, base + 1000 * MS), 30 * MS); /* saves at most one allotment */
    vgpu_pacer_charge(&p, &c, 31 * MS);
    tok = vgpu_pacer_refill(&p, &c, base + 1000 * MS);
    /* ran dry: busy, the gate closes; outside the slot it waits for the slot */
    EQ(vgpu_pacer_may_start(&p, &gate, tok, base + 1000 * MS, &w), 0);
    EQ(gate, 1);
    EQ(w, 20 * MS);
    /* busy, in its slot, with tokens: starts */
    EQ(vgpu_pacer_may_start(&p, &gate, 5 * MS, base + 1025 * MS, &w), 1);
    /* busy, out of the slot, with tokens but less than an allotment: waits */
    EQ(vgpu_pacer_may_start(&p, &gate, 29 * MS, base + 1050 * MS, &w), 0);
    EQ(w, 10 * MS / 3); /* the gate reopens first: 1 ms of tokens at 30 % */
    EQ(vgpu_pacer_may_start(&p, &gate, 5 * MS, base + 1060 * MS, &w), 0);
    EQ(w, 60 * MS); /* the next slot comes first */
    /* in the slot, spent: until 0 if that falls in the slot, else the next slot */
    EQ(vgpu_pacer_may_start(&p, &gate, -3 * MS, base + 1020 * MS, &w), 0);
    EQ(w, 10 * MS);
    EQ(vgpu_pacer_may_start(&p, &gate, -9 * MS, base + 1040 * MS, &w), 0);
    EQ(w, 80 * MS);
    /* a whole allotment again: light, anywhere */
    EQ(vgpu_pacer_may_start(&p, &gate, 30 * MS, base + 1070 * MS, &w), 1);
    EQ(gate, 0);
}

/* A busy container's launch must start in its slot, behind its queue: slot
 * [20, 50) ms of 100. */
static void test_slot_fits(void)
{
    struct vgpu_pacer p;
    struct vgpu_compute_shared c;
    uint32_t closed = 1, open = 0;
    int64_t w = 0, q = 0;
    uint64_t base = (uint64_t)T0;

    vgpu_pacer_init(&p, 30, 100, 20);
    EQ(vgpu_pacer_slot_fits(&p, &closed, NULL, 0, base + 20 * MS, &w), 1);                       /* nothing queued */
    EQ(vgpu_pacer_slot_fits(&p, &closed, NULL, (int64_t)base + 49 * MS, base + 20 * MS, &w), 1); /* starts at 49 */
    EQ(vgpu_pacer_slot_fits(&p, &closed, NULL, (int64_t)base + 50 * MS, base + 20 * MS, &w), 0); /* at 50 */
    EQ(w, 100 * MS);                                                                             /* the next slot */
    EQ(vgpu_pacer_slot_fits(&p, &closed, NULL, 0, base + 49 * MS, &w), 1); /* late, but in the slot */
    EQ(vgpu_pacer_slot_fits(&p, &closed, NULL, 0, base + 50 * MS, &w), 0); /* after it */
    EQ(w, 70 * MS);
    EQ(vgpu_pacer_slot_fits(&p, &open, NULL, (int64_t)base + 90 * MS, base + 49 * MS, &w), 1); /* light: at once */
    EQ(vgpu_pacer_slot_fits(&p, NULL, NULL, (int64_t)base + 90 * MS, base + 49 * MS, &w), 1);
    /* a queue end more than a period ahead is not believed */
    EQ(vgpu_pacer_slot_fits(&p, &closed, NULL, (int64_t)base + 200 * MS, base + 20 * MS, &w), 1);
    /* a refusal leaves the bucket nothing above 0; a debt stays */
    memset(&c, 0, sizeof c);
    c.tokens = 5 * MS;
    EQ(vgpu_pacer_slot_fits(&p, &closed, &c, (int64_t)base + 60 * MS, base + 40 * MS, &w), 0);
    EQ(c.tokens, 0);
    c.tokens = -3 * MS;
    EQ(vgpu_pacer_slot_fits(&p, &closed, &c, (int64_t)base + 60 * MS, base + 40 * MS, &w), 0);
    EQ(c.tokens, -3 * MS);
    c.tokens = 5 * MS;
    EQ(vgpu_pacer_slot_fits(&p, &closed, &c, 0, base + 40 * MS, &w), 1);
    EQ(c.tokens, 5 * MS);
    /* the queue: from now when drained, else from its end */
    vgpu_pacer_queued(&p, &q, 2 * MS, base + 20 * MS);
    EQ(q, (int64_t)base + 22 * MS);
    vgpu_pacer_queued(&p, &q, 3 * MS, base + 21 * MS);
    EQ(q, (int64_t)base + 25 * MS);
    vgpu_pacer_queued(&p, &q, 1 * MS, base + 30 * MS);
    EQ(q, (int64_t)base + 31 * MS);
    q = INT64_MAX; /* scribbled */
    vgpu_pacer_queued(&p, &q, 1 * MS, base + 30 * MS);
    EQ(q, (int64_t)base + 31 * MS);
    vgpu_pacer_init(&p, 30, 100, -1); /* no slot: no queue kept, everything fits */
    q = 0;
    vgpu_pacer_queued(&p, &q, 1 * MS, base);
    EQ(q, 0);
    EQ(vgpu_pacer_slot_fits(&p, &closed, NULL, (int64_t)base + 90 * MS, base, &w), 1);
}

/* A simulated GPU shared by tenants (containers): each has a pacer, a bucket
 * and a gate, and one or two processes. The device runs the launches queued
 * by all tenants one after another in the order they started (the simulator's
 * own timeline: what each tenant got is counted there, not from the pacer).
 * A busy process keeps `depth` launches of `len` queued whenever its pacer
 * lets it; a light one sends a request (`req` launches of `len`) every
 * `every` ns and records how long the pacer held it and when it finished.
 *
 * As the library does, a launch is charged its estimate (len) at its start
 * and, with `measured`, settled at its end to its span between events: from
 * when its process's previous launch ended (or it was launched, if later) to
 * its own end, so time another tenant ran in between is charged to it, as
 * the events of a stream on a time-sliced GPU see it. `nofit` leaves out the
 * slot check (vgpu_pacer_slot_fits), to show what it is for. */
#define SIM_TENANTS 3
#define SIM_Q       4096
#define SIM_TICK    50000LL /* the processes ask every 50 us */

struct sim_tenant {
    struct vgpu_pacer p[2];
    struct vgpu_compute_shared c;
    uint32_t gate;
    int procs, paced, measured, nofit;
    int64_t queued_until, stream_end[2];
    int64_t busy_from, busy_to; /* busy in [from, to); light (if every) otherwise */
    int64_t len, every;
    int req, depth;
    /* results */
    int64_t got;                    /* device time in the measured window */
    int64_t astray;                 /* of it, busy launches run outside the tenant's slot */
    int64_t next_req, req_at, held; /* the request in flight: sent at, held by the pacer */
    int req_left, queued;
    int64_t held_max, lat_max, lat_sum, reqs, held_reqs;
};

struct sim_launch {
    int t, k;
    int64_t len, at, req_at; /* at: launched; req_at >= 0: the last launch of a request */
    int busy;
};

/* The part of [a, b) outside p's slot. */
static int64_t outside_slot(const struct vgpu_pacer *p, int64_t a, int64_t b)
{
    int64_t n = 0;

    if (p->phase_ns < 0)
        return 0;
    for (int64_t u = a; u < b; u += 10000) /* 10 us steps */
        if ((int64_t)(((uint64_t)(T0 + u) + (uint64_t)(p->period_ns - p->phase_ns)) % (uint64_t)p->period_ns) >=
            p->slot_ns)
            n += (b - u < 10000 ? b - u : 10000);
    return n;
}

static void sim_run(struct sim_tenant *ts, int n, int64_t horizon, int64_t from, int64_t to)
{
    static struct sim_launch q[SIM_Q];
    int head = 0, tail = 0;
    int64_t run_end = 0, w, tok;

    for (int i = 0; i < n; i++)
        ts[i].next_req = ts[i].every ? ts[i].every / 2 : -1;
    for (int64_t t = 0; t < horizon; t += SIM_TICK) {
        /* the device: runs the queue up to t */
        while (head != tail && run_end <= t) {
            struct sim_launch *l = &q[head];
            int64_t s0 = run_end, e0 = run_end + l->len, a = s0 > from ? s0 : from, b = e0 < to ? e0 : to;
            struct sim_tenant *x = &ts[l->t];
            if (b > a) {
                x->got += b - a;
                if (l->busy)
                    x->astray += outside_slot(&x->p[0], a, b);
            }
            if (x->measured && x->paced) {
                int64_t from_ev = l->at > x->stream_end[l->k] ? l->at : x->stream_end[l->k];
                vgpu_pacer_charge(&x->p[l->k], &x->c, (e0 - from_ev) - l->len);
            }
            x->stream_end[l->k] = e0;
            run_end = e0;
            ts[l->t].queued--;
            if (l->req_at >= 0) {
                int64_t lat = e0 - l->req_at;
                ts[l->t].lat_max = lat > ts[l->t].lat_max ? lat : ts[l->t].lat_max;
                ts[l->t].lat_sum += lat;
                ts[l->t].reqs++;
            }
            head = (head + 1) % SIM_Q;
        }
        if (head == tail && run_end < t)
            run_end = t;
        for (int i = 0; i < n; i++) {
            struct sim_tenant *x = &ts[i];
            int busy = t >= x->busy_from && t < x->busy_to;
            while (busy && x->next_req >= 0 && x->next_req <= t)
                x->next_req += x->every; /* no requests while it is busy */
            for (int k = 0; k < x->procs; k++) {
                struct vgpu_pacer *p = &x->p[k];
                uint64_t now = (uint64_t)(T0 + t);
                /* busy: one launch a tick while its queue has room; light: a
                 * request's launches back to back while the pacer lets them */
                for (;;) {
                    int64_t req_at = -1;
                    if (busy) {
                        if (x->queued >= x->depth * x->procs)
                            break;
                    } else {
                        if (x->req_left == 0 && x->next_req >= 0 && t >= x->next_req) {
                            x->req_left = x->req;
                            x->req_at = x->next_req;
                            x->next_req += x->every;
                        }
                        if (x->req_left == 0)
                            break;
                    }
                    if (x->paced) {
                        tok = vgpu_pacer_refill(p, &x->c, now);
                        if (!vgpu_pacer_may_start(p, &x->gate, tok, now, &w))
                            break;
                        if (!x->nofit && !vgpu_pacer_slot_fits(p, &x->gate, &x->c, x->queued_until, now, &w))
                            break;
                        vgpu_pacer_queued(p, &x->queued_until, x->len, now);
                        vgpu_pacer_charge(p, &x->c, x->len);
                    }
                    if (!busy) {
                        int64_t held = t - x->req_at;
                        if (held > x->held_max)
                            x->held_max = held;
                        if (held > 0 && x->req_left == x->req)
                            x->held_reqs++;
                        if (--x->req_left == 0)
                            req_at = x->req_at;
                    }
                    q[tail] = (struct sim_launch){i, k, x->len, t, req_at, busy};
                    tail = (tail + 1) % SIM_Q;
                    x->queued++;
                    if (busy)
                        break;
                }
            }
        }
    }
}

static void sim_tenant(struct sim_tenant *x, int pct, int period_ms, int phase, int procs)
{
    memset(x, 0, sizeof *x);
    x->procs = procs;
    x->paced = pct < 100;
    for (int k = 0; k < 2; k++)
        vgpu_pacer_init(&x->p[k], pct, period_ms, phase);
    x->len = 1 * MS;
    x->depth = 2;
    x->busy_to = INT64_MAX; /* busy throughout */
}

/* A tenant paced by a grant in basis points (the arbitration's). */
static void sim_tenant_bp(struct sim_tenant *x, int bp, int period_ms, int phase_bp)
{
    sim_tenant(x, 50, period_ms, -1, 1);
    x->paced = 1;
    for (int k = 0; k < 2; k++)
        vgpu_pacer_init_bp(&x->p[k], bp, period_ms, phase_bp);
}

static void sim_light(struct sim_tenant *x)
{
    x->busy_from = x->busy_to = 0;
    x->len = MS / 4; /* two launches of 0.25 ms every 20 ms: 2.5 % */
    x->req = 2;
    x->every = 20 * MS;
}

#define PCT_OF(got, window) ((got)*1000 / (window)) /* permille */

/* A light tenant is never held by its pacer, alone or beside a busy one; its
 * worst latency beside a busy tenant is no worse than beside the same tenant
 * unlimited (native); the busy one keeps its share. */
static void test_light(void)
{
    struct sim_tenant ts[2];
    const int64_t H = 10000 * MS, from = 1000 * MS;
    int64_t native_lat;

    sim_tenant(&ts[0], 30, 100, 0, 1);
    sim_light(&ts[0]);
    sim_run(ts, 1, H, from, H);
    EQ(ts[0].reqs >= 495, 1);
    EQ(ts[0].held_max, 0);
    EQ(ts[0].lat_max, MS / 2);

    sim_tenant(&ts[0], 30, 500, 0, 1); /* the default period: the same */
    sim_light(&ts[0]);
    sim_run(ts, 1, H, from, H);
    EQ(ts[0].held_max, 0);

    /* beside a busy tenant, both unlimited: the native figure */
    sim_tenant(&ts[0], 100, 100, 0, 1);
    sim_light(&ts[0]);
    sim_tenant(&ts[1], 100, 100, 30, 1);
    sim_run(ts, 2, H, from, H);
    native_lat = ts[0].lat_max;
    /* limited: light at 30 in slot 0-30, busy at 70 in slot 30-100 */
    sim_tenant(&ts[0], 30, 100, 0, 1);
    sim_light(&ts[0]);
    sim_tenant(&ts[1], 70, 100, 30, 1);
    sim_run(ts, 2, H, from, H);
    EQ(ts[0].held_max, 0);
    EQ(ts[0].lat_max <= native_lat, 1);
    EQ(PCT_OF(ts[1].got, H - from) >= 670, 1); /* 70 % within 3 points */
    EQ(PCT_OF(ts[1].got, H - from) <= 730, 1);
}

/* Busy tenants get their shares on the device's timeline, within 3 points;
 * 30 + 70 lose nothing (>= 95 % of the device); a single busy tenant at
 * 25 / 50 / 75 is capped there, alone on the GPU. */
static void test_busy(void)
{
    struct sim_tenant ts[2];
    const int64_t H = 10000 * MS, from = 1000 * MS;
    static const int single[] = {25, 50, 75};

    for (int period = 100; period <= 500; period += 400) {
        sim_tenant(&ts[0], 30, period, 0, 1);
        sim_tenant(&ts[1], 70, period, 30, 1);
        sim_run(ts, 2, H, from, H);
        EQ(PCT_OF(ts[0].got, H - from) >= 270 && PCT_OF(ts[0].got, H - from) <= 330, 1);
        EQ(PCT_OF(ts[1].got, H - from) >= 670 && PCT_OF(ts[1].got, H - from) <= 730, 1);
        EQ(PCT_OF(ts[0].got + ts[1].got, H - from) >= 950, 1);
    }
    for (int i = 0; i < 3; i++) {
        sim_tenant(&ts[0], single[i], 500, 0, 1);
        sim_run(ts, 1, H, from, H);
        EQ(PCT_OF(ts[0].got, H - from) >= single[i] * 10 - 30, 1);
        EQ(PCT_OF(ts[0].got, H - from) <= single[i] * 10 + 30, 1);
    }
}

/* Busy tenants whose launches are charged their measured spans (as on the
 * GPU), each keeping ten 1.7 ms launches queued (as bench/gpu/tenant.py busy
 * does), both starting with a full bucket: each gets its share within 3
 * points, and under 2 % of the device runs a busy tenant outside its slot
 * (a burst at the start). Without the slot check, a tenant's surplus runs on
 * into the other's slot, which is then charged that time too. */
static void test_measured_pair(void)
{
    struct sim_tenant ts[2];
    const int64_t H = 10000 * MS;

    for (int nofit = 1; nofit >= 0; nofit--) {
        for (int i = 0; i < 2; i++) {
            sim_tenant(&ts[i], i ? 70 : 30, 500, i ? 30 : 0, 1);
            ts[i].len = 17 * MS / 10;
            ts[i].depth = 10;
            ts[i].measured = 1;
            ts[i].nofit = nofit;
        }
        sim_run(ts, 2, H, 0, H);
        if (nofit) {
            EQ(ts[0].astray + ts[1].astray > H / 50, 1);
            continue;
        }
        EQ(PCT_OF(ts[0].got, H) >= 270 && PCT_OF(ts[0].got, H) <= 330, 1);
        EQ(PCT_OF(ts[1].got, H) >= 670 && PCT_OF(ts[1].got, H) <= 730, 1);
        EQ(PCT_OF(ts[0].got + ts[1].got, H) >= 950, 1);
        EQ(ts[0].astray + ts[1].astray <= H / 50, 1);
    }
}

/* Contention starts and ends: tenant 0 is light, busy from 3 s to 6 s, light
 * again. While both are busy they split 30 : 70; once it is light again (one
 * period to save an allotment) its requests are never held. */
static void test_contention(void)
{
    struct sim_tenant ts[2];
    const int64_t H = 10000 * MS;

    sim_tenant(&ts[0], 30, 100, 0, 1);
    sim_light(&ts[0]);
    ts[0].len = MS / 4;
    ts[0].busy_from = 3000 * MS;
    ts[0].busy_to = 6000 * MS;
    sim_tenant(&ts[1], 70, 100, 30, 1);
    sim_run(ts, 2, 6000 * MS, 3500 * MS, 6000 * MS);
    EQ(PCT_OF(ts[0].got, 2500 * MS) >= 270 && PCT_OF(ts[0].got, 2500 * MS) <= 330, 1);
    EQ(PCT_OF(ts[1].got, 2500 * MS) >= 670 && PCT_OF(ts[1].got, 2500 * MS) <= 730, 1);
    EQ(ts[0].held_max, 0); /* the light part before 3 s */
    /* after: measured from 6.2 s, requests are held no more */
    sim_tenant(&ts[0], 30, 100, 0, 1);
    sim_light(&ts[0]);
    ts[0].busy_from = 3000 * MS;
    ts[0].busy_to = 6000 * MS;
    sim_tenant(&ts[1], 70, 100, 30, 1);
    sim_run(ts, 2, H, 6200 * MS, H);
    EQ(ts[0].held_reqs <= 6, 1); /* at most the requests of the first ~100 ms after 6 s */
    EQ(PCT_OF(ts[1].got, H - 6200 * MS) >= 670, 1);
}

/* Two processes of one container pool one bucket and one gate: busy, they
 * get the container's share together; light, neither is held. */
static void test_pooled_slots(void)
{
    struct sim_tenant ts[2];
    const int64_t H = 10000 * MS, from = 1000 * MS;

    sim_tenant(&ts[0], 30, 100, 0, 2);
    sim_tenant(&ts[1], 70, 100, 30, 1);
    sim_run(ts, 2, H, from, H);
    EQ(PCT_OF(ts[0].got, H - from) >= 270 && PCT_OF(ts[0].got, H - from) <= 330, 1);
    EQ(PCT_OF(ts[1].got, H - from) >= 670 && PCT_OF(ts[1].got, H - from) <= 730, 1);
    sim_tenant(&ts[0], 30, 100, 0, 2);
    sim_light(&ts[0]); /* two light processes: 5 % together */
    sim_run(ts, 1, H, from, H);
    EQ(ts[0].held_max, 0);
}

/* A process that reserved device time (charged a launch at its start) and
 * stopped before the launch was measured, having closed the gate: nothing is
 * held for it. The container's other process starts again once the bucket
 * has refilled past the charge in its slot, and then gets its share. */
static void test_stopped_holder(void)
{
    struct vgpu_pacer a, b;
    struct vgpu_compute_shared c;
    uint32_t gate = 0;
    int64_t w, tok, t, first = -1, got = 0;
    uint64_t base = (uint64_t)T0;

    memset(&c, 0, sizeof c);
    vgpu_pacer_init(&a, 30, 100, 0);
    vgpu_pacer_init(&b, 30, 100, 0);
    vgpu_pacer_refill(&a, &c, base);
    vgpu_pacer_charge(&a, &c, 2000 * MS); /* the estimate of a 2 s launch, never settled */
    tok = vgpu_pacer_refill(&a, &c, base);
    EQ(vgpu_pacer_may_start(&a, &gate, tok, base, &w), 0); /* closes the gate; a stops here */
    EQ(gate, 1);
    for (t = 0; t < 20000 * MS; t += MS) { /* b, busy: 1 ms launches run back to back */
        tok = vgpu_pacer_refill(&b, &c, base + (uint64_t)t);
        if (!vgpu_pacer_may_start(&b, &gate, tok, base + (uint64_t)t, &w))
            continue;
        if (first < 0)
            first = t;
        vgpu_pacer_charge(&b, &c, MS);
        if (t >= 10000 * MS)
            got += MS;
    }
    EQ(first >= 6600 * MS && first <= 6700 * MS, 1); /* 2 s of debt at 30 %, then its slot */
    EQ(got >= 2900 * MS && got <= 3100 * MS, 1);     /* then 30 % */
}

/* Two processes of one container, each with its own pacer, pool one bucket
 * and one gate: on a simulated clock, each starts a launch of `len` whenever
 * the pacer lets it (charged at start, as vgpu_measure_open does) and the
 * device runs launches one after another. Over any window the container gets
 * at most pct% of it plus the cap, and (busy throughout) at least pct% of it
 * less one allotment. */
static void run_pooled(int pct, int period_ms, int phase, int64_t len, int64_t *busy_out)
{
    struct vgpu_pacer a, b;
    struct vgpu_compute_shared c;
    uint32_t gate = 0;
    int64_t w, tok, busy = 0, dev_free_at = 0;
    const int64_t horizon = 10000 * MS;

    memset(&c, 0, sizeof c);
    vgpu_pacer_init(&a, pct, period_ms, phase);
    vgpu_pacer_init(&b, pct, period_ms, phase);
    for (int64_t t = 0; t < horizon; t += 100000) { /* every 0.1 ms, A then B asks */
        for (int k = 0; k < 2; k++) {
            struct vgpu_pacer *p = k ? &b : &a;
            uint64_t now = (uint64_t)(T0 + t);
            if (dev_free_at > t + len)
                continue; /* its stream is full: it waits for the device */
            tok = vgpu_pacer_refill(p, &c, now);
            if (!vgpu_pacer_may_start(p, p->period_ns ? &gate : NULL, tok, now, &w))
                continue;
            vgpu_pacer_charge(p, &c, len);
            dev_free_at = (dev_free_at > t ? dev_free_at : t) + len;
            busy += len;
        }
    }
    *busy_out = busy;
}

static void test_pooled(void)
{
    int64_t busy;
    struct vgpu_pacer p;
    const int64_t horizon = 10000 * MS;

    run_pooled(30, 500, -1, 2 * MS, &busy);
    vgpu_pacer_init(&p, 30, 500, -1);
    EQ(busy <= horizon * 30 / 100 + p.cap_ns, 1);
    EQ(busy >= horizon * 30 / 100 - p.allot_ns, 1);
    run_pooled(50, 0, -1, 1 * MS, &busy);
    vgpu_pacer_init(&p, 50, 0, -1);
    EQ(busy <= horizon / 2 + p.cap_ns + 1 * MS, 1);
    EQ(busy >= horizon / 2 - p.allot_ns - 1 * MS, 1);
    run_pooled(30, 100, 40, 1 * MS, &busy); /* a slot: 30 ms of every 100 */
    EQ(busy <= horizon * 30 / 100 + 30 * MS, 1);
    EQ(busy >= horizon * 30 / 100 - 30 * MS, 1);
}

static void test_estimate(void)
{
    struct vgpu_estimate e;
    struct vgpu_compute_shared c;
    uint64_t cold = 0;

    memset(&e, 0, sizeof e);
    memset(&c, 0, sizeof c);
    EQ(vgpu_estimate_ready(&e, &c, T0, &cold), 1); /* nothing in flight: this launch is measured first */
    EQ(e.known, 0);
    e.pending = 1; /* the first launch is in flight: the next waits for it */
    EQ(vgpu_estimate_ready(&e, &c, T0, &cold), 0);
    EQ(cold, T0);
    EQ(vgpu_estimate_ready(&e, &c, T0 + 1999 * MS, &cold), 0);
    EQ(vgpu_estimate_ready(&e, &c, T0 + 2000 * MS, &cold), 1); /* waited 2 s: counts as 2 s */
    EQ(e.est_ns, 2000 * MS);
    EQ(e.known, 1);

    memset(&e, 0, sizeof e);
    e.pending = 1;
    c.launches = 4;
    c.busy_ns = 8 * MS;
    cold = 0;
    EQ(vgpu_estimate_ready(&e, &c, T0, &cold), 1); /* the container's average stands in */
    EQ(e.est_ns, 2 * MS);

    memset(&e, 0, sizeof e);
    vgpu_estimate_learn(&e, 100, 400);
    EQ(e.est_ns, 100);
    EQ(e.span_ns, 400);
    vgpu_estimate_learn(&e, 200, 800); /* moving average, 1/4 of the news */
    EQ(e.est_ns, 125);
    EQ(e.span_ns, 500);
}

static void test_sampling(void)
{
    struct vgpu_estimate e;
    uint64_t rng = 0x9e3779b97f4a7c15ull, before;
    const char *want = "0000100000000000000000000000000010000000000100000000000000000000";
    char got[65];
    int n = 0;

    memset(&e, 0, sizeof e);
    before = rng;
    EQ(vgpu_estimate_sampled(&e, &rng), 1); /* nothing known: measured */
    EQ(rng == before, 1);                   /* and no draw */
    vgpu_estimate_learn(&e, 10000, VGPU_PACER_SAMPLE_DEVICE_NS);
    for (int i = 0; i < 8; i++)
        EQ(vgpu_estimate_sampled(&e, &rng), 1); /* spans of 1 ms: every one */
    /* spans of 250 us: at least every 4th, by device time, whatever the draws */
    e.span_ns = 250000;
    e.unmeasured_ns = 0;
    for (int i = 0, since = 0; i < 64; i++) {
        since = vgpu_estimate_sampled(&e, &rng) ? 0 : since + 1;
        if (since >= 4)
            EQ(since, 3);
    }
    e.unmeasured_ns = 0;
    rng = 0x9e3779b97f4a7c15ull;
    /* long estimate but a short span (the launch overlapped others): sampled by the span */
    e.est_ns = 10 * MS;
    e.span_ns = 20000;
    for (int i = 0; i < 64; i++)
        got[i] = vgpu_estimate_sampled(&e, &rng) ? '1' : '0';
    got[64] = 0;
    checks++;
    if (strcmp(got, want) != 0) {
        failed++;
        printf("FAIL %s: draws %s, want %s (xorshift64*, high bits)\n", __func__, got, want);
    }
    rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 32000; i++)
        n += vgpu_estimate_sampled(&e, &rng);
    EQ(n, 1317); /* 1 in 32 at random, and one whenever 50 spans of 20 us (1 ms) went unmeasured: about 1 in 25 */
}

static void test_captures(void)
{
    int open = 0;

    EQ(vgpu_captures_open(&open), 0);
    vgpu_captures_begun(&open);
    vgpu_captures_begun(&open);
    EQ(vgpu_captures_open(&open), 1);
    vgpu_captures_ended(&open);
    EQ(vgpu_captures_open(&open), 1);
    vgpu_captures_ended(&open);
    vgpu_captures_ended(&open); /* an end we did not see begin */
    EQ(open, 0);
    EQ(vgpu_captures_open(&open), 0);
}

/* Shares in basis points: the pacer built from a grant. */
static void test_init_bp(void)
{
    struct vgpu_pacer p;
    struct vgpu_compute_shared c;
    uint32_t gate = 1;
    int64_t w = -1;

    vgpu_pacer_init_bp(&p, 3750, 500, 3750);
    EQ(p.bp, 3750);
    EQ(p.pct, 37);
    EQ(p.allot_ns, 187500000LL);
    EQ(p.phase_ns, 187500000LL);
    EQ(p.slot_ns, 187500000LL);
    vgpu_pacer_init_bp(&p, 0, 500, 10000); /* at least 1 bp; a phase out of range: none */
    EQ(p.bp, 1);
    EQ(p.phase_ns, -1);
    /* the whole GPU: nothing waits, however deep the debt, wherever the clock */
    memset(&c, 0, sizeof c);
    vgpu_pacer_init_bp(&p, 10000, 500, 0);
    vgpu_pacer_refill(&p, &c, T0);
    vgpu_pacer_charge(&p, &c, 10000 * MS);
    EQ(vgpu_pacer_may_start(&p, &gate, vgpu_pacer_refill(&p, &c, T0 + MS), T0 + 400 * MS, &w), 1);
    EQ(vgpu_pacer_slot_fits(&p, &gate, &c, T0 + 900 * MS, T0 + MS, &w), 1);
}

/* Which grant holds: the arbitration's while fresh, else admission's, else
 * the quota file's. */
static void test_share_pick(void)
{
    const uint64_t now = (uint64_t)T0, live = 3750 | 3750ull << 32, stat = 3000 | 0ull << 32, quota = 3000;

    EQ(vgpu_share_pick(now - 100 * MS, live, stat, quota, now), live);
    EQ(vgpu_share_pick(now - 999 * MS, live, stat, quota, now), live);
    EQ(vgpu_share_pick(now - 1000 * MS, live, stat, quota, now), stat); /* vgpu node stopped: held to the request */
    EQ(vgpu_share_pick(0, live, stat, quota, now), stat);               /* never ran */
    EQ(vgpu_share_pick(now + 5000 * MS, live, stat, quota, now), stat); /* a stamp from another clock */
    EQ(vgpu_share_pick(now, 0, stat, quota, now), stat);                /* no live share for this device */
    EQ(vgpu_share_pick(now, live, 0, quota, now), live);
    EQ(vgpu_share_pick(0, 0, 0, quota, now), quota);
}

/* The memory a tenant may hold: its ceiling while the host's deadline holds,
 * clamped to [request, limit]; its request once the deadline passed or when
 * it is not the host's; the limit without a request below it. */
static void test_mem_cap_pick(void)
{
    const uint64_t now = (uint64_t)T0, G = 1ull << 30;

    EQ(vgpu_mem_cap_pick(now + 3000 * MS, 24 * G, 16 * G, 32 * G, now), 24 * G);
    EQ(vgpu_mem_cap_pick(now + 3000 * MS, 40 * G, 16 * G, 32 * G, now), 32 * G);  /* never above the limit */
    EQ(vgpu_mem_cap_pick(now + 3000 * MS, 1 * G, 16 * G, 32 * G, now), 16 * G);   /* never below the request */
    EQ(vgpu_mem_cap_pick(now, 24 * G, 16 * G, 32 * G, now), 16 * G);              /* vgpu node stopped */
    EQ(vgpu_mem_cap_pick(0, 24 * G, 16 * G, 32 * G, now), 16 * G);                /* never ran */
    EQ(vgpu_mem_cap_pick(now + 61000 * MS, 24 * G, 16 * G, 32 * G, now), 16 * G); /* not the host's clock */
    EQ(vgpu_mem_cap_pick(now + 3000 * MS, 24 * G, 0, 32 * G, now), 32 * G);       /* limit only */
    EQ(vgpu_mem_cap_pick(0, 0, 32 * G, 32 * G, now), 32 * G);                     /* request = limit */
}

/* An owner's allocation refused by the driver waits in steps for vgpu node
 * to take memory back, 2 s at most from its first refusal; a borrower, a
 * tenant without vgpu node, or one without a request below its limit fails
 * at once. */
static void test_room_wait_pick(void)
{
    const uint64_t now = (uint64_t)T0, G = 1ull << 30, until = now + 3000 * MS;

    EQ(vgpu_room_wait_pick(now, now, until, 0, 16 * G, 16 * G, 32 * G), VGPU_ROOM_STEP_NS);
    EQ(vgpu_room_wait_pick(now, now + 1990 * MS, until, 0, 8 * G, 16 * G, 32 * G), 10 * MS); /* the bound's rest */
    EQ(vgpu_room_wait_pick(now, now + 2000 * MS, until, 0, 8 * G, 16 * G, 32 * G), 0);       /* 2 s passed */
    EQ(vgpu_room_wait_pick(now, now, until, 0, 16 * G + 1, 16 * G, 32 * G), 0);              /* a borrower */
    EQ(vgpu_room_wait_pick(now, now, now, 0, 8 * G, 16 * G, 32 * G), 0);                     /* vgpu node stopped */
    EQ(vgpu_room_wait_pick(now, now, 0, 0, 8 * G, 16 * G, 32 * G), 0);                       /* never ran */
    EQ(vgpu_room_wait_pick(now, now, now + 61000 * MS, 0, 8 * G, 16 * G, 32 * G), 0);        /* not the host's clock */
    EQ(vgpu_room_wait_pick(now, now, until, 0, 8 * G, 0, 32 * G), 0);                        /* limit only */
    EQ(vgpu_room_wait_pick(now, now, until, 0, 8 * G, 32 * G, 32 * G), VGPU_ROOM_STEP_NS);   /* request = limit */
    EQ(vgpu_room_wait_pick(now, now, until, 0, 32 * G, 32 * G, 32 * G), VGPU_ROOM_STEP_NS);  /* up to the request */
    EQ(vgpu_room_wait_pick(now + 1, now, until, 0, 8 * G, 16 * G, 32 * G), 0);               /* clock went back */
    /* a suspension freeing the room runs until room_until: waited for past 2 s, never past it */
    const uint64_t room = now + 9000 * MS, fresh = now + 9500 * MS; /* vgpu node's rounds go on */
    EQ(vgpu_room_wait_pick(now, now + 2000 * MS, fresh, room, 8 * G, 16 * G, 32 * G), VGPU_ROOM_STEP_NS);
    EQ(vgpu_room_wait_pick(now, now + 8990 * MS, fresh, room, 8 * G, 16 * G, 32 * G), 10 * MS);
    EQ(vgpu_room_wait_pick(now, now + 9000 * MS, fresh, room, 8 * G, 16 * G, 32 * G), 0);
    EQ(vgpu_room_wait_pick(now, now + 1000 * MS, until, now + 500 * MS, 8 * G, 16 * G, 32 * G),
       VGPU_ROOM_STEP_NS); /* earlier: the 2 s */
    EQ(vgpu_room_wait_pick(now, now + 2000 * MS, fresh, now + 2000 * MS + VGPU_ROOM_MAX_NS + 1, 8 * G, 16 * G, 32 * G),
       0); /* further ahead than the host ever sets it: not believed */
    EQ(vgpu_room_wait_pick(now, now + 2000 * MS, fresh, room, 16 * G + 1, 16 * G, 32 * G),
       0); /* a borrower still fails */
    EQ(vgpu_room_wait_pick(now, now + 2000 * MS, now + 2000 * MS, room, 8 * G, 16 * G, 32 * G),
       0); /* vgpu node stopped */
}

static void test_mem_free_pick(void)
{
    const uint64_t now = (uint64_t)T0, G = 1ull << 30, until = now + 3000 * MS;

    EQ(vgpu_mem_free_pick(38 * G, 22 * G, 1 * G, 38 * G, 38 * G, until, now),
       16 * G); /* owed: the rest of its request */
    EQ(vgpu_mem_free_pick(38 * G, 22 * G, 30 * G, 38 * G, 38 * G, until, now), 16 * G); /* the GPU has more: its cap */
    EQ(vgpu_mem_free_pick(38 * G, 22 * G, 1 * G, 38 * G, 38 * G, now, now), 1 * G);     /* vgpu node stopped */
    EQ(vgpu_mem_free_pick(38 * G, 22 * G, 1 * G, 0, 38 * G, until, now), 1 * G);        /* no request */
    EQ(vgpu_mem_free_pick(60 * G, 30 * G, 2 * G, 20 * G, 128 * G, until, now), 2 * G);  /* a borrower */
    EQ(vgpu_mem_free_pick(60 * G, 10 * G, 2 * G, 20 * G, 128 * G, until, now), 10 * G); /* under its request */
    EQ(vgpu_mem_free_pick(8 * G, 9 * G, 2 * G, 20 * G, 128 * G, now, now), 0);          /* over its cap */
}

/* The grants the arbitration gives, as the pacer holds them on the device's
 * timeline: request 30 / limit 100 alone gets the GPU (its grant 10000);
 * requests 30 and 50 both busy split 37.5 : 62.5 within 3 points, losing
 * under 5 %; request 30 / limit 60 alone, 60 within 3. */
static void test_grants(void)
{
    struct sim_tenant ts[2];
    const int64_t H = 10000 * MS, from = 1000 * MS;

    sim_tenant_bp(&ts[0], 10000, 500, 0);
    sim_run(ts, 1, H, from, H);
    EQ(PCT_OF(ts[0].got, H - from) >= 990, 1);

    sim_tenant_bp(&ts[0], 3750, 500, 0);
    sim_tenant_bp(&ts[1], 6250, 500, 3750);
    sim_run(ts, 2, H, from, H);
    EQ(PCT_OF(ts[0].got, H - from) >= 345 && PCT_OF(ts[0].got, H - from) <= 405, 1);
    EQ(PCT_OF(ts[1].got, H - from) >= 595 && PCT_OF(ts[1].got, H - from) <= 655, 1);
    EQ(PCT_OF(ts[0].got + ts[1].got, H - from) >= 950, 1);

    sim_tenant_bp(&ts[0], 6000, 500, 0);
    sim_run(ts, 1, H, from, H);
    EQ(PCT_OF(ts[0].got, H - from) >= 570 && PCT_OF(ts[0].got, H - from) <= 630, 1);
}

/* The order's decision: a yield stops work at or above what is due
 * (vgpu_order_due) and lets work below it start; a bound holds the queue to bound_ns; deadlines
 * passed or further than VGPU_SHARE_ORDER_MAX_MS ahead are not believed;
 * the waits are short steps. */
static void test_order_may_start(void)
{
    struct vgpu_share_order o = {0};
    int64_t w = -1, req = 150 * MS;
    uint64_t now = T0;

    EQ(vgpu_order_may_start(&o, 400 * MS, req, 0, (int64_t)now + 300 * MS, now, &w), 1); /* no order */
    o.yield_until_ns = now + 2 * MS;
    EQ(vgpu_order_may_start(&o, 149 * MS, req, 0, 0, now, &w), 1); /* below its request: starts */
    EQ(vgpu_order_may_start(&o, 150 * MS, req, 0, 0, now, &w), 0); /* at its request: yields */
    EQ(w, VGPU_ORDER_STEP_NS);
    EQ(vgpu_order_may_start(&o, 150 * MS, req, 0, 0, now + 2 * MS - 1000, &w), 0);
    EQ(w, 1000);                                                            /* the rest of the yield */
    EQ(vgpu_order_may_start(&o, 150 * MS, req, 0, 0, now + 2 * MS, &w), 1); /* ended */
    EQ(vgpu_order_may_start(&o, 150 * MS, 0, 0, 0, now + MS, &w), 0);       /* request 0: yields */
    o.yield_until_ns = now + (uint64_t)VGPU_SHARE_ORDER_MAX_MS * MS + 1;    /* not the host's */
    EQ(vgpu_order_may_start(&o, 150 * MS, req, 0, 0, now, &w), 1);
    o.yield_until_ns = now + (uint64_t)VGPU_SHARE_ORDER_MAX_MS * MS;
    EQ(vgpu_order_may_start(&o, 150 * MS, req, 0, 0, now, &w), 0);
    o.yield_until_ns = 0;
    o.bound_until_ns = now + 3000 * MS;
    o.bound_ns = 500000;
    EQ(vgpu_order_may_start(&o, 0, req, 0, (int64_t)now + 500000, now, &w), 1); /* at the bound */
    EQ(vgpu_order_may_start(&o, 0, req, 0, (int64_t)now + 500001, now, &w), 1); /* deadline not believed */
    o.bound_until_ns = now + 900 * MS;
    EQ(vgpu_order_may_start(&o, 0, req, 0, (int64_t)now + 500001, now, &w), 0);
    EQ(w, 1);
    EQ(vgpu_order_may_start(&o, 0, req, 0, (int64_t)now + 2 * MS, now, &w), 0); /* below its request too */
    EQ(w, VGPU_ORDER_STEP_NS);
    EQ(vgpu_order_may_start(&o, 0, req, 0, (int64_t)now + 2 * MS, now + 1500 * 1000, &w), 1);
    EQ(vgpu_order_may_start(&o, 0, req, 0, 0, now, &w), 1);                 /* nothing queued */
    EQ(vgpu_order_may_start(&o, 0, req, 0, (int64_t)now - MS, now, &w), 1); /* queue in the past */
    o.bound_ns = UINT64_MAX;                                                /* never negative */
    EQ(vgpu_order_may_start(&o, 0, req, 0, (int64_t)now + 2 * MS, now, &w), 1);
    /* the launch's own estimate counts: the queue it joins and it stay
     * within the bound, or one launch longer than it starts with at most
     * VGPU_ORDER_LEAD_NS left queued */
    o.bound_ns = 500000;
    EQ(vgpu_order_may_start(&o, 0, req, 200000, (int64_t)now + 300000, now, &w), 1);
    EQ(vgpu_order_may_start(&o, 0, req, 200000, (int64_t)now + 300001, now, &w), 0);
    EQ(w, 1);
    EQ(vgpu_order_may_start(&o, 0, req, 2 * MS, (int64_t)now + VGPU_ORDER_LEAD_NS, now, &w), 1);
    EQ(vgpu_order_may_start(&o, 0, req, 2 * MS, (int64_t)now + VGPU_ORDER_LEAD_NS + 1, now, &w), 0);
    EQ(vgpu_order_may_start(&o, 0, req, 2 * MS, 0, now, &w), 1); /* nothing queued */
    o.bound_ns = 50000;                                          /* a bound below the lead holds */
    EQ(vgpu_order_may_start(&o, 0, req, 2 * MS, (int64_t)now + 50001, now, &w), 0);
    EQ(vgpu_order_may_start(&o, 0, req, 2 * MS, (int64_t)now + 50000, now, &w), 1);
}

/* What a request is due by now: in proportion into the slot (or the
 * period), all of it from the slot's end on; 0 for request 0. A tenant whose
 * slot is as wide as its request has no slack (due = used all along); one
 * with a wider slot is ahead, and yields, for the difference. */
static void test_order_due(void)
{
    int64_t period = 100 * MS, req = 90 * MS;
    uint64_t base = (T0 / (uint64_t)period + 1) * (uint64_t)period;

    EQ(vgpu_order_due(req, period, -1, 0, base), 0);                 /* the period's start */
    EQ(vgpu_order_due(req, period, -1, 0, base + 50 * MS), 45 * MS); /* halfway: half */
    EQ(vgpu_order_due(req, period, -1, 0, base + 99 * MS), 89100 * 1000);
    EQ(vgpu_order_due(req, period, 0, period, base + 50 * MS), 45 * MS); /* a slot of the whole period */
    /* a slot [20, 80) ms: none due before it, in proportion in it, all after */
    EQ(vgpu_order_due(req, period, 20 * MS, 60 * MS, base + 20 * MS), 0);
    EQ(vgpu_order_due(req, period, 20 * MS, 60 * MS, base + 50 * MS), 45 * MS);
    EQ(vgpu_order_due(req, period, 20 * MS, 60 * MS, base + 80 * MS), req);
    EQ(vgpu_order_due(req, period, 20 * MS, 60 * MS, base + 10 * MS), req); /* past the last slot's end */
    /* a slot that wraps past the period's end: [90, 150) */
    EQ(vgpu_order_due(req, period, 90 * MS, 60 * MS, base + 120 * MS), 45 * MS);
    EQ(vgpu_order_due(0, period, -1, 0, base + 50 * MS), 0); /* request 0: nothing due */
    EQ(vgpu_order_due(req, 0, -1, 0, base), req);            /* no periods: the request */
}

/* What the container used this period, as one process counts it: from its
 * first look in each period, plus what is queued (at most a period). */
static void test_order_used(void)
{
    struct vgpu_order_period pp = {0};
    int64_t period = 100 * MS;
    uint64_t base = (uint64_t)T0 / (uint64_t)period * (uint64_t)period; /* a period's start */

    EQ(vgpu_order_used(&pp, period, -1, 5000 * MS, 0, base + 10 * MS), 0); /* first look */
    EQ(vgpu_order_used(&pp, period, -1, 5020 * MS, 0, base + 40 * MS), 20 * MS);
    EQ(vgpu_order_used(&pp, period, -1, 5020 * MS, (int64_t)(base + 43 * MS), base + 40 * MS), 23 * MS);
    EQ(vgpu_order_used(&pp, period, -1, 5020 * MS, (int64_t)(base + 900 * MS), base + 40 * MS), 120 * MS);
    EQ(vgpu_order_used(&pp, period, -1, 5030 * MS, 0, base + 100 * MS), 0); /* the next period */
    EQ(vgpu_order_used(&pp, period, -1, 5031 * MS, 0, base + 150 * MS), 1 * MS);
    EQ(vgpu_order_used(&pp, period, -1, 10, 0, base + 160 * MS), 0); /* a region written back: from here */
    EQ(vgpu_order_used(&pp, 0, -1, 5031 * MS, 0, base), 0);          /* no periods */
    /* with a phase the periods start there, as the slots and the due */
    pp = (struct vgpu_order_period){0};
    EQ(vgpu_order_used(&pp, period, 30 * MS, 6000 * MS, 0, base + 31 * MS), 0);
    EQ(vgpu_order_used(&pp, period, 30 * MS, 6050 * MS, 0, base + 129 * MS), 50 * MS); /* the same period */
    EQ(vgpu_order_used(&pp, period, 30 * MS, 6051 * MS, 0, base + 130 * MS), 0);       /* the next */
}

int main(void)
{
    test_init_bp();
    test_share_pick();
    test_mem_cap_pick();
    test_room_wait_pick();
    test_mem_free_pick();
    test_grants();
    test_init();
    test_refill_bucket();
    test_charge_account();
    test_no_period();
    test_gate();
    test_slot();
    test_slot_fits();
    test_pooled();
    test_light();
    test_busy();
    test_measured_pair();
    test_contention();
    test_pooled_slots();
    test_stopped_holder();
    test_estimate();
    test_sampling();
    test_captures();
    test_order_may_start();
    test_order_used();
    test_order_due();
    printf("%d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}
