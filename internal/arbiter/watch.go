package arbiter

import "github.com/vgpu-dev/vgpu/internal/contract"

// Watch follows one tenant between the node's checks (every round, about
// 100 ms) and the arbitrations of its GPU (once a period, and at once when a
// check finds that the tenant slept or woke). Pure: readings and clock values
// (CLOCK_MONOTONIC ns) come in, nothing is read here.
//
// A tenant asleep must release its time within one period and one that wakes
// must have its request back within one: waiting for the period's end is not
// enough, since the first round after a sleep still sees the period in which
// the tenant was busy. So each check looks at what happened since the last
// check only: no device time, no waiting launch and no queued work in it
// while the last arbitration counted the tenant busy means it slept; a launch that waited
// for the pacer (or use of 90 % of its grant) while it was counted idle means
// it woke. Either asks for an arbitration now.
type Watch struct {
	chkAt, chkBusy uint64 // the last check
	arbAt, arbBusy uint64 // the last arbitration
	checked        bool   // a check before the last one exists: active means something
	active         bool   // since the check before: device time, or a launch waited
	judged         bool   // an arbitration judged the tenant
	busy           bool   // as the last arbitration judged it
	share          int    // its grant then, basis points
}

// Reading is what a tenant's region says at a check: its cumulative device
// time (ns), when a launch last waited for the pacer and when the launches
// it queued are expected to end (CLOCK_MONOTONIC ns, 0 = never). Device
// time is counted when a launch's measurement is harvested, at a later
// launch: a tenant running one long kernel shows none until it launches
// again, but its queue end says it is running.
type Reading struct {
	Busy, Want, Queue uint64
}

// Check records the reading r at now and says whether the tenant's state
// changed against what its last arbitration assumed, so that its GPU is
// arbitrated again now: counted busy and nothing since the last check (no
// device time, no waiting launch, no queued work running past the last
// check: it slept), or counted idle and since the last check a launch waited or it used
// 90 % of its grant (it woke).
func (w *Watch) Check(r Reading, now uint64) bool {
	prevAt, prevBusy, had := w.chkAt, w.chkBusy, w.chkAt != 0
	w.chkAt, w.chkBusy = now, r.Busy
	if !had || now <= prevAt {
		w.checked, w.active = false, true
		return false
	}
	w.checked = true
	waited := r.Want >= prevAt
	w.active = waited || r.Busy != prevBusy || r.Queue > prevAt
	if !w.judged {
		return false
	}
	if w.busy {
		return !w.active
	}
	return waited || r.Busy > prevBusy && w.share > 0 && use(r.Busy-prevBusy, now-prevAt) >= w.share*9/10
}

// use is ns of device time over dt ns of clock, in basis points.
func use(ns, dt uint64) int {
	if dt == 0 {
		return 0
	}
	return int(min(ns, dt) * contract.ShareFull / dt)
}

// Judge is the tenant as the arbitration at now sees it (after Check at
// now): busy = a launch waited since the last arbitration, or it used 90 % of
// its grant, and not asleep since the last check; used = its device time
// since the last arbitration, in whole percent (grants move only when use
// does), 0 when asleep. period: the pacing period, which a first judgement
// looks back over for a waiting launch.
func (w *Watch) Judge(r Reading, now, period uint64) (busy bool, used int) {
	if w.arbAt != 0 && now > w.arbAt && r.Busy >= w.arbBusy {
		u := use(r.Busy-w.arbBusy, now-w.arbAt)
		busy = r.Want >= w.arbAt || w.share > 0 && u >= w.share*9/10
		used = u / 100 * 100
	} else {
		busy = r.Want+period >= now
	}
	if w.checked && !w.active {
		busy, used = false, 0 // asleep: what it did earlier in the period is not wanted now
	}
	w.arbAt, w.arbBusy = now, r.Busy
	return busy, used
}

// Active says whether the last check found the tenant doing anything since
// the check before: device time, a launch that waited, or queued work
// running past it. Unlike Judge's busy it does not depend on the pacer's
// waits: a tenant slowed by a neighbour's kernels on the device (time
// slicing) is active without ever waiting.
func (w *Watch) Active() bool { return w.checked && w.active }

// Granted records the arbitration's verdict and grant.
func (w *Watch) Granted(busy bool, share int) {
	w.judged, w.busy, w.share = true, busy, share
}
