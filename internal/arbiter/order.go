package arbiter

import "github.com/vgpu-dev/vgpu/internal/contract"

// The order inside the period (docs/design.md "The order inside the
// period"): which tenant of a GPU starts no new work beyond its request for
// a moment (it yields), and how much work a tenant may keep queued on the
// device while another may need it at once (the in-flight bound). The
// arbitration (Arbitrate) decides who gets how much of a period; the order
// decides who goes first inside it. Pure: `vgpu node`'s order loop
// (internal/node/daemon/order.go) feeds it readings and the clock and writes
// the result into the share file's order words (vgpu_share.h, struct
// vgpu_share_order), which the library obeys before each launch.

const (
	// OrderYieldHold: a tenant that others yield to keeps them yielding
	// this long after it was last seen active, so that a burst of its
	// launches with gaps between them (a decoding step's kernels, the
	// host's work between two) is not cut into pieces by its neighbours'.
	OrderYieldHold = 2_000_000 // ns
	// OrderBoundHold: the in-flight bound on its neighbours stays in force
	// this long after a tenant they yield to was last active, so that it is
	// already in force when that tenant's next request arrives: a bound set
	// only when the request is seen comes after the neighbours' queues.
	OrderBoundHold = 5_000_000_000 // ns
	// OrderBoundNs: the most estimated device time a bounded tenant keeps
	// queued or running, with the launch it is about to start, while the
	// tenant it yields to is active or idle (within the bound hold): that
	// tenant's next launch then waits for at most this, or for one of the
	// bounded tenant's launches that is longer alone (the library starts
	// such a launch with little left queued). The same while it is idle: a
	// request comes while the one before is still running as often as not,
	// and a looser bound there (1 ms) was what a light tenant's requests
	// waited for on a card. Not 0: a bounded tenant of short kernels would
	// leave the device idle between two of its launches.
	OrderBoundNs = 500_000
	// OrderFreeAhead: how far ahead a free run's deadline is written. The
	// loop looks every OrderTick while a tenant is active and ends the run
	// at the first look that finds a neighbour active or waiting; the deadline only
	// bounds a run past a node that stopped looking. Longer than the idle
	// tick (a tenant waking on an idle GPU runs free until the loop's next
	// look finds it), short against a period.
	OrderFreeAhead = 20_000_000 // ns
	// OrderWakeFor: among equal priorities a tenant below its due goes
	// first while it is waking: within this long of the start of its
	// stretch of activity (the window over which the due is counted, about
	// a period), or far below its due (OrderFarBelowPct). Two tenants busy
	// all the time, each a little under its due by turns as the window
	// slides, made each other yield by turns, and a yield lasts while the
	// other is active: a server's burst waited 10-20 ms now and then.
	// Their shares are the arbitration's; the order is for the one that
	// wakes.
	OrderWakeFor = 500_000_000 // ns
	// OrderWakeGap: a stretch of activity ends at a gap this long. Longer
	// than the gaps the loop sees inside a busy tenant's work (its queue
	// end is an estimate, and work queued behind a neighbour's outlives
	// it); shorter than the idle time between a server's bursts.
	OrderWakeGap = 20_000_000 // ns
	// OrderFarBelowPct: a tenant that used less than this percent of its
	// due over the window is waking however often it starts: a light
	// tenant's requests (a kernel every few ms) make one long stretch, and
	// one at 62 % of its due waited behind a flood's queue (130 ms) once
	// it was not waking. Two busy tenants near their due stay above it.
	OrderFarBelowPct = 80
	// orderAhead: how far ahead a deadline is written at most. The loop
	// renews it every look; a node that stops leaves deadlines that end
	// within this (the library believes none further than
	// contract.ShareOrderMaxMS).
	orderAhead = 500_000_000 // ns
)

// OrderTenant is one paced device on the GPU as the order loop sees it.
type OrderTenant struct {
	// Rank is its priority's rank (tenant.Priority.Rank): a higher one
	// goes first.
	Rank int
	// Request is its compute request, percent (its due over a window).
	Request int
	// Limit is its compute limit, percent: only a tenant of limit 100 runs
	// free (its pacer holds one below 100 to its limit by its bucket).
	Limit int
	// Use is the basis points of the GPU its launches took over the
	// recent window (about a pacing period).
	Use int
	// LastActive is CLOCK_MONOTONIC ns of the last look that found it with
	// work queued or running, or device time since the look before; 0:
	// never.
	LastActive uint64
	// ActiveSince is CLOCK_MONOTONIC ns of the first look of its present
	// stretch of activity (no gap of OrderWakeGap in it); 0: never
	// active.
	ActiveSince uint64
	// LastWaited is CLOCK_MONOTONIC ns of the last launch of its that
	// waited for its pacer or the order (the region's want), as a look
	// last read it; 0: never. Such a tenant wants the device though it
	// has nothing on it: no neighbour runs free beside it.
	LastWaited uint64
}

