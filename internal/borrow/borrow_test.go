package borrow

import (
	"strings"
	"testing"
)

const gib = uint64(1) << 30

func TestAdmit(t *testing.T) {
	held := []Held{{ID: "a", Request: 40 * gib}, {ID: "b", Request: 0}, {ID: "c", Request: 30 * gib}}
	if err := Admit("GPU-0", 80*gib, 10*gib, held); err != nil {
		t.Fatalf("40+30+10 of 80: %v", err)
	}
	err := Admit("GPU-0", 80*gib, 11*gib, held)
	if err == nil {
		t.Fatal("40+30+11 of 80 admitted")
	}
	for _, want := range []string{"GPU-0", "81 GiB", "11 GiB", "80 GiB", "a 40 GiB", "c 30 GiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "b ") {
		t.Errorf("error %q names the limit-only tenant", err)
	}
	if err := Admit("GPU-0", 80*gib, 0, held); err != nil {
		t.Errorf("a limit-only tenant refused: %v", err)
	}
	if err := Admit("GPU-0", 0, 1<<50, held); err != nil {
		t.Errorf("unknown total refused: %v", err)
	}
}

func TestCeilings(t *testing.T) {
	for _, c := range []struct {
		name           string
		total, outside uint64
		ts             []Tenant
		want           []uint64
	}{
		// The H200 case: 40 GiB left by a process outside vgpu, two tenants
		// requesting 16 GiB up to 32: the one at its request takes the 8 left.
		{"one borrower", 140 * gib, 100 * gib,
			[]Tenant{{ID: "a", Request: 16 * gib, Limit: 32 * gib, Used: 16 * gib}, {ID: "b", Request: 16 * gib, Limit: 32 * gib}},
			[]uint64{24 * gib, 16 * gib}},
		{"nobody at its request: all share", 140 * gib, 100 * gib,
			[]Tenant{{ID: "a", Request: 16 * gib, Limit: 32 * gib, Used: 1 * gib}, {ID: "b", Request: 16 * gib, Limit: 32 * gib}},
			[]uint64{20 * gib, 20 * gib}},
		{"two borrowers split", 100 * gib, 0,
			[]Tenant{{ID: "a", Request: 20 * gib, Limit: 100 * gib, Used: 30 * gib}, {ID: "b", Request: 20 * gib, Limit: 100 * gib, Used: 20 * gib}, {ID: "c", Request: 20 * gib, Limit: 20 * gib}},
			[]uint64{45 * gib, 35 * gib, 20 * gib}},
		{"a small headroom leaves the rest to the other", 100 * gib, 0,
			[]Tenant{{ID: "a", Request: 20 * gib, Limit: 22 * gib, Used: 20 * gib}, {ID: "b", Request: 20 * gib, Limit: 100 * gib, Used: 20 * gib}},
			[]uint64{22 * gib, 78 * gib}},
		{"a borrower above its ceiling keeps what it holds, nothing more", 100 * gib, 0,
			[]Tenant{{ID: "a", Request: 10 * gib, Limit: 100 * gib, Used: 70 * gib}, {ID: "b", Request: 40 * gib, Limit: 100 * gib, Used: 0}},
			[]uint64{70 * gib, 40 * gib}},
		{"outside holds everything", 100 * gib, 100 * gib,
			[]Tenant{{ID: "a", Request: 10 * gib, Limit: 50 * gib, Used: 10 * gib}},
			[]uint64{10 * gib}},
	} {
		got := Ceilings(c.total, c.outside, c.ts)
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: tenant %s ceiling %s, want %s", c.name, c.ts[i].ID, Size(got[i]), Size(c.want[i]))
			}
		}
	}
}

// The invariant borrowing rests on, over many cases: the ceilings of the
// tenants, with the others' claims, never pass what the GPU has beside the
// processes outside vgpu; each ceiling is at least the tenant's claim and
// never above its limit unless it already holds more.
func TestCeilingsInvariant(t *testing.T) {
	x := uint64(88172645463325252)
	rnd := func(n uint64) uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x % n }
	for k := 0; k < 20000; k++ {
		total := (1 + rnd(160)) * gib
		outside := rnd(total/gib+1) * gib / 2
		n := 1 + int(rnd(5))
		ts := make([]Tenant, n)
		var reqs uint64
		for i := range ts {
			lim := (1 + rnd(total/gib)) * gib
			req := rnd(lim/gib+1) * gib
			if reqs+req > total {
				req = 0
			}
			reqs += req
			ts[i] = Tenant{ID: string(rune('a' + i)), Request: req, Limit: lim, Used: rnd(lim/gib+2) * gib}
		}
		got := Ceilings(total, outside, ts)
		var claims, borrowed uint64
		for i, tn := range ts {
			claims += tn.Claim()
			if got[i] < tn.Claim() {
				t.Fatalf("case %d: tenant %d ceiling %d below its claim %d", k, i, got[i], tn.Claim())
			}
			if got[i] > max(tn.Limit, tn.Used) {
				t.Fatalf("case %d: tenant %d ceiling %d above its limit %d", k, i, got[i], tn.Limit)
			}
			borrowed += got[i] - tn.Claim()
		}
		if borrowed > 0 && outside+claims+borrowed > total {
			t.Fatalf("case %d: outside %d + claims %d + borrowed %d > total %d (%+v -> %v)", k, outside, claims, borrowed, total, ts, got)
		}
	}
}
