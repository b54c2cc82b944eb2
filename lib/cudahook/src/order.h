/* The order inside the period (order.c): whether a launch on a paced device
 * may start now by the host's order words (vgpu_share.h, struct
 * vgpu_share_order): while another tenant goes first, this one starts no new
 * work while it is ahead of what its request guarantees (a yield), and keeps
 * at most bound_ns of estimated device time queued (the in-flight bound).
 * Pure, as the pacer: the words, the clock and the figures come in as
 * values, state in the structs passed in; no driver calls, no clock reads,
 * no globals. docs/design.md ("The order inside the period"). */
#ifndef VGPU_ORDER_H
#define VGPU_ORDER_H
#include <stdint.h>
#include "vgpu_share.h"

/* While a launch waits for the order it re-reads the words at least this
 * often: the host renews or ends a yield every few hundred us. */
#define VGPU_ORDER_STEP_NS 200000LL

/* A bounded tenant whose next launch alone exceeds the bound starts it once
 * this little of its queue is left: launched only when its queue is empty,
 * it would leave the device idle while its process wakes. */
#define VGPU_ORDER_LEAD_NS 100000LL

/* What one process saw of the container's device time at the start of the
 * period it last looked in. */
struct vgpu_order_period {
    uint64_t index;   /* now / period_ns of that look, + 1 (0: none yet) */
    uint64_t busy_at; /* the container's cumulative busy ns then */
};

/* Device time the container used in the period that holds now (periods of
 * period_ns on CLOCK_MONOTONIC starting at its slot's phase, phase_ns; no
 * phase: at multiples of period_ns, as vgpu_order_due counts): its measured busy ns since
 * this process first looked in the period, plus what it has queued past now
 * (queued_until, CLOCK_MONOTONIC ns). A process that first looks late in a
 * period counts from then: the tenant's side, never the neighbours'. */
int64_t vgpu_order_used(struct vgpu_order_period *pp, int64_t period_ns, int64_t phase_ns, uint64_t busy_ns,
                        int64_t queued_until, uint64_t now);

/* What of its request (request_ns a period) the container is due to have
 * used by now: the request in proportion to how far now is into its slot
 * (phase_ns, slot_ns; no phase or no slot: into the period), all of it
 * past the slot's end. A tenant that keeps up with this gets its request by
 * the slot's end, and may yield while it is ahead: the slack of a slot
 * wider than the request (a grant above it) is what a higher tenant gets
 * at once, not only once the request is used. */
int64_t vgpu_order_due(int64_t request_ns, int64_t period_ns, int64_t phase_ns, int64_t slot_ns, uint64_t now);

/* Whether a launch of an estimated est_ns may start at now by the order o:
 * not while a yield holds (yield_until_ns ahead, and not further than
 * VGPU_SHARE_ORDER_MAX_MS: else not the host's) and the container used at
 * least due_ns this period (vgpu_order_due);
 * not while a bound holds (bound_until_ns likewise) and what is queued past
 * now (queued_until) and this launch would together pass bound_ns, unless
 * at most VGPU_ORDER_LEAD_NS is left queued: what a tenant woken by the host
 * waits for is then the bound, or one launch longer than it. Else 0 and
 * *wait_ns, how long until it may (at most VGPU_ORDER_STEP_NS, when the
 * words are read again). */
int vgpu_order_may_start(const struct vgpu_share_order *o, int64_t used_ns, int64_t due_ns, int64_t est_ns,
                         int64_t queued_until, uint64_t now, int64_t *wait_ns);
#endif
