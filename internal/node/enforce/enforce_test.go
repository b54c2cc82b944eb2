package enforce

import (
	"testing"
	"time"
)

const (
	gib  = uint64(1) << 30
	gpu0 = "GPU-0"
)

// feed is a driver the test controls: what each process holds and how busy
// it keeps the GPU, read at every tick of an injected clock.
type feed struct {
	t      *testing.T
	p      *Policy
	now    time.Time
	procs  []Proc
	frozen map[string]bool
	conts  []Container
	acts   []Action
}

func newFeed(t *testing.T, conts ...Container) *feed {
	return &feed{t: t, p: New(DefaultConfig()), now: time.Unix(1_700_000_000, 0), frozen: map[string]bool{}, conts: conts}
}

// run ticks every period for d, carrying freeze and thaw out on f.frozen.
func (f *feed) run(d, period time.Duration) []Action {
	var got []Action
	for end := f.now.Add(d); f.now.Before(end); f.now = f.now.Add(period) {
		acts := f.p.Step(Input{Now: f.now, Containers: f.conts, Procs: f.procs, Frozen: f.frozen})
		for _, a := range acts {
			switch a.Kind {
			case Freeze:
				f.frozen[a.Cgroup] = true
			case Thaw:
				f.frozen[a.Cgroup] = false
			case Kill:
				f.kill(a.PID)
			}
		}
		got = append(got, acts...)
	}
	f.acts = append(f.acts, got...)
	return got
}

func (f *feed) kill(pid int) {
	out := f.procs[:0]
	for _, p := range f.procs {
		if p.HostPID != pid {
			out = append(out, p)
		}
	}
	f.procs = out
}

func kinds(acts []Action, k Kind) []Action {
	var out []Action
	for _, a := range acts {
		if a.Kind == k {
			out = append(out, a)
		}
	}
	return out
}

func memLimited(id string, limit uint64) Container {
	return Container{ID: id, Cgroup: "/cg/" + id, Limits: map[string]Limit{gpu0: {MemoryBytes: limit, ComputePct: 100}}}
}

func TestOverLimitPastGraceIsKilled(t *testing.T) {
	f := newFeed(t, memLimited("a", 2*gib), memLimited("b", 2*gib))
	f.procs = []Proc{
		{HostPID: 10, GPU: gpu0, UsedBytes: gib, Container: "a"},
		{HostPID: 11, GPU: gpu0, UsedBytes: 9 * gib, Container: "a"}, // bypassed the library
		{HostPID: 20, GPU: gpu0, UsedBytes: 9 * gib, Container: ""},  // a host process: not ours to judge
		{HostPID: 30, GPU: gpu0, UsedBytes: 2 * gib, Container: "b"},
	}
	cfg := DefaultConfig()
	// Within the grace period: nothing yet.
	if acts := f.run(cfg.Grace-time.Millisecond, 100*time.Millisecond); len(acts) != 0 {
		t.Fatalf("within grace: %v", acts)
	}
	acts := f.run(200*time.Millisecond, 100*time.Millisecond)
	kills := kinds(acts, Kill)
	if len(kills) != 1 || kills[0].PID != 11 || kills[0].Container != "a" || kills[0].Reason != ReasonMemory || kills[0].Used != 10*gib || kills[0].Limit != 2*gib {
		t.Fatalf("kills %+v, want pid 11 of a for memory, 10 GiB > 2 GiB", kills)
	}
	// Back within the limit: nobody else is killed, ever.
	if acts := f.run(time.Minute, 100*time.Millisecond); len(acts) != 0 {
		t.Fatalf("after the kill: %v", acts)
	}
}

