// Package arbiter is the compute arbitration of one GPU (docs/design.md
// "Requests and the arbitration"): from each tenant's request, limit and
// what it did in the last period, what each may use in the next one. Pure:
// no clock, no I/O; `vgpu node` (internal/node/daemon) feeds it from the
// quota files it trusts and the regions the tenants write, and writes the
// result into each tenant's grant file (grantfile.go), which tenants cannot
// write. state.Create uses Admit and Static at admission.
//
// Shares are in basis points of the GPU's time (10000 = the whole GPU).
package arbiter

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

// Tenant is one paced device of one container (or `vgpu exec`) on the GPU.
type Tenant struct {
	ID       string // the container; grants follow the order of IDs
	Request  int    // percent 0..Limit (0: surplus only)
	Limit    int    // percent 1..100
	Explicit bool   // the request was given (not the limit standing in)
	// Busy: in the last period the tenant wanted more than it was granted
	// (a launch waited for the pacer) or used all of its grant.
	Busy bool
	// Used: basis points of the GPU the tenant's launches took in the last
	// period, as measured (shown; the grants do not depend on it).
	Used int
	// Rank is its priority's rank (tenant.Priority.Rank): the surplus goes
	// to the busy tenants of the highest rank first.
	Rank int
}

// Grant is what a tenant may use in the next period.
type Grant struct {
	Share int // basis points, 1..Limit*100
	Phase int // where its slot starts in each period, basis points 0..9999
}

// Requests returns the requests in basis points that hold on the GPU: as
// given while they fit in the whole GPU, else all scaled down in proportion
// (scaled true). Admission keeps the explicit ones within 100; the limits
// standing in for requests of limit-only tenants may push the sum past it.
func Requests(ts []Tenant) (eff []int, scaled bool) {
	sum := 0
	for _, t := range ts {
		sum += t.Request
	}
	eff = make([]int, len(ts))
	for i, t := range ts {
		eff[i] = t.Request * 100
		if sum > 100 {
			eff[i] = t.Request * contract.ShareFull / sum
		}
	}
	return eff, sum > 100
}

// Arbitrate computes the grants of one GPU's tenants for the next period:
//   - a busy tenant gets at least its request (as scaled by Requests);
//   - what no busy tenant requests and no other tenant uses goes to the busy
//     tenants of the highest priority (Rank) in proportion to their
//     requests, none above its limit, what is left then to those with
//     request 0, equally; what they leave to the next priority down, alike
//     (a priority orders the surplus, never a request);
//   - a tenant that is not busy keeps its request (so that it has it back at
//     once when it wakes), and the busy ones share the whole GPU: its
//     launches start at once (its gate is open) and time-slice with theirs,
//     so they pay for what it uses in their own device time already; taking
//     its use from their grants too would charge them twice (a GPT-2 training
//     loop beside a light tenant using 8 % lost 17 % of its steps where it
//     loses 10 % natively). One that needs more than time-slicing gives it
//     waits for the pacer, and is busy;
//   - a request-0 tenant that is not busy has no request to keep: it gets
//     what it would get busy (its part of the surplus), for the same
//     reason, where 1 basis point would hold its first launches after a
//     pause for a round (a high tenant with no compute setting is request
//     0: state.Admit);
//   - every share is at least 1 basis point (the pacer takes no 0).
//
// Slots are laid end to end from 0 in the order of IDs (ts is in that
// order), busy or not, so that busy tenants take turns and keep their
// places when a neighbour's flag flips.
func Arbitrate(ts []Tenant) []Grant {
	eff, _ := Requests(ts)
	out := make([]Grant, len(ts))
	var busy []int
	for i, t := range ts {
		if t.Busy {
			busy = append(busy, i)
		}
	}
	shares := fill(ts, eff, busy)
	for i := range ts {
		out[i].Share = shares[i]
		if !ts[i].Busy && eff[i] == 0 {
			// request 0 and not busy: what it would get busy, not its
			// request (nothing), so that it has it at once when it wakes
			// (with no compute setting beside a priority, a high tenant is
			// request 0); the busy ones keep the whole GPU as beside any
			// idle tenant, and the requests hold (it gets only surplus)
			out[i].Share = fill(ts, eff, append(append([]int(nil), busy...), i))[i]
		}
	}
	for i := range out {
		out[i].Share = max(out[i].Share, 1)
	}
	// Slots lie end to end in the order of IDs, whatever is busy: a flag
	// that flips between rounds (a tenant waking beside one that held the
	// whole GPU is not seen busy until it waits) must not reorder the slots,
	// or the next round moves a busy tenant's slot onto its neighbour's. A
	// busy tenant's slot is as wide as its share; one that is not busy takes
	// in the layout at most its request of what the busy ones leave, so the
	// busy slots never overlap.
	left := contract.ShareFull
	for _, i := range busy {
		left -= out[i].Share
	}
	at := 0
	for i := range ts {
		out[i].Phase = at % contract.ShareFull
		if ts[i].Busy {
			at += out[i].Share
		} else {
			w := max(min(eff[i], left), 0)
			left -= w
			at += w
		}
	}
	return out
}

