// Package borrow is the memory side of requests and limits on one GPU
// (docs/design.md "Memory requests and borrowing"): which explicit memory
// requests fit on a GPU (admission), and how far above its request each
// tenant may allocate now (its ceiling). Pure: no clock, no I/O; state.Create
// uses Admit, `vgpu node` (internal/node/daemon) feeds Ceilings from the
// driver's per-process figures and publishes the result in each tenant's
// grant file, which the library reads before every allocation.
package borrow

import (
	"fmt"
	"sort"
	"strings"
)

// Held is one device of another tenant on the GPU, as admission sees it.
type Held struct {
	ID      string
	Request uint64 // bytes, 0 = none given (a limit-only tenant)
}

// Admit checks that an explicit memory request (request > 0) fits in the
// GPU's memory beside the explicit requests already held there; a
// limit-only tenant (request 0) is never refused. total 0: unknown, nothing
// to check against.
func Admit(gpu string, total, request uint64, held []Held) error {
	if request == 0 || total == 0 {
		return nil
	}
	sum := request
	var who []string
	for _, h := range held {
		if h.Request > 0 {
			sum += h.Request
			who = append(who, fmt.Sprintf("%s %s", h.ID, Size(h.Request)))
		}
	}
	if sum <= total {
		return nil
	}
	holders := "none"
	if len(who) > 0 {
		holders = strings.Join(who, ", ")
	}
	return fmt.Errorf("GPU %s: memory requests would sum to %s with this one's %s, more than its %s (held: %s): requests on a GPU must fit in its memory; lower the request or use another GPU",
		gpu, Size(sum), Size(request), Size(total), holders)
}

// Tenant is one device of one container on the GPU, as a round sees it.
type Tenant struct {
	ID      string
	Request uint64 // bytes guaranteed; for a limit-only tenant its limit
	Limit   uint64 // bytes it may never pass (the GPU's memory when none)
	Used    uint64 // bytes it holds now (the driver's figures)
	// Rank is its priority's rank (tenant.Priority.Rank): memory is taken
	// back from the lowest rank first
	Rank int
}

// Claim is what a tenant's request keeps from everyone else: what it holds,
// or its request while it holds less.
func (t Tenant) Claim() uint64 { return max(t.Used, t.Request) }

// Ceilings returns, in the order of ts, how much each tenant may hold on the
// GPU until the next round: its claim plus a share of the free pool, never
// above its limit. The free pool is the GPU's total less what processes
// outside vgpu hold and less every tenant's claim; the shares are disjoint,
// so the ceilings sum to at most total - outside and no allocation under a
// ceiling ever needs memory another tenant's request is owed: nothing is
// taken back. The pool goes in equal parts (water-filling up to each limit)
// to the tenants already at or above their request, which are the ones
// asking for more; when none is, to every tenant that may grow.
func Ceilings(total, outside uint64, ts []Tenant) []uint64 {
	out := make([]uint64, len(ts))
	var claims uint64
	for i, t := range ts {
		out[i] = t.Claim()
		claims = sat(claims, t.Claim())
	}
	free := uint64(0)
	if used := sat(outside, claims); used < total {
		free = total - used
	}
	var grow []int
	for i, t := range ts {
		if t.Limit > t.Claim() && t.Used >= t.Request {
			grow = append(grow, i)
		}
	}
	if len(grow) == 0 {
		for i, t := range ts {
			if t.Limit > t.Claim() {
				grow = append(grow, i)
			}
		}
	}
	// Water-filling: the smallest headrooms first, each taking at most an
	// equal part of what is left.
	sort.SliceStable(grow, func(a, b int) bool {
		return ts[grow[a]].Limit-ts[grow[a]].Claim() < ts[grow[b]].Limit-ts[grow[b]].Claim()
	})
	for k, i := range grow {
		part := free / uint64(len(grow)-k)
		take := min(part, ts[i].Limit-ts[i].Claim())
		out[i] += take
		free -= take
	}
	return out
}

// sat is a + b, saturating.
func sat(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// Size writes n bytes in the largest binary unit that divides it, else in
// MiB with one decimal.
func Size(n uint64) string {
	for _, u := range []struct {
		s string
		v uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return fmt.Sprintf("%d %s", n/u.v, u.s)
		}
	}
	if n >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