func TestKilledProcessStillListedIsNotCountedTwice(t *testing.T) {
	f := newFeed(t, memLimited("a", 2*gib))
	f.procs = []Proc{{HostPID: 10, GPU: gpu0, UsedBytes: gib, Container: "a"}, {HostPID: 11, GPU: gpu0, UsedBytes: 3 * gib, Container: "a"}}
	p, now := f.p, f.now
	var kills []Action
	// the driver keeps listing the killed pid for a while (memory reclaimed late)
	for i := 0; i < 30; i++ {
		kills = append(kills, kinds(p.Step(Input{Now: now, Containers: f.conts, Procs: f.procs}), Kill)...)
		now = now.Add(100 * time.Millisecond)
	}
	if len(kills) != 1 || kills[0].PID != 11 {
		t.Fatalf("kills %+v, want only pid 11 once", kills)
	}
}

func TestHonestUsageNearTheLimitIsNeverKilled(t *testing.T) {
	f := newFeed(t, memLimited("a", 2*gib))
	// several processes filling the limit exactly, then the accounting's
	// small overshoot (within the tolerance), for an hour of samples
	tol := DefaultConfig().Tolerance(2 * gib)
	f.procs = []Proc{
		{HostPID: 10, GPU: gpu0, UsedBytes: gib / 2, Container: "a"},
		{HostPID: 11, GPU: gpu0, UsedBytes: gib / 2, Container: "a"},
		{HostPID: 12, GPU: gpu0, UsedBytes: gib / 2, Container: "a"},
		{HostPID: 13, GPU: gpu0, UsedBytes: gib/2 + tol, Container: "a"},
	}
	if acts := f.run(time.Hour, 100*time.Millisecond); len(acts) != 0 {
		t.Fatalf("honest container: %v", acts[0])
	}
	// a transient overshoot shorter than the grace period: still nothing
	f.procs[3].UsedBytes += 256 << 20
	f.run(DefaultConfig().Grace/2, 100*time.Millisecond)
	f.procs[3].UsedBytes -= 256 << 20
	if acts := f.run(time.Minute, 100*time.Millisecond); len(f.acts) != 0 {
		t.Fatalf("transient overshoot: %v %v", acts, f.acts)
	}
}

func computeLimited(id string, pct int) Container {
	return Container{ID: id, Cgroup: "/cg/" + id, Limits: map[string]Limit{gpu0: {ComputePct: pct}}}
}

// The bypassing process keeps the GPU busy only while it is not frozen
// (a kernel-queue that drains when its CPU side stops).
func (f *feed) bypassUtil(pid int, frozenUtil, thawedUtil int, cg string) {
	for i := range f.procs {
		if f.procs[i].HostPID == pid {
			if f.frozen[cg] {
				f.procs[i].SMUtil = frozenUtil
			} else {
				f.procs[i].SMUtil = thawedUtil
			}
		}
	}
}

func (f *feed) runBypass(d time.Duration, pid, frozenUtil, thawedUtil int, cg string) []Action {
	var got []Action
	for end := f.now.Add(d); f.now.Before(end); {
		f.bypassUtil(pid, frozenUtil, thawedUtil, cg)
		got = append(got, f.run(100*time.Millisecond, 100*time.Millisecond)...)
	}
	return got
}

func TestBypassingShareIsFrozenThenThawed(t *testing.T) {
	f := newFeed(t, computeLimited("a", 25))
	f.procs = []Proc{{HostPID: 10, GPU: gpu0, Container: "a"}}
	// frozen, its kernels stop: the duty cycle holds it
	acts := f.runBypass(2*time.Minute, 10, 0, 97, "/cg/a")
	if len(kinds(acts, Freeze)) == 0 || len(kinds(acts, Thaw)) == 0 {
		t.Fatalf("no freeze/thaw duty cycle: %v", acts)
	}
	if k := kinds(acts, Kill); len(k) != 0 {
		t.Fatalf("killed although freezing held it: %v", k)
	}
	// held: the share over the last windows is within limit + slack
	avg, _ := f.p.average(key{"a", gpu0})
	if avg > 25+10 {
		t.Fatalf("share under the duty cycle %.0f%%, want <= 35%%", avg)
	}
	// it stops bypassing: thawed for good
	acts = f.runBypass(time.Minute, 10, 0, 20, "/cg/a")
	if f.frozen["/cg/a"] || f.p.FrozenByUs("a") {
		t.Fatalf("still frozen after the share fell back: %v", acts)
	}
	if len(f.p.throttled) != 0 {
		t.Fatalf("still throttled: %+v", f.p.throttled["a"])
	}
}

