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
