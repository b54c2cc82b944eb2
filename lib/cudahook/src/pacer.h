/* The pacer (pacer.c): when a launch on a compute-limited device may start,
 * and what it is charged. Pure: every decision comes from a clock value and
 * measured spans passed in, state is in the structs passed in; no driver
 * calls, no clock reads, no globals. The part pooled by every process of a
 * container (struct vgpu_compute_shared, the gate) lives in the shared region
 * and is updated with atomics only.
 *
 * Words: the bucket holds tokens, ns of device time the container may still
 * start. It refills at pct/100 ns per ns of clock. The allotment is the device
 * time of one period (pct% of it): the level that opens the gate again, and
 * the most a light container saves. The slot is the stretch of every period,
 * [phase, phase + slot_ns) on CLOCK_MONOTONIC, in which a busy container with
 * a phase may start launches; a light one (its gate open: the bucket has not
 * fallen a burst, BURST_PCT of an allotment, below full since it last held a
 * whole allotment) starts them at once. */
#ifndef VGPU_PACER_H
#define VGPU_PACER_H
#include <stdint.h>
#include "region.h"
#include "vgpu_share.h" /* shares in basis points: VGPU_SHARE_FULL */

#define VGPU_PACER_ALLOT_NS_PER_PCT 1000000LL               /* no period: the cap is pct% of 100 ms */
#define VGPU_PACER_TOKENS_MIN       (-600LL * 1000000000LL) /* debt never below 10 minutes of device time */
#define VGPU_PACER_CHARGE_MAX       (3600LL * 1000000000LL) /* one launch: at most an hour */
#define VGPU_PACER_REFILL_DT_MAX    1000000000000000ULL     /* 11 days: keeps dt * pct from overflowing */
#define VGPU_PACER_SLEEP_MIN_NS     20000LL
#define VGPU_PACER_SLEEP_MAX_NS     10000000LL    /* re-harvest and re-read the bucket at least every 10 ms */
#define VGPU_PACER_COLD_NS          2000000000ULL /* a first launch still unmeasured after 2 s counts as 2 s */
#define VGPU_PACER_SAMPLE_EVERY     32            /* launches measured: 1 in 32, at random, */
#define VGPU_PACER_SAMPLE_DEVICE_NS 1000000LL     /* and one once those since the last span 1 ms of device time */
#define VGPU_PACER_BURST_PCT        20 /* with a slot: what a light container starts at a stretch, % of an allotment */

/* One device's limit, fixed at setup. */
struct vgpu_pacer {
    int bp;                /* the share in basis points, 1..10000 (10000: the whole GPU, nothing waits) */
    int pct;               /* bp in whole percent, at least 1 */
    int64_t period_ns;     /* 0: no gate, launch by launch while the bucket is not negative */
    int64_t phase_ns;      /* -1: a free-running gate; else where the slot starts in each period */
    int64_t allot_ns;      /* device time of one period (no period: the cap) */
    int64_t slot_ns;       /* the slot's width on the clock (with a phase) */
    int64_t cap_ns;        /* the most the bucket holds */
    int64_t busy_below_ns; /* an open gate closes below this level (with a slot: the allotment less a burst) */
};

/* period_ms >= 0; phase_pct -1 (none) or 0..99. */
void vgpu_pacer_init(struct vgpu_pacer *p, int pct, int period_ms, int phase_pct);
/* The same in basis points: bp 1..10000, phase_bp -1 (none) or 0..9999. */
void vgpu_pacer_init_bp(struct vgpu_pacer *p, int bp, int period_ms, int phase_bp);

/* Which share holds at now (each a word of the share file: share in basis
 * points | phase << 32): the arbitration's while its stamp is less than
 * VGPU_SHARE_STALE_MS old, else the admission's, else fallback (the quota
 * file's request and phase, for a missing share file). A word whose share
 * is 0 is none. So without `vgpu node` every tenant is held to what
 * admission gave it: its request. */
uint64_t vgpu_share_pick(uint64_t stamp, uint64_t arbitration, uint64_t admission, uint64_t fallback, uint64_t now);

/* Raises the container's bucket to 0 if it is below: a free run (the host's
 * word: no neighbour active) took device time that was no one else's, and
 * owes none of it back to the slots that follow. */
void vgpu_pacer_forgive(struct vgpu_compute_shared *c);
/* Refills the container's bucket up to now and returns its level. */
int64_t vgpu_pacer_refill(const struct vgpu_pacer *p, struct vgpu_compute_shared *c, uint64_t now);
/* Whether a launch may start at now with tok in the bucket (the gate is the
 * container's, shared; NULL: launch by launch); else 0 and *wait_ns, how long
 * until it may. */
