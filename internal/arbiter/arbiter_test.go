package arbiter

import (
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

func shares(g []Grant) []int {
	out := make([]int, len(g))
	for i, x := range g {
		out[i] = x.Share
	}
	return out
}

func eq(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestArbitrate(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   []Tenant
		want []int // basis points
	}{
		{"request only, alone: the idle GPU used", []Tenant{{ID: "a", Request: 30, Limit: 100, Busy: true}}, []int{10000}},
		{"request and limit, alone: held to the limit", []Tenant{{ID: "a", Request: 30, Limit: 60, Busy: true}}, []int{6000}},
		{"request = limit: today's cap", []Tenant{{ID: "a", Request: 30, Limit: 30, Busy: true}, {ID: "b", Request: 70, Limit: 70, Busy: true}}, []int{3000, 7000}},
		{"two busy: the rest by requests", []Tenant{{ID: "a", Request: 30, Limit: 100, Busy: true}, {ID: "b", Request: 50, Limit: 100, Busy: true}}, []int{3750, 6250}},
		{"three busy, one capped", []Tenant{{ID: "a", Request: 20, Limit: 25, Busy: true}, {ID: "b", Request: 20, Limit: 100, Busy: true}, {ID: "c", Request: 40, Limit: 100, Busy: true}},
			[]int{2500, 2500, 5000}},
		{"idle neighbour: its request kept, unused time to the busy one", []Tenant{{ID: "a", Request: 30, Limit: 100, Busy: true}, {ID: "b", Request: 70, Limit: 100, Used: 0}}, []int{10000, 7000}},
		{"light neighbour: the busy one has the GPU, the light one's launches time-slice with it", []Tenant{{ID: "a", Request: 70, Limit: 100, Busy: true}, {ID: "b", Request: 30, Limit: 100, Used: 300}}, []int{10000, 3000}},
		{"light neighbour beside two busy ones", []Tenant{{ID: "a", Request: 30, Limit: 100, Busy: true}, {ID: "b", Request: 10, Limit: 100, Used: 800}, {ID: "c", Request: 50, Limit: 100, Busy: true}}, []int{3750, 1000, 6250}},
		{"unlimited neighbour gets only surplus", []Tenant{{ID: "a", Request: 30, Limit: 60, Busy: true}, {ID: "b", Request: 0, Limit: 100, Busy: true}}, []int{6000, 4000}},
		{"unlimited neighbour beside a request without cap", []Tenant{{ID: "a", Request: 30, Limit: 100, Busy: true}, {ID: "b", Request: 0, Limit: 100, Busy: true}}, []int{10000, 1}},
		{"only request-0 tenants: equal", []Tenant{{ID: "a", Limit: 100, Busy: true}, {ID: "b", Limit: 100, Busy: true}}, []int{5000, 5000}},
		{"overcommitted by limits: scaled", []Tenant{{ID: "a", Request: 60, Limit: 60, Busy: true}, {ID: "b", Request: 90, Limit: 90, Busy: true}}, []int{4000, 6000}},
		{"idle request-0 tenant: what it would get busy, at once when it wakes", []Tenant{{ID: "a", Limit: 100, Busy: true}, {ID: "b", Limit: 100}}, []int{10000, 5000}},
		{"idle request-0 beside a request without cap: the surplus goes by requests first", []Tenant{{ID: "a", Request: 30, Limit: 100, Busy: true}, {ID: "b", Limit: 100}}, []int{10000, 1}},
		{"the surplus to the higher priority first", []Tenant{{ID: "a", Request: 30, Limit: 100, Busy: true}, {ID: "b", Limit: 100, Busy: true, Rank: 1}}, []int{3000, 7000}},
		{"a higher priority idle at request 0: the surplus it would get", []Tenant{{ID: "a", Request: 30, Limit: 100, Busy: true}, {ID: "b", Limit: 100, Rank: 1}}, []int{10000, 7000}},
		{"a higher priority takes no request: held to its limit, the rest to the lower", []Tenant{{ID: "a", Request: 30, Limit: 100, Busy: true, Rank: -1}, {ID: "b", Request: 20, Limit: 50, Busy: true, Rank: 1}, {ID: "c", Limit: 100, Busy: true}},
			[]int{3000, 5000, 2000}},
		{"all at their limits: the rest idles", []Tenant{{ID: "a", Request: 10, Limit: 20, Busy: true}, {ID: "b", Request: 10, Limit: 30, Busy: true}}, []int{2000, 3000}},
	} {
		got := shares(Arbitrate(tc.ts))
		if !eq(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Busy tenants' slots lie end to end; a tenant that goes idle releases its
// time at the next round, and has its request back at the round after it
// wakes (a round is one period of `vgpu node`).
func TestIdleAndWake(t *testing.T) {
	a := Tenant{ID: "a", Request: 30, Limit: 100, Busy: true}
	b := Tenant{ID: "b", Request: 70, Limit: 100, Busy: true}
	g := Arbitrate([]Tenant{a, b})
	if g[0].Share != 3000 || g[1].Share != 7000 || g[0].Phase != 0 || g[1].Phase != 3000 {
		t.Fatalf("both busy: %+v", g)
	}
	b.Busy, b.Used = false, 0 // b sleeps
	g = Arbitrate([]Tenant{a, b})
	if g[0].Share != 10000 || g[1].Share != 7000 {
		t.Fatalf("b idle: %+v", g)
	}
	b.Busy = true // b wakes: waited in the period it woke
	g = Arbitrate([]Tenant{a, b})
	if g[0].Share != 3000 || g[1].Share != 7000 {
		t.Fatalf("b awake: %+v", g)
	}
}

func TestAdmit(t *testing.T) {
	held := []Held{{ID: "train", Request: 60, Explicit: true}, {ID: "old", Request: 50}, {ID: "serve", Request: 30, Explicit: true}}
	if err := Admit("GPU-1", 10, true, held); err != nil {
		t.Errorf("fits: %v", err)
	}
	err := Admit("GPU-1", 20, true, held)
	if err == nil || !strings.Contains(err.Error(), "GPU GPU-1") || !strings.Contains(err.Error(), "110%") || !strings.Contains(err.Error(), "train 60%, serve 30%") {
		t.Errorf("overcommit: %v", err)
	}
	if err := Admit("GPU-1", 90, false, held); err != nil {
		t.Errorf("a limit-only tenant is not refused: %v", err)
	}
	if s := Static(20, held); s != 20*10000/160 {
		t.Errorf("static share scaled: %d", s)
	}
	if s := Static(30, nil); s != 3000 {
		t.Errorf("static share alone: %d", s)
	}
	if s := Static(0, []Held{{ID: "a", Request: 30, Explicit: true}}); s != 7000 {
		t.Errorf("static share of request 0: %d", s)
	}
}

// Whatever the inputs, no busy tenant gets less than its (scaled) request or
// more than its limit, and the busy shares never sum past the GPU.
func FuzzArbitrate(f *testing.F) {
	f.Add([]byte{30, 100, 1, 50, 100, 1, 0, 100, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var ts []Tenant
		for i := 0; i+2 < len(b) && len(ts) < 8; i += 3 {
			lim := int(b[i+1])%100 + 1
			ts = append(ts, Tenant{ID: string(rune('a' + len(ts))), Limit: lim, Request: int(b[i]) % (lim + 1), Busy: b[i+2]&1 == 1, Used: int(b[i+2]) * 40})
		}
		g := Arbitrate(ts)
		eff, _ := Requests(ts)
		sum := 0
		for i, x := range g {
			if x.Share < 1 || x.Share > ts[i].Limit*100 || x.Phase < 0 || x.Phase >= contract.ShareFull {
				t.Fatalf("%+v: %+v", ts, g)
			}
			if ts[i].Busy {
				if x.Share < eff[i] {
					t.Fatalf("busy %d below its request: %+v: %+v", i, ts, g)
				}
				sum += x.Share
			}
		}
		if sum > contract.ShareFull+len(ts) {
			t.Fatalf("busy shares sum to %d: %+v: %+v", sum, ts, g)
		}
	})
}

// The rounds around a wake as `vgpu node` saw them on the H200: a request-30
// tenant alone with the whole GPU while a request-70 one sleeps; the 70 wakes
// and, both running unpaced, neither waits nor uses 90 % of its grant, so the
// round after the wake may see either flag set; the round after that both
// busy. Whatever the flags, a busy tenant's slot holds the place it has once
// both are busy (it only grows or shrinks around it), so no round moves it
// onto its neighbour's; busy slots never overlap. Both ID orders.
func TestWakeKeepsSlots(t *testing.T) {
	overlap := func(a, b Grant) bool {
		in := func(x, p, w int) bool { return (x-p+contract.ShareFull)%contract.ShareFull < w }
		return in(a.Phase, b.Phase, b.Share) || in(b.Phase, a.Phase, a.Share)
	}
	holds := func(s, f Grant) bool {
		return (f.Phase-s.Phase+contract.ShareFull)%contract.ShareFull+f.Share <= s.Share
	}
	for _, ids := range [][2]string{{"a30", "b70"}, {"b30", "a70"}} {
		ts := func(busy30, busy70 bool, used70 int) []Tenant {
			t30 := Tenant{ID: ids[0], Request: 30, Limit: 100, Busy: busy30, Used: 4500}
			t70 := Tenant{ID: ids[1], Request: 70, Limit: 100, Busy: busy70, Used: used70}
			if ids[0] < ids[1] {
				return []Tenant{t30, t70}
			}
			return []Tenant{t70, t30}
		}
		settled := Arbitrate(ts(true, true, 7000))
		if overlap(settled[0], settled[1]) || settled[0].Share+settled[1].Share != contract.ShareFull {
			t.Fatalf("%v both busy: %+v", ids, settled)
		}
		for _, round := range []struct {
			name           string
			busy30, busy70 bool
			used70         int
		}{
			{"the 70 asleep", true, false, 0},
			{"woke, only the 30 seen busy", true, false, 4500},
			{"woke, only the 70 seen busy", false, true, 4500},
			{"woke, neither seen busy", false, false, 4500},
			{"both busy", true, true, 7000},
		} {
			in := ts(round.busy30, round.busy70, round.used70)
			g := Arbitrate(in)
			if in[0].Busy && in[1].Busy && overlap(g[0], g[1]) {
				t.Errorf("%v %s: busy slots overlap: %+v", ids, round.name, g)
			}
			for k := range g {
				if in[k].Busy && g[k].Share < contract.ShareFull && !holds(g[k], settled[k]) {
					t.Errorf("%v %s: %s's slot %+v leaves its place %+v", ids, round.name, in[k].ID, g[k], settled[k])
				}
			}
		}
	}
}