// Order is what one tenant is told (the share file's order words, but the
// priority, which the admission writes).
type Order struct {
	YieldUntil uint64 // CLOCK_MONOTONIC ns; 0: no yield
	BoundUntil uint64 // CLOCK_MONOTONIC ns; 0: no bound
	BoundNs    uint64 // the bound while BoundUntil holds
	FreeUntil  uint64 // CLOCK_MONOTONIC ns; 0: no free run
}

// below: t has had less than its due (its request) over the window; a
// request-0 tenant never has.
func (t OrderTenant) below() bool { return t.Use < t.Request*100 }

// waking: t is below its due and either far below it or was last active
// within OrderWakeFor of the start of that stretch of activity (so a
// server's burst keeps the bound on others through the hold after it, and
// a tenant busy all the time near its due orders no one).
func (t OrderTenant) waking() bool {
	if !t.below() {
		return false
	}
	return t.Use < t.Request*OrderFarBelowPct ||
		t.ActiveSince != 0 && t.ActiveSince <= t.LastActive && t.LastActive-t.ActiveSince < OrderWakeFor
}

// Ordering is the order of one GPU's tenants at now:
//   - a tenant yields while a tenant of a higher priority was active within
//     OrderYieldHold, and is bounded while one was within OrderBoundHold
//     (to OrderBoundNs);
//   - among equal priorities the same holds for a tenant below its due over
//     the window (Use < Request) that is waking (far below its due, or
//     within OrderWakeFor of the start of its stretch of activity): it
//     wakes at once, the ones at or above their due yield to it and are
//     bounded, until it has had its due. Two below their due do not order
//     each other, nor two busy all the time;
//   - a tenant never yields to, nor is bounded by, a lower one or itself;
//   - a tenant of limit 100 runs free (its launches need not wait for its
//     slot or its bucket) while no other tenant of the GPU was active, or
//     had a launch waiting, within OrderYieldHold: the device time would
//     go unused, where the slots of the arbitration's 50/50 held a
//     server's burst for the other's slot while the other was idle. A neighbour whose launches
//     wait for its pacer or the order has nothing on the device but wants
//     it: it counts as active. What the run starts (a launch its slot or
//     bucket would have held) the library bounds itself
//     (contract.ShareFreeBoundNS): unbounded, it queued past its slot,
//     and the neighbour, waking into its own slot, found it taken (a low
//     tenant beside a high one kept three quarters of its request). The
//     bound is not written into the order words: there it held the
//     launches the tenant's own slot lets start too, and a high server
//     beside a busy low one waited for it on a card.
//
// Yielding takes no request away (the library starts a yielding tenant's
// work while it has used less than its request this period) and lifts no
// limit (the pacer holds every tenant to its grant; a free run, only at
// limit 100, takes only what no neighbour is using).
func Ordering(ts []OrderTenant, now uint64) []Order {
	out := make([]Order, len(ts))
	for i, t := range ts {
		var yield, bound, others uint64
		for j, o := range ts {
			if j != i && o.LastWaited <= now {
				others = max(others, o.LastWaited)
			}
			if j == i || o.LastActive == 0 || o.LastActive > now {
				continue
			}
			others = max(others, o.LastActive)
			first := o.Rank > t.Rank || o.Rank == t.Rank && o.waking() && !t.below()
			if !first {
				continue
			}
			yield = max(yield, o.LastActive+OrderYieldHold)
			bound = max(bound, o.LastActive+OrderBoundHold)
		}
		if t.Limit >= 100 && (others == 0 || others+OrderYieldHold <= now) {
			out[i].FreeUntil = now + OrderFreeAhead
		}
		if yield > now {
			out[i].YieldUntil = min(yield, now+orderAhead)
		}
		if bound > now {
			out[i].BoundUntil, out[i].BoundNs = min(bound, now+orderAhead), OrderBoundNs
		}
	}
	return out
}

// orderAheadFits: a deadline the loop writes is one the library believes.
var _ = [1]struct{}{}[orderAhead/1_000_000/contract.ShareOrderMaxMS]