// fill is the shares of ts when the tenants busy (indices in ID order) are
// busy and the others not: each its request (eff), then by water-filling
// what no busy tenant requests, by the requests, then equally among the
// busy request-0 tenants, none above its limit.
func fill(ts []Tenant, eff []int, busy []int) []int {
	slices.Sort(busy)
	out := make([]int, len(ts))
	free := contract.ShareFull
	for i := range ts {
		out[i] = eff[i]
	}
	var ranks []int
	for _, i := range busy {
		free -= eff[i]
		if !slices.Contains(ranks, ts[i].Rank) {
			ranks = append(ranks, ts[i].Rank)
		}
	}
	slices.Sort(ranks)
	slices.Reverse(ranks)
	for _, rank := range ranks {
		var level []int
		for _, i := range busy {
			if ts[i].Rank == rank {
				level = append(level, i)
			}
		}
		free = waterFill(ts, eff, level, out, free)
	}
	return out
}

// waterFill gives free to the tenants busy, by their requests, then
// equally among the request-0 ones, none above its limit, into out; it
// returns what is left.
func waterFill(ts []Tenant, eff, busy, out []int, free int) int {
	for _, byRequest := range []bool{true, false} {
		for free > 0 {
			weight := 0
			var open []int
			for _, i := range busy {
				w := eff[i]
				if !byRequest {
					w = boolInt(eff[i] == 0)
				}
				if w > 0 && out[i] < ts[i].Limit*100 {
					open = append(open, i)
					weight += w
				}
			}
			if weight == 0 {
				break
			}
			given := 0
			for _, i := range open {
				w := eff[i]
				if !byRequest {
					w = 1
				}
				add := min(free*w/weight, ts[i].Limit*100-out[i])
				if add == 0 && free > 0 { // rounding: a point to the first that can take it
					add = 1
				}
				out[i] += add
				given += add
				if given >= free {
					break
				}
			}
			free -= given
		}
	}
	return free
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Held is one tenant already admitted on a GPU, for Admit and Static.
type Held struct {
	ID       string
	Request  int // percent
	Explicit bool
}

// Admit refuses an explicit request that would take the explicit requests
// on its GPU past 100: the error names the GPU, the sum and the holders.
// Requests standing in for limits are not refused (Requests scales them).
func Admit(gpu string, request int, explicit bool, held []Held) error {
	if !explicit {
		return nil
	}
	sum := request
	var who []string
	for _, h := range held {
		if h.Explicit {
			sum += h.Request
			who = append(who, fmt.Sprintf("%s %d%%", h.ID, h.Request))
		}
	}
	if sum <= 100 {
		return nil
	}
	return fmt.Errorf("GPU %s: compute requests would sum to %d%% with this one's %d%% (held: %s): requests on a GPU must fit in 100%%; lower the request or use another GPU",
		gpu, sum, request, strings.Join(who, ", "))
}

// Static is the share a tenant holds while no arbitration runs (without
// `vgpu node`): its request, scaled down with the others' when the requests
// on the GPU at its admission sum past 100; a request-0 tenant gets what
// the requests there leave (at least 1 %).
func Static(request int, held []Held) int {
	sum := request
	for _, h := range held {
		sum += h.Request
	}
	if request == 0 {
		return max(100-sum, 1) * 100
	}
	if sum > 100 {
		return max(request*contract.ShareFull/sum, 1)
	}
	return request * 100
}
