/* The pacer (src/pacer.c) on an injected clock with synthetic spans: exact
 * expectations, no driver, no real time. Built by cudahook.mk with pacer.c
 * alone; run by TestPacer (pacer_test.go). Exit status 0 = every check held. */
#include <stdio.h>
#include <string.h>
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
            printf("FAIL %s:%d: %s = %lld, want %lld\n", __func__, __LINE__, #got, g_, w_);                           \
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
    EQ(p.cap_ns, 300 * MS); /* two allotments: a late wake-up loses nothing */
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
    EQ(vgpu_pacer_refill(&p, &c, T0), 0); /* first use: the clock starts */
    EQ(c.refill_ns, T0);
    EQ(vgpu_pacer_refill(&p, &c, T0 + 10 * MS), 3 * MS); /* 30 % of 10 ms */
    /* a second process refilling at the same instant adds nothing: the
     * interval belongs to whoever moved the stamp */
    EQ(vgpu_pacer_refill(&p, &c, T0 + 10 * MS), 3 * MS);
    EQ(vgpu_pacer_refill(&p, &c, T0 + 5 * MS), 3 * MS); /* an older clock value: nothing */
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
    EQ(w, 120 * MS); /* until 50 ms are back: 60 ms of tokens at 50 % */
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
    int64_t w = 0, tok;
    uint64_t base = (uint64_t)T0; /* a multiple of the period */

    memset(&c, 0, sizeof c);
    vgpu_pacer_init(&p, 30, 100, 20); /* slot [20, 50) ms of every 100 ms */
    tok = vgpu_pacer_refill(&p, &c, base + 25 * MS);
    EQ(tok, 30 * MS); /* the slot's allotment, at once */
    EQ(c.refill_ns, base + 20 * MS); /* stamped with the slot's start */
    EQ(vgpu_pacer_may_start(&p, NULL, tok, base + 25 * MS, &w), 1);
    EQ(vgpu_pacer_refill(&p, &c, base + 26 * MS), 30 * MS); /* once per slot */
    EQ(vgpu_pacer_may_start(&p, NULL, tok, base + 50 * MS, &w), 0); /* past the slot */
    EQ(w, 70 * MS);
    EQ(vgpu_pacer_may_start(&p, NULL, -1, base + 30 * MS, &w), 0); /* spent */
    EQ(w, 90 * MS);
    EQ(vgpu_pacer_may_start(&p, NULL, tok, base + 10 * MS, &w), 0); /* before it */
    EQ(w, 10 * MS);
    vgpu_pacer_charge(&p, &c, 40 * MS); /* overran by 10 ms: the next slot pays */
    EQ(vgpu_pacer_refill(&p, &c, base + 120 * MS), 20 * MS);
    EQ(vgpu_pacer_refill(&p, &c, base + 220 * MS), 30 * MS); /* unused time is not carried */
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
    vgpu_estimate_learn(&e, 10000, VGPU_PACER_SAMPLE_ALL_NS);
    EQ(vgpu_estimate_sampled(&e, &rng), 1); /* long spans: every one */
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
    EQ(n, 1088); /* about 1 in 32 */
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

int main(void)
{
    test_init();
    test_refill_bucket();
    test_charge_account();
    test_no_period();
    test_gate();
    test_slot();
    test_pooled();
    test_estimate();
    test_sampling();
    test_captures();
    printf("%d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}