int vgpu_pacer_may_start(const struct vgpu_pacer *p, uint32_t *gate, int64_t tok, uint64_t now, int64_t *wait_ns);
/* With a slot, a busy container (its gate closed) starts a launch only if it
 * starts within the slot: behind the work the container expects done at
 * queued_until (CLOCK_MONOTONIC ns, vgpu_pacer_queued), before the slot's
 * end. Else 0 and *wait_ns, until the next slot, and the container's bucket
 * (c) keeps nothing above 0: the rest of the slot is committed, and tokens
 * kept past it would run on into the next container's slot, or pile up until
 * the gate opened and the container ran outside its slot. So a busy
 * container runs into its neighbour's slot by one launch at most, not by its
 * queue, where the device would time-slice the two and each would be charged
 * the other's time. Light containers, and pacers without a slot: 1. */
int vgpu_pacer_slot_fits(const struct vgpu_pacer *p, const uint32_t *gate, struct vgpu_compute_shared *c,
                         int64_t queued_until, uint64_t now, int64_t *wait_ns);
/* A launch of est ns started at now: *queued_until (the container's, shared)
 * becomes max(*queued_until, now) + est. A value more than a period ahead is
 * not believed (the region is the container's to scribble on): now stands in. */
void vgpu_pacer_queued(const struct vgpu_pacer *p, int64_t *queued_until, int64_t est, uint64_t now);
/* How long to sleep for a wait: clamped to [SLEEP_MIN, SLEEP_MAX]. */
int64_t vgpu_pacer_sleep_ns(int64_t wait_ns);
/* Takes ns (negative: gives back) from the bucket, within [TOKENS_MIN, cap]. */
void vgpu_pacer_charge(const struct vgpu_pacer *p, struct vgpu_compute_shared *c, int64_t ns);
/* Adds one launch of ns to the container's cumulative figures (vgpu status). */
void vgpu_pacer_account(struct vgpu_compute_shared *c, int64_t ns);

/* What one process knows of the launches on one device: the charge of an
 * unmeasured launch and whether launches are sampled. */
struct vgpu_estimate {
    int64_t est_ns;        /* moving average of charges (the part no other launch covered) */
    int64_t span_ns;       /* moving average of spans between a launch's events (0: none yet) */
    int known;             /* est_ns may be used (set once; atomic store) */
    int pending;           /* measurements in flight */
    int64_t unmeasured_ns; /* the spans (span_ns each) of launches since the last measured one */
};
/* Whether a launch may be charged e->est_ns at now: known, or the container's
 * average (c) stands in, or nothing is in flight (the launch will be the first
 * measured), or the first launch waited COLD_NS since *cold_since (then it
 * counts as COLD_NS). 0: wait for the oldest measurement; *cold_since is set
 * at the first such answer. */
int vgpu_estimate_ready(struct vgpu_estimate *e, const struct vgpu_compute_shared *c, uint64_t now,
                        uint64_t *cold_since);
/* A measurement: charged ns (span net of overlaps) and the raw span. */
void vgpu_estimate_learn(struct vgpu_estimate *e, int64_t charged, int64_t span);
/* Whether a launch is measured: always while nothing is known; else once the
 * launches since the last measured one span SAMPLE_DEVICE_NS of device time
 * (so launches of 1 ms or more are all measured), or 1 in SAMPLE_EVERY, drawn
 * from *rng (xorshift64*, its high bits). A measured launch costs the host
 * two event records and a harvest (several us on a real driver): measuring
 * every launch of 50 us cost a launch-bound training loop 8 % of its steps;
 * this way measuring costs at most a few us per ms of device time, and the
 * charges stay unbiased (unmeasured launches are charged the moving average
 * of measured ones, picked at random or by device time, not by what they
 * are). By the raw span, not the estimate: launches overlapping others have
 * small estimates, and charging those to unmeasured launches undercharged two
 * processes of one container. */
int vgpu_estimate_sampled(struct vgpu_estimate *e, uint64_t *rng);

/* Captures begun and not seen to end: while none is, launches need not ask
 * the driver whether their stream captures. A capture never ended keeps the
 * count up: the safe side. */
void vgpu_captures_begun(int *open);
void vgpu_captures_ended(int *open); /* never below 0 */
int vgpu_captures_open(const int *open);
#endif
