package borrow

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func always(string, Proc) (bool, string) { return true, "" }

func pids(ts []Take) []int {
	var out []int
	for _, t := range ts {
		out = append(out, t.PID)
	}
	return out
}

func TestReclaimTakesFewestProcessesOfTheMostOverBorrower(t *testing.T) {
	owner := Tenant{ID: "owner", Request: 16 * gib, Limit: 16 * gib, Used: 4 * gib}
	// 80 GiB GPU: owner 4, a 36 (request 8: 28 over), b 30 (request 20: 10 over)
	a := Holder{Tenant: Tenant{ID: "a", Request: 8 * gib, Limit: 40 * gib, Used: 36 * gib},
		Procs: []Proc{{PID: 11, Used: 6 * gib}, {PID: 12, Used: 20 * gib}, {PID: 13, Used: 10 * gib}}}
	b := Holder{Tenant: Tenant{ID: "b", Request: 20 * gib, Limit: 40 * gib, Used: 30 * gib},
		Procs: []Proc{{PID: 21, Used: 30 * gib}}}
	hs := []Holder{b, a, {Tenant: owner}}
	// free: 80 - 70 = 10; the owner asks 12: 2 missing -> a's largest
	takes, why, ok := Reclaim(80*gib, 0, owner, 12*gib, hs, always)
	if !ok || !reflect.DeepEqual(pids(takes), []int{12}) || !takes[0].Suspend || takes[0].Bytes != 20*gib {
		t.Fatalf("2 GiB missing: %+v (%s); want a's 20 GiB process 12 suspended", takes, why)
	}
	// the GPU holds what is asked: nothing is taken
	if takes, _, ok := Reclaim(80*gib, 0, owner, 10*gib, hs, always); ok || takes != nil {
		t.Errorf("10 GiB asked, 10 free: %+v; want nothing taken", takes)
	}
	// an owner with a larger request, 21 GiB missing: a's 20, then a's 10
	// (a still over its request after the first)
	big := Tenant{ID: "owner", Request: 40 * gib, Limit: 40 * gib, Used: 4 * gib}
	takes, _, _ = Reclaim(80*gib, 0, big, 31*gib, hs, always)
	if !reflect.DeepEqual(pids(takes), []int{12, 13}) {
		t.Errorf("21 GiB missing: %v; want a's 12 then 13", pids(takes))
	}
	// 36 missing: a gives 12 and 13 and is then at 6, under its request 8,
	// so its 11 stays and b gives the rest
	takes, _, _ = Reclaim(80*gib, 10*gib, big, 36*gib, hs, always)
	if !reflect.DeepEqual(pids(takes), []int{12, 13, 21}) {
		t.Errorf("36 GiB missing: %v; want 12, 13, then b's 21", pids(takes))
	}
}

// Reclaim and Victim take from the lowest priority first, however much
// more a higher one borrows.
func TestReclaimTakesTheLowestPriorityFirst(t *testing.T) {
	owner := Tenant{ID: "owner", Request: 16 * gib, Limit: 16 * gib, Used: 4 * gib, Rank: 1}
	a := Holder{Tenant: Tenant{ID: "a", Request: 8 * gib, Limit: 40 * gib, Used: 36 * gib, Rank: 1},
		Procs: []Proc{{PID: 11, Used: 36 * gib}}}
	b := Holder{Tenant: Tenant{ID: "b", Request: 20 * gib, Limit: 40 * gib, Used: 30 * gib, Rank: 0},
		Procs: []Proc{{PID: 21, Used: 30 * gib}}}
	hs := []Holder{a, b, {Tenant: owner}}
	takes, why, ok := Reclaim(80*gib, 0, owner, 12*gib, hs, always)
	if !ok || !reflect.DeepEqual(pids(takes), []int{21}) {
		t.Fatalf("%+v (%s); want the low-priority b's 21, though a borrows more", takes, why)
	}
	if id, pid, _, _ := Victim(owner, 12*gib, hs); id != "b" || pid != 21 {
		t.Errorf("Victim %s %d, want b's 21", id, pid)
	}
	hs[1].Rank = 1 // same priority: the most over its request
	if takes, _, _ := Reclaim(80*gib, 0, owner, 12*gib, hs, always); !reflect.DeepEqual(pids(takes), []int{11}) {
		t.Errorf("same priority: %v, want a's 11 (28 GiB over)", pids(takes))
	}
}

func TestReclaimNeverTouchesATenantAtItsRequest(t *testing.T) {
	owner := Tenant{ID: "owner", Request: 16 * gib, Limit: 16 * gib}
	at := Holder{Tenant: Tenant{ID: "at", Request: 30 * gib, Limit: 40 * gib, Used: 30 * gib}, Procs: []Proc{{PID: 1, Used: 30 * gib}}}
	under := Holder{Tenant: Tenant{ID: "under", Request: 40 * gib, Limit: 40 * gib, Used: 39 * gib}, Procs: []Proc{{PID: 2, Used: 39 * gib}}}
	takes, why, ok := Reclaim(80*gib, 0, owner, 16*gib, []Holder{at, under}, always)
	if ok || len(takes) != 0 || !strings.Contains(why, "no tenant holds more than its request") {
		t.Errorf("only tenants at or under their request: %+v, %q; want nothing taken", takes, why)
	}
	// one byte over: taken
	at.Used++
	at.Procs[0].Used++
	if takes, _, ok := Reclaim(80*gib, 0, owner, 16*gib, []Holder{at, under}, always); !ok || len(takes) != 1 || takes[0].PID != 1 {
		t.Errorf("one byte over its request: %+v; want its process taken", takes)
	}
}

