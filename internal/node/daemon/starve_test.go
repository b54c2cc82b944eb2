package daemon

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// computePair is a fake host with two paced tenants on one GPU, limits 100:
// "victim" (request 70, pid 201) and "neighbour" (request 30, pid 301),
// each with its grant file and freezer cgroup; c1 is on another GPU.
type computePair struct {
	h    *host
	d    *Daemon
	f    *feed
	mono uint64
}

func newComputePair(t *testing.T) *computePair {
	h := newHost(t, "device 0 GPU-other memory=1073741824")
	for _, c := range []struct {
		id, req string
		pid     int
	}{{"victim", "70", 201}, {"neighbour", "30", 301}} {
		h.addContainer(c.id, "vgpu-quota 2\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\ndevice 0 "+uuid+" compute=100 compute-request="+c.req+"\n", c.pid)
		// no init pid (the arbitration passes over an entry whose init is
		// gone, and these are not this host's), the cgroup recorded at create
		if err := os.WriteFile(filepath.Join(h.state, c.id, "container.json"), []byte(`{"id":"`+c.id+`","created":"2026-01-01T00:00:00Z","cgroup":"/runc/`+c.id+`","devices":[]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		gpath := filepath.Join(h.state, c.id, "host", contract.ShareFile)
		if err := os.MkdirAll(filepath.Dir(gpath), 0o755); err != nil {
			t.Fatal(err)
		}
		g, _ := arbiter.Encode(make([]uint64, 1))
		if err := os.WriteFile(gpath, g, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := &computePair{h: h, f: &feed{}, mono: uint64(1_000_000) * 1e9}
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: p.f, Log: io.Discard,
		Registry: prometheus.NewRegistry(), Now: func() time.Time { return time.Unix(0, int64(p.mono)) }, Mono: func() uint64 { return p.mono },
		Kill: func(int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	p.d = d
	return p
}

func (p *computePair) frozen(id string) bool {
	b, _ := os.ReadFile(filepath.Join(p.h.cg, "freezer", "runc", id, "freezer.state"))
	return strings.TrimSpace(string(b)) == "FROZEN"
}

// region writes id's region as its library would: its device time so far
// and, when waited, a launch that waited for the pacer now.
func (p *computePair) region(t *testing.T, id string, busy uint64, waited bool) {
	h := contract.NewRegionHeader(contract.RegionVersion)
	h.Compute[0].BusyNs = busy
	if waited {
		h.WantNs[0] = p.mono
	}
	if err := os.WriteFile(filepath.Join(p.h.state, id, "shared", contract.RegionFile), contract.EncodeRegion(h, nil), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (p *computePair) share(id string) float64 {
	for _, sh := range p.d.policy.Shares() {
		if sh.Container == id && sh.GPU == uuid {
			return sh.Percent
		}
	}
	return -1
}

// A request-70 tenant beside a request-30 one that goes around its pacer
// (the real driver by path: no region, its kernels time-slice with the
// victim's, 50 : 50 on the device): the victim's pacer never waits (its
// grant is its request and contention does not make it wait), yet the node
// measures it at 50 % from the driver's samples while its region shows work.
// Once it has worked for the policy's window below 70 - 10, the bypass is
// held to its grant (30) and frozen in a duty cycle; the victim's measured
// share is back above 60 within the next window and stays there. Not
// before the window: nothing is frozen while the victim has worked less.
func TestStarvedByBypassHeld(t *testing.T) {
	p := newComputePair(t)
	cfg := enforce.DefaultConfig()
	start := p.mono
	step := uint64(100 * time.Millisecond)
	var victimBusy uint64
	var firstFreeze, backAbove uint64
	for p.mono < start+uint64(30*time.Second) {
		victim, bypass := 50, 50
		if p.frozen("neighbour") {
			victim, bypass = 100, 0
		}
		if p.frozen("victim") {
			t.Fatalf("the victim was frozen at %v", time.Duration(p.mono-start))
		}
		p.f.samples = []nvmlfeed.Sample{{HostPID: 201, GPU: uuid, SMUtil: victim}, {HostPID: 301, GPU: uuid, SMUtil: bypass}}
		victimBusy += step * uint64(victim) / 100
		p.region(t, "victim", victimBusy, false)
		p.mono += step
		p.d.Round()
		if firstFreeze == 0 && p.frozen("neighbour") {
			firstFreeze = p.mono
		}
		if firstFreeze != 0 && backAbove == 0 && p.share("victim") > 70-float64(cfg.ComputeSlack) {
			backAbove = p.mono
		}
		if backAbove != 0 && p.share("victim") <= 70-float64(cfg.ComputeSlack) {
			t.Fatalf("the victim fell back to %.1f%% at %v (above %d since %v)", p.share("victim"), time.Duration(p.mono-start),
				70-cfg.ComputeSlack, time.Duration(backAbove-start))
		}
	}
	if firstFreeze == 0 {
		t.Fatalf("the bypass was never frozen; the victim's share %.1f%%", p.share("victim"))
	}
	if d := time.Duration(firstFreeze - start); d < cfg.Window || d > cfg.Window+time.Second {
		t.Errorf("the bypass first frozen at %v, want once the victim has worked the window %v (and within a second of it)", d, cfg.Window)
	}
	if backAbove == 0 || time.Duration(backAbove-firstFreeze) > cfg.Window {
		t.Errorf("the victim back above %d%% at %v after the first freeze, want within the window %v", 70-cfg.ComputeSlack, time.Duration(backAbove-firstFreeze), cfg.Window)
	}
	evs, _ := events.Read(p.h.state)
	held := false
	for _, e := range evs {
		if e.Container == "victim" {
			t.Errorf("an action on the victim: %+v", e)
		}
		if e.Container == "neighbour" && e.Kind == "freeze" && e.Reason == "compute" && e.Limit == 30 {
			held = true
		}
	}
	if !held {
		t.Errorf("no freeze of the bypass held to its grant 30: %+v", evs)
	}
}

// Honest pairs are never touched: a victim that asks little (20 % of the
// device, its region showing work every round, below its request 70 by the
// node's measure) beside a neighbour that runs within its grants (the whole
// GPU, 80 % used), and both tenants busy at their requests (70 : 30).
func TestStarvedHonestPairUntouched(t *testing.T) {
	for _, lightVictim := range []bool{true, false} {
		p := newComputePair(t)
		start := p.mono
		step := uint64(100 * time.Millisecond)
		var vb, nb uint64
		// past the window and the freeze that would follow a starvation
		until := start + uint64(25*time.Second)
		if !lightVictim {
			until = start + uint64(15*time.Second)
		}
		for p.mono < until {
			g, err := arbiter.Read(filepath.Join(p.h.state, "neighbour", "host", contract.ShareFile))
			if err != nil {
				t.Fatal(err)
			}
			ng, _ := arbiter.Unword(g.Live[0])
			victim := 70
			if lightVictim {
				victim = 20
			}
			neighbour := min(ng/100, 100-victim)
			if g.Live[0] == 0 {
				neighbour = 30
			}
			p.f.samples = []nvmlfeed.Sample{{HostPID: 201, GPU: uuid, SMUtil: victim}, {HostPID: 301, GPU: uuid, SMUtil: neighbour}}
			vb += step * uint64(victim) / 100
			nb += step * uint64(neighbour) / 100
			p.region(t, "victim", vb, !lightVictim)
			p.region(t, "neighbour", nb, true)
			p.mono += step
			p.d.Round()
			if p.frozen("victim") || p.frozen("neighbour") {
				t.Fatalf("light victim %v: frozen at %v (victim %v, neighbour %v)", lightVictim, time.Duration(p.mono-start), p.frozen("victim"), p.frozen("neighbour"))
			}
		}
		if evs, _ := events.Read(p.h.state); len(evs) != 0 {
			t.Errorf("light victim %v: actions on an honest pair: %+v", lightVictim, evs)
		}
	}
}
