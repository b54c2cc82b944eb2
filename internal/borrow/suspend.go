package borrow

import (
	"fmt"
	"sort"
	"time"
)

// Taking borrowed memory back by suspension (the driver's checkpoint API,
// docs/node.md "Suspension probe") rather than by killing: which processes
// go, which come back, and what is owed to those suspended. Pure, as the
// rest of the package: the caller measures and acts.

// Take is one process to take back for an owner: suspended when Suspend,
// else killed; Why says for whom and, for a kill, why it could not be
// suspended.
type Take struct {
	ID      string
	PID     int
	Bytes   uint64 // what it holds on the GPU, all of it freed
	Suspend bool
	Why     string
}

// Suspendable answers, for one process of a borrower, whether it can be
// suspended now, and why not (the driver lacks the API, the host memory
// its copy would need is short, it holds managed memory ...).
type Suspendable func(id string, p Proc) (ok bool, whyNot string)

// Reclaim chooses what to take back when an owner, under its request, needs
// need more bytes than the GPU has free: the borrowers most over their
// request first, and of each the fewest processes that free what is
// missing (largest first), while it is still over its request. A tenant at
// or under its request is never touched. Each process is suspended when
// can says so, else killed with the reason. The owner's claim is checked
// against the host's figures first, as in Victim. ok false: nothing to take
// back (why says why).
func Reclaim(total, outside uint64, owner Tenant, need uint64, hs []Holder, can Suspendable) (takes []Take, why string, ok bool) {
	if why, past := pastRequest(owner, need); past {
		return nil, why, false
	}
	used := outside
	for _, h := range hs {
		used = sat(used, h.Used)
	}
	if owner.ID != "" && !holds(hs, owner.ID) {
		used = sat(used, owner.Used)
	}
	var missing uint64
	if free := sub(total, used); need > free {
		missing = need - free
	}
	if missing == 0 {
		return nil, fmt.Sprintf("%s needs %s and the GPU has it free: nothing is taken back", owner.ID, Size(need)), false
	}
	var freed uint64
	for _, h := range overRequest(owner, hs) {
		left := h.Used
		for _, p := range largestFirst(h.Procs) {
			if freed >= missing || left <= h.Request {
				break
			}
			t := Take{ID: h.ID, PID: p.PID, Bytes: p.Used, Why: borrowsFor(h, owner, need)}
			if ok, whyNot := can(h.ID, p); ok {
				t.Suspend = true
			} else {
				t.Why += "; killed, not suspended: " + whyNot
			}
			takes = append(takes, t)
			freed = sat(freed, p.Used)
			left = sub(left, p.Used)
		}
		if freed >= missing {
			break
		}
	}
	if len(takes) == 0 {
		return nil, noneOver(owner, need), false
	}
	return takes, "", true
}

// Suspended is a process held on the host by a suspension.
type Suspended struct {
	ID    string
	PID   int
	Bytes uint64 // what it held on the GPU: all of it must fit to restore it
	Since time.Time
}

// owedBy is what restoring s adds to its tenant's claim (what the tenant
// holds now, or its request while it holds less), for the tenant t.
func owedBy(t Tenant, s Suspended) uint64 {
	return sub(max(sat(t.Used, s.Bytes), t.Request), t.Claim())
}

// Restores returns, longest suspended first, the processes that go back
// now: each only when the GPU's memory not claimed by anyone (its total
// less what processes outside vgpu hold and every tenant's claim) holds
// all of what restoring it adds, since a restore that lacks room fails for
// good. inOrder: a process that does not fit holds back every later one
// (the one suspended longest goes first), else later ones that fit go.
// A suspended process whose tenant is not in ts is not restored.
func Restores(total, outside uint64, ts []Tenant, sus []Suspended, inOrder bool) []Suspended {
	byID := map[string]int{}
	claims := outside
	for i, t := range ts {
		byID[t.ID] = i
		claims = sat(claims, t.Claim())
	}
	free := sub(total, claims)
	order := append([]Suspended(nil), sus...)
	sort.SliceStable(order, func(i, j int) bool { return order[i].Since.Before(order[j].Since) })
	now := append([]Tenant(nil), ts...)
	var out []Suspended
	for _, s := range order {
		i, known := byID[s.ID]
		if !known {
			continue
		}
		add := owedBy(now[i], s)
		if add > free {
			if inOrder {
				break
			}
			continue
		}
		free -= add
		now[i].Used = sat(now[i].Used, s.Bytes)
		out = append(out, s)
	}
	return out
}

// Owed is the memory restores are owed: what restoring every suspended
// process would add to its tenant's claim. Lending counts it as taken
// (added to the memory outside every tenant's claim), so a restore goes
// ahead of any new borrowing.
func Owed(ts []Tenant, sus []Suspended) uint64 {
	byID := map[string]Tenant{}
	for _, t := range ts {
		byID[t.ID] = t
	}
	var owed uint64
	for _, s := range sus {
		t := byID[s.ID]
		owed = sat(owed, owedBy(t, s))
		t.Used = sat(t.Used, s.Bytes)
		byID[s.ID] = t
	}
	return owed
}

func holds(hs []Holder, id string) bool {
	for _, h := range hs {
		if h.ID == id {
			return true
		}
	}
	return false
}

func sub(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}
