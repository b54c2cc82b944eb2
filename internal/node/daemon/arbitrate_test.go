package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// region writes what a tenant's library publishes: its busy time and when a
// launch last waited (layout 4's fields).
func region(t *testing.T, stateDir, id string, busy, want uint64) {
	h := contract.NewRegionHeader(contract.RegionVersion)
	h.Compute[0].BusyNs, h.WantNs[0] = busy, want
	b := contract.EncodeRegion(h, nil)
	if err := os.WriteFile(filepath.Join(stateDir, id, config.StateShared, contract.RegionFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func live(t *testing.T, stateDir, id string) (share, phase int, stamp uint64) {
	g, err := arbiter.Read(filepath.Join(stateDir, id, config.StateHost, contract.ShareFile))
	if err != nil {
		t.Fatal(err)
	}
	share, phase = arbiter.Unword(g.Live[0])
	return share, phase, g.Stamp
}

// vgpu node arbitrates each GPU once a period from what the tenants' regions
// say, and publishes the grants in their grant files: both busy, 37.5 :
// 62.5 by their requests 30 and 50; the 50 idle, the 30 gets the GPU at the
// next period; the 50 waking, both have their requests' shares back at the
// period after. The stamp moves every round.
func TestNodeArbitrates(t *testing.T) {
	dir := t.TempDir()
	r30, r50 := 30, 50
	for _, c := range []struct {
		id  string
		req *int
	}{{"a", &r30}, {"b", &r50}} {
		q := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared",
			Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: uuid}, Compute: 100, ComputeRequest: c.req}}}
		if _, err := state.Create(dir, state.FromQuota(c.id, &q), nil); err != nil {
			t.Fatal(err)
		}
	}
	mono := uint64(1_000_000) * 1e6
	d, err := New(Options{StateDir: dir, ProcRoot: t.TempDir(), CgroupRoot: t.TempDir(), Policy: enforce.DefaultConfig(), Source: &feed{},
		Now: func() time.Time { return time.Unix(0, int64(mono)) }, Mono: func() uint64 { return mono }})
	if err != nil {
		t.Fatal(err)
	}
	period := uint64(contract.DefaultPeriodMS) * 1e6
	busyA, busyB := uint64(0), uint64(0)
	step := func(aBusy, bBusy bool, shareA, shareB int) {
		// one period: each busy tenant used its grant and waited
		sa, _, _ := live(t, dir, "a")
		sb, _, _ := live(t, dir, "b")
		wantA, wantB := uint64(0), uint64(0)
		if aBusy {
			busyA += period * uint64(max(sa, 3000)) / 10000
			wantA = mono + period - 1
		}
		if bBusy {
			busyB += period * uint64(max(sb, 5000)) / 10000
			wantB = mono + period - 1
		}
		mono += period
		region(t, dir, "a", busyA, wantA)
		region(t, dir, "b", busyB, wantB)
		d.Round()
		ga, pa, stamp := live(t, dir, "a")
		gb, pb, _ := live(t, dir, "b")
		if stamp != mono {
			t.Errorf("stamp %d, want %d", stamp, mono)
		}
		if ga != shareA || gb != shareB {
			t.Errorf("a busy %v, b busy %v: grants %d (phase %d), %d (phase %d); want %d, %d", aBusy, bBusy, ga, pa, gb, pb, shareA, shareB)
		}
	}
	step(true, true, 3750, 6250)
	step(true, true, 3750, 6250)
	step(true, false, 10000, 5000) // b idle: released within one period
	step(true, false, 10000, 5000)
	step(true, true, 3750, 6250) // b wakes: its share back within one period
	// between arbitrations the stamp still moves, the grants stay
	mono += period / 5
	d.Round()
	if _, _, stamp := live(t, dir, "a"); stamp != mono {
		t.Errorf("stamp between arbitrations %d, want %d", stamp, mono)
	}
}