func TestReclaimRefusesAnOwnerPastItsRequest(t *testing.T) {
	owner := Tenant{ID: "owner", Request: 16 * gib, Limit: 32 * gib, Used: 10 * gib}
	b := Holder{Tenant: Tenant{ID: "b", Request: 0, Limit: 80 * gib, Used: 70 * gib}, Procs: []Proc{{PID: 5, Used: 70 * gib}}}
	if takes, why, ok := Reclaim(80*gib, 0, owner, 6*gib+1, []Holder{b}, always); ok || takes != nil || !strings.Contains(why, "past its request") {
		t.Errorf("an owner asking past its request: %+v, %q; want nothing taken", takes, why)
	}
	if _, _, ok := Reclaim(80*gib, 0, owner, 6*gib, []Holder{b}, always); !ok {
		t.Errorf("an owner asking up to its request: nothing taken")
	}
}

func TestReclaimKillsWhatCannotBeSuspendedAndSaysWhy(t *testing.T) {
	owner := Tenant{ID: "owner", Request: 16 * gib, Limit: 16 * gib}
	b := Holder{Tenant: Tenant{ID: "b", Limit: 80 * gib, Used: 70 * gib}, Procs: []Proc{{PID: 5, Used: 40 * gib}, {PID: 6, Used: 30 * gib}}}
	managed := func(_ string, p Proc) (bool, string) {
		if p.PID == 5 {
			return false, "it holds managed memory, which the driver cannot checkpoint"
		}
		return true, ""
	}
	takes, _, ok := Reclaim(80*gib, 0, owner, 16*gib, []Holder{b}, managed)
	if !ok || len(takes) != 1 || takes[0].PID != 5 || takes[0].Suspend || !strings.Contains(takes[0].Why, "managed memory") {
		t.Fatalf("largest process not suspendable: %+v; want it killed with the reason", takes)
	}
}

func TestRestoresOnlyWholeProcessesIntoUnclaimedMemory(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// 80 GiB: owner claims its request 16, b holds 8 at request 8 with 20
	// and 30 suspended, outside 10: 80 - 10 - 16 - 8 = 46 unclaimed
	owner := Tenant{ID: "owner", Request: 16 * gib, Limit: 16 * gib, Used: 16 * gib}
	b := Tenant{ID: "b", Request: 8 * gib, Limit: 60 * gib, Used: 8 * gib}
	sus := []Suspended{{ID: "b", PID: 2, Bytes: 30 * gib, Since: t0.Add(time.Second)}, {ID: "b", PID: 1, Bytes: 20 * gib, Since: t0}}
	got := Restores(80*gib, 10*gib, []Tenant{owner, b}, sus, true)
	if len(got) != 1 || got[0].PID != 1 {
		t.Fatalf("46 GiB unclaimed, 20 then 30 suspended: %+v; want the 20 (suspended first) alone", got)
	}
	// in order: the 30, suspended first, does not fit in 26, so the 20 waits
	sus[0].Since, sus[1].Since = t0, t0.Add(time.Second)
	if got := Restores(80*gib, 30*gib, []Tenant{owner, b}, sus, true); len(got) != 0 {
		t.Errorf("26 unclaimed, the 30 first, in order: %+v; want none", got)
	}
	if got := Restores(80*gib, 30*gib, []Tenant{owner, b}, sus, false); len(got) != 1 || got[0].PID != 1 {
		t.Errorf("26 unclaimed, the 30 first, not in order: %+v; want the 20", got)
	}
	// exactly the room: restored; a byte short: not
	exact := []Suspended{{ID: "b", PID: 1, Bytes: 46 * gib, Since: t0}}
	if got := Restores(80*gib, 10*gib, []Tenant{owner, b}, exact, true); len(got) != 1 {
		t.Errorf("46 GiB into 46 unclaimed: %+v; want restored", got)
	}
	exact[0].Bytes++
	if got := Restores(80*gib, 10*gib, []Tenant{owner, b}, exact, true); len(got) != 0 {
		t.Errorf("46 GiB + 1 byte into 46 unclaimed: %+v; want not restored (a restore without room is final)", got)
	}
	// a tenant below its request restores into its own claim first
	low := Tenant{ID: "low", Request: 30 * gib, Limit: 60 * gib, Used: 5 * gib}
	in := []Suspended{{ID: "low", PID: 9, Bytes: 25 * gib, Since: t0}}
	if got := Restores(80*gib, 0, []Tenant{owner, low}, in, true); len(got) != 1 {
		t.Errorf("25 GiB of a tenant holding 5 under request 30: %+v; want restored within its own claim", got)
	}
	if got := Restores(80*gib, 0, []Tenant{owner}, in, true); len(got) != 0 {
		t.Errorf("a suspended process of a tenant that is gone: %+v; want not restored", got)
	}
}

func TestOwedKeepsRestoresAheadOfNewBorrowing(t *testing.T) {
	b := Tenant{ID: "b", Request: 8 * gib, Limit: 60 * gib, Used: 2 * gib}
	sus := []Suspended{{ID: "b", PID: 1, Bytes: 20 * gib}, {ID: "b", PID: 2, Bytes: 10 * gib}}
	// b's claim is its request 8 now; with both back it holds 32: 24 owed
	if got := Owed([]Tenant{b}, sus); got != 24*gib {
		t.Errorf("owed %d GiB, want 24", got/gib)
	}
	// lending sees it as taken: a borrower beside b cannot grow into it
	c := Tenant{ID: "c", Limit: 80 * gib, Used: 10 * gib}
	ceil := FreeCeilings(80*gib, Owed([]Tenant{b}, sus), []Tenant{b, c})
	if ceil[1] != 80*gib-24*gib-2*gib {
		t.Errorf("borrower's ceiling %d GiB beside 24 GiB owed, want %d", ceil[1]/gib, (80*gib-24*gib-2*gib)/gib)
	}
}
