package borrow

import (
	"strings"
	"testing"
)

func TestVictim(t *testing.T) {
	owner := Tenant{ID: "owner", Request: 16 * gib, Limit: 32 * gib, Used: 10 * gib}
	hs := []Holder{
		{Tenant: owner, Procs: []Proc{{PID: 1, Used: 10 * gib}}},
		{Tenant: Tenant{ID: "a", Request: 16 * gib, Limit: 32 * gib, Used: 20 * gib}, Procs: []Proc{{PID: 11, Used: 8 * gib}, {PID: 12, Used: 12 * gib}}},
		{Tenant: Tenant{ID: "b", Request: 4 * gib, Limit: 32 * gib, Used: 12 * gib}, Procs: []Proc{{PID: 21, Used: 6 * gib}, {PID: 22, Used: 6 * gib}}},
		{Tenant: Tenant{ID: "honest", Request: 8 * gib, Limit: 8 * gib, Used: 8 * gib}, Procs: []Proc{{PID: 31, Used: 8 * gib}}},
	}
	// b is 8 GiB over its request, a only 4: b's largest (a tie: the lower pid)
	id, pid, why, ok := Victim(owner, 6*gib, hs)
	if !ok || id != "b" || pid != 21 {
		t.Fatalf("victim %s pid %d (%v), want b's pid 21", id, pid, ok)
	}
	for _, w := range []string{"b borrows 8 GiB above its request 4 GiB", "owner needs 6 GiB under its request 16 GiB"} {
		if !strings.Contains(why, w) {
			t.Errorf("why %q does not say %q", why, w)
		}
	}
	// a claim past the owner's request, by the host's figures: nothing killed
	if _, _, why, ok := Victim(owner, 7*gib, hs); ok || !strings.Contains(why, "past its request") {
		t.Errorf("a claim past the request: ok %v, %q", ok, why)
	}
	// nobody above its request (the honest one at it is never touched)
	if _, _, _, ok := Victim(owner, 1*gib, []Holder{hs[0], hs[3]}); ok {
		t.Error("a victim chosen with no tenant over its request")
	}
}

// The H200 case under `free`: 40 GiB beside the process outside vgpu, two
// tenants requesting 16 GiB up to 32: the first may take all 32 while the
// second holds nothing; once it holds 32, the second is still owed its 16
// (its ceiling never falls below the request) though the GPU has only 8.
func TestFreeCeilings(t *testing.T) {
	ts := []Tenant{{ID: "a", Request: 16 * gib, Limit: 32 * gib}, {ID: "b", Request: 16 * gib, Limit: 32 * gib}}
	got := FreeCeilings(140*gib, 100*gib, ts)
	if got[0] != 32*gib || got[1] != 32*gib {
		t.Errorf("idle GPU: ceilings %s, %s; want 32 GiB each", Size(got[0]), Size(got[1]))
	}
	ts[0].Used = 32 * gib
	got = FreeCeilings(140*gib, 100*gib, ts)
	if got[0] != 32*gib || got[1] != 16*gib {
		t.Errorf("a borrowing 16: ceilings %s, %s; want 32 GiB, 16 GiB", Size(got[0]), Size(got[1]))
	}
	ts[1].Used = 4 * gib
	ts[0].Used = 20 * gib
	got = FreeCeilings(140*gib, 100*gib, ts)
	if got[0] != 32*gib || got[1] != 20*gib {
		t.Errorf("16 GiB free: ceilings %s, %s; want 32 GiB, 20 GiB", Size(got[0]), Size(got[1]))
	}
}