// Admission: explicit requests on a GPU fit in 100; the refusal names the
// GPU, the sum and the holders, and creates nothing.
func TestAdmissionRefusesOvercommit(t *testing.T) {
	dir := t.TempDir()
	r := func(v int) *int { return &v }
	mk := func(id string, req *int, lim int) error {
		q := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared",
			Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: uuid}, Compute: lim, ComputeRequest: req}}}
		_, err := state.Create(dir, state.FromQuota(id, &q), nil)
		return err
	}
	if err := mk("a", r(60), 100); err != nil {
		t.Fatal(err)
	}
	if err := mk("limit-only", nil, 70); err != nil {
		t.Fatalf("a limit-only tenant is not refused: %v", err)
	}
	err := mk("b", r(50), 100)
	if err == nil || err.Error() != "GPU "+uuid+": compute requests would sum to 110% with this one's 50% (held: a 60%): requests on a GPU must fit in 100%; lower the request or use another GPU" {
		t.Fatalf("overcommit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b")); !os.IsNotExist(err) {
		t.Errorf("refused tenant's state exists: %v", err)
	}
	// scaled: 60 + 70 = 130 at admission; a's static share stays what it got
	g, _ := arbiter.Read(filepath.Join(dir, "limit-only", config.StateHost, contract.ShareFile))
	if s, _ := arbiter.Unword(g.Static[0]); s != 70*10000/130 {
		t.Errorf("limit-only tenant's admission share %d, want %d (scaled)", s, 70*10000/130)
	}
	// a tenant with no compute setting beside requests: request 0
	if err := mk("plain", nil, 100); err != nil {
		t.Fatal(err)
	}
	rec, _ := state.Read(dir, "plain")
	if q := quota.Render(rec); q.Devices[0].ComputeRequest == nil || *q.Devices[0].ComputeRequest != 0 || !q.Devices[0].Paced() {
		t.Errorf("a tenant with no compute setting beside requests: %+v", q.Devices[0])
	}
}

// Enforcement judges a bypass against the grant: on a GPU where a tenant
// whose region has shown work for the whole window gets less than its
// request - 10 points by the node's own measure, each other tenant is held
// to the largest grant it had in the window (not its limit), for as long as
// that tenant's work goes on; with no starved neighbour, nothing changes.
func TestJudgedByGrants(t *testing.T) {
	const s = uint64(1e9)
	now := 100 * s
	pair := func(demandSince uint64) *arbitration {
		return &arbitration{tenants: map[string]*pacedTenant{
			"victim/0": {id: "victim", gpu: uuid, request: 50, demandSince: demandSince, grants: []grantAt{{now - s, 5000}}},
			"bypass/0": {id: "bypass", gpu: uuid, request: 50, grants: []grantAt{{now - 15*s, 10000}, {now - 5*s, 5000}, {now - s, 5000}}},
			"other/0":  {id: "other", gpu: "GPU-other", request: 10, grants: []grantAt{{now - s, 1000}}},
		}}
	}
	shares := func(victim float64) map[[2]string]float64 {
		return map[[2]string]float64{{"victim", uuid}: victim, {"bypass", uuid}: 80}
	}
	a := pair(now - 20*s)
	got := a.judged(shares(20), uint64(10*s), 10, now)
	if len(got) != 1 || got[[2]string{"bypass", uuid}] != 50 {
		t.Errorf("a starved neighbour: judged %v, want bypass held to 50", got)
	}
	if len(a.tenants["bypass/0"].grants) != 2 {
		t.Errorf("grants older than the window kept: %v", a.tenants["bypass/0"].grants)
	}
	// held on while the victim's work goes on, though it has its share back
	if got := a.judged(shares(55), uint64(10*s), 10, now+s); len(got) != 1 {
		t.Errorf("the victim back at 55 in the same stretch of work: judged %v, want bypass still held", got)
	}
	a.tenants["victim/0"].demandSince = 0 // its work stopped
	if got := a.judged(shares(20), uint64(10*s), 10, now+2*s); len(got) != 0 {
		t.Errorf("the victim idle: judged %v", got)
	}
	// both sides of the bound, request 50 - 10
	if got := pair(now-20*s).judged(shares(40), uint64(10*s), 10, now); len(got) != 0 {
		t.Errorf("victim at 40 (request - 10): judged %v", got)
	}
	if got := pair(now-20*s).judged(shares(39.9), uint64(10*s), 10, now); len(got) != 1 {
		t.Errorf("victim at 39.9: judged %v, want bypass held", got)
	}
	// and of the window: working for less than it, its share still lags
	if got := pair(now-10*s+1).judged(shares(20), uint64(10*s), 10, now); len(got) != 0 {
		t.Errorf("a neighbour working for less than the window: judged %v", got)
	}
	if got := pair(now-10*s).judged(shares(20), uint64(10*s), 10, now); len(got) != 1 {
		t.Errorf("a neighbour working for the window: judged %v", got)
	}
}

