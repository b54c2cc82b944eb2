package borrow

import (
	"fmt"
	"sort"
)

// Proc is one process of a tenant on the GPU, as the host's NVML shows it.
type Proc struct {
	PID  int
	Used uint64
}

// Holder is a tenant with its processes on the GPU (the host's figures:
// Used is their sum, never what the tenant's region claims).
type Holder struct {
	Tenant
	Procs []Proc
}

// FreeCeilings returns, in the order of ts, how much each tenant may hold
// under the `free` policy: what it holds plus all the memory free on the
// GPU now (its total less what the processes outside vgpu and every tenant
// hold), never below its request nor above its limit. Two tenants may draw
// on the same free memory, and a borrower on memory an owner's request is
// owed: Victim takes it back when the owner needs it.
func FreeCeilings(total, outside uint64, ts []Tenant) []uint64 {
	used := outside
	for _, t := range ts {
		used = sat(used, t.Used)
	}
	free := uint64(0)
	if used < total {
		free = total - used
	}
	out := make([]uint64, len(ts))
	for i, t := range ts {
		out[i] = min(max(sat(t.Used, free), t.Request), t.Limit)
	}
	return out
}

// Victim chooses what to take back when an owner, under its request, needs
// need more bytes that the GPU does not have free (the `free` borrowing
// policy: any free memory may be lent, taken back when an owner needs it).
// The owner's claim is checked against the host's figures first: it must
// hold, with need, no more than its request, else nothing is killed. Then,
// of the tenants above their request, the one most over it loses its
// largest process (ties: the lower id, the lower pid). why names both for
// the event; ok false: nothing to take back (why says why).
func Victim(owner Tenant, need uint64, hs []Holder) (id string, pid int, why string, ok bool) {
	if why, past := pastRequest(owner, need); past {
		return "", 0, why, false
	}
	over := overRequest(owner, hs)
	if len(over) == 0 {
		return "", 0, noneOver(owner, need), false
	}
	v := over[0]
	ps := largestFirst(v.Procs)
	return v.ID, ps[0].PID, borrowsFor(v, owner, need), true
}

// pastRequest: the owner asks, beside what it holds, more than its request
// (the host's figures), so nothing is taken back for it.
func pastRequest(owner Tenant, need uint64) (string, bool) {
	if owner.Used+need > owner.Request {
		return fmt.Sprintf("%s asks %s beside the %s it holds, past its request %s: nothing is taken back for it", owner.ID, Size(need), Size(owner.Used), Size(owner.Request)), true
	}
	return "", false
}

func noneOver(owner Tenant, need uint64) string {
	return fmt.Sprintf("%s needs %s under its request %s but no tenant holds more than its request", owner.ID, Size(need), Size(owner.Request))
}

// overRequest is the tenants other than owner holding more than their
// request, with processes, the lowest priority first, then the most over
// its request (ties: the lower id).
func overRequest(owner Tenant, hs []Holder) []Holder {
	var over []Holder
	for _, h := range hs {
		if h.ID != owner.ID && h.Used > h.Request && len(h.Procs) > 0 {
			over = append(over, h)
		}
	}
	sort.Slice(over, func(i, j int) bool {
		if over[i].Rank != over[j].Rank {
			return over[i].Rank < over[j].Rank
		}
		a, b := over[i].Used-over[i].Request, over[j].Used-over[j].Request
		return a > b || a == b && over[i].ID < over[j].ID
	})
	return over
}

// largestFirst is a copy of ps, the largest first (ties: the lower pid).
func largestFirst(ps []Proc) []Proc {
	out := append([]Proc(nil), ps...)
	sort.Slice(out, func(i, j int) bool {
		return out[i].Used > out[j].Used || out[i].Used == out[j].Used && out[i].PID < out[j].PID
	})
	return out
}

// borrowsFor names, for an event, what the borrower holds above its
// request and what the owner needs under its own.
func borrowsFor(h Holder, owner Tenant, need uint64) string {
	return fmt.Sprintf("%s borrows %s above its request %s; %s needs %s under its request %s", h.ID, Size(h.Used-h.Request), Size(h.Request), owner.ID, Size(need), Size(owner.Request))
}