func TestFreezingThatCannotHoldEscalatesToKill(t *testing.T) {
	f := newFeed(t, computeLimited("a", 25))
	f.procs = []Proc{{HostPID: 10, GPU: gpu0, SMUtil: 1, Container: "a"}, {HostPID: 11, GPU: gpu0, Container: "a"}}
	// long-running kernels: the GPU stays busy while the CPU side is frozen
	acts := f.runBypass(2*time.Minute, 11, 97, 97, "/cg/a")
	esc := kinds(acts, Escalate)
	kills := kinds(acts, Kill)
	if len(esc) != 1 || len(kills) != 1 || kills[0].PID != 11 || kills[0].Reason != ReasonCompute {
		t.Fatalf("escalations %v kills %v, want one of pid 11", esc, kills)
	}
	if f.frozen["/cg/a"] {
		t.Fatal("left frozen after the kill (a frozen process does not die)")
	}
}

func TestHonestShareIsNeverFrozen(t *testing.T) {
	f := newFeed(t, computeLimited("a", 25))
	f.procs = []Proc{{HostPID: 10, GPU: gpu0, Container: "a"}}
	// bursts above the share, averaging within limit + slack
	for i := 0; i < 600; i++ {
		f.procs[0].SMUtil = 0
		if i%10 < 3 {
			f.procs[0].SMUtil = 100
		}
		f.run(100*time.Millisecond, 100*time.Millisecond)
	}
	if len(f.acts) != 0 {
		t.Fatalf("honest share: %v", f.acts)
	}
}

func TestPausedBySomeoneElseIsLeftAlone(t *testing.T) {
	f := newFeed(t, computeLimited("a", 25))
	f.procs = []Proc{{HostPID: 10, GPU: gpu0, SMUtil: 97, Container: "a"}}
	f.frozen["/cg/a"] = true // docker pause; its queued kernels keep running
	acts := f.run(2*time.Minute, 100*time.Millisecond)
	if len(acts) != 0 || !f.frozen["/cg/a"] {
		t.Fatalf("paused container: %v (frozen %v)", acts, f.frozen["/cg/a"])
	}
	// unpaused and bypassing: now ours to throttle
	f.frozen["/cg/a"] = false
	acts = f.runBypass(30*time.Second, 10, 0, 97, "/cg/a")
	if len(kinds(acts, Freeze)) == 0 {
		t.Fatalf("not throttled once unpaused: %v", acts)
	}
	// paused by someone else while our duty cycle had it thawed: we stop
	for f.p.FrozenByUs("a") {
		f.runBypass(100*time.Millisecond, 10, 0, 97, "/cg/a")
	}
	f.frozen["/cg/a"] = true
	acts = f.run(time.Minute, 100*time.Millisecond)
	if len(kinds(acts, Thaw)) != 0 || !f.frozen["/cg/a"] {
		t.Fatalf("thawed a container someone else paused: %v", acts)
	}
}

func TestNoCgroupEscalatesToKill(t *testing.T) {
	c := computeLimited("a", 25)
	c.Cgroup = ""
	f := newFeed(t, c)
	f.procs = []Proc{{HostPID: 10, GPU: gpu0, SMUtil: 97, Container: "a"}}
	acts := f.run(time.Minute, 100*time.Millisecond)
	if k := kinds(acts, Kill); len(k) != 1 || k[0].PID != 10 || len(kinds(acts, Freeze)) != 0 {
		t.Fatalf("without cgroup: %v", acts)
	}
}