// A request-30 and a request-70 tenant (limits 100) on the node's 100 ms
// rounds, their libraries simulated in 10 ms steps: a busy tenant runs in its
// slot (device time) and waits outside it (want), one at the whole GPU runs
// throughout; asleep it does neither. The 70 sleeps and wakes at every offset
// into a period: the 30 has the whole GPU within one period of the sleep, and
// both have their requests back within one period of the wake; while nothing
// changes, no grant moves.
func TestSleepAndWakeWithinAPeriod(t *testing.T) {
	const ms = uint64(1e6)
	period := uint64(contract.DefaultPeriodMS) * ms
	for _, off := range []uint64{0, 10, 90, 100, 150, 250, 330, 410, 490} {
		dir := t.TempDir()
		r30, r70 := 30, 70
		for _, c := range []struct {
			id  string
			req *int
		}{{"a", &r30}, {"b", &r70}} {
			q := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared",
				Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: uuid}, Compute: 100, ComputeRequest: c.req}}}
			if _, err := state.Create(dir, state.FromQuota(c.id, &q), nil); err != nil {
				t.Fatal(err)
			}
		}
		mono := uint64(1_000_000) * 1e9 // a multiple of the period
		d, err := New(Options{StateDir: dir, ProcRoot: t.TempDir(), CgroupRoot: t.TempDir(), Policy: enforce.DefaultConfig(), Source: &feed{},
			Now: func() time.Time { return time.Unix(0, int64(mono)) }, Mono: func() uint64 { return mono }})
		if err != nil {
			t.Fatal(err)
		}
		grant := func(id string) (share, phase int) {
			g, err := arbiter.Read(filepath.Join(dir, id, config.StateHost, contract.ShareFile))
			if err != nil {
				t.Fatal(err)
			}
			share, phase, _, _ = g.Holds(0, mono)
			return share, phase
		}
		type lib struct {
			id         string
			busy, want uint64
		}
		libs := []*lib{{id: "a"}, {id: "b"}}
		awake := func(l *lib, now uint64) bool {
			return l.id == "a" || now < sleepAt(off, period) || now >= wakeAt(off, period)
		}
		// run simulates until end; at each round, check(now) on the grants
		run := func(end uint64, check func(now uint64, a, b int)) {
			for mono < end {
				for k := 0; k < 10; k++ {
					for _, l := range libs {
						if !awake(l, mono) {
							continue
						}
						share, phase := grant(l.id)
						pos := (mono + period - uint64(phase)*period/contract.ShareFull) % period
						if share >= contract.ShareFull || pos < uint64(share)*period/contract.ShareFull {
							l.busy += 10 * ms
						} else {
							l.want = mono
						}
					}
					mono += 10 * ms
				}
				for _, l := range libs {
					region(t, dir, l.id, l.busy, l.want)
				}
				d.Round()
				sa, _ := grant("a")
				sb, _ := grant("b")
				check(mono, sa, sb)
			}
		}
		base := mono
		settled := base + 4*period
		run(sleepAt(off, period), func(now uint64, a, b int) {
			if now > settled && now <= sleepAt(off, period) && (a != 3000 || b != 7000) {
				t.Errorf("offset %d ms: both busy, at %d ms: grants %d, %d; want 3000, 7000", off, (now-base)/ms, a, b)
			}
		})
		released := uint64(0)
		run(wakeAt(off, period), func(now uint64, a, b int) {
			if a == contract.ShareFull && released == 0 {
				released = now
			}
			if released != 0 && now <= wakeAt(off, period) && a != contract.ShareFull {
				t.Errorf("offset %d ms: the 70 asleep, at %d ms: the 30's grant %d after it had the whole GPU", off, (now-base)/ms, a)
			}
		})
		if released == 0 || released-sleepAt(off, period) > period {
			t.Errorf("offset %d ms: the 70 slept at %d ms; the 30 had the whole GPU at %d ms (within one period: %d)", off,
				(sleepAt(off, period)-base)/ms, (released-base)/ms, (sleepAt(off, period)+period-base)/ms)
		}
		back := uint64(0)
		run(wakeAt(off, period)+4*period, func(now uint64, a, b int) {
			if a == 3000 && b == 7000 && back == 0 {
				back = now
			}
			if back != 0 && (a != 3000 || b != 7000) {
				t.Errorf("offset %d ms: both busy again, at %d ms: grants %d, %d", off, (now-base)/ms, a, b)
			}
		})
		if back == 0 || back-wakeAt(off, period) > period {
			t.Errorf("offset %d ms: the 70 woke at %d ms; requests back at %d ms (within one period: %d)", off,
				(wakeAt(off, period)-base)/ms, (back-base)/ms, (wakeAt(off, period)+period-base)/ms)
		}
	}
}

// The simulated 70's sleep: from 6 periods plus off ms after the start, for 6
// periods (CLOCK_MONOTONIC ns; the start is 1e15).
func sleepAt(off, period uint64) uint64 { return uint64(1_000_000)*1e9 + 6*period + off*1e6 }
func wakeAt(off, period uint64) uint64  { return sleepAt(off, period) + 6*period + 37e6 }
