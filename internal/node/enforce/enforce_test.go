package enforce

import (
	"strings"
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
	t        *testing.T
	p        *Policy
	now      time.Time
	procs    []Proc
	frozen   map[string]bool
	freezing map[string]bool
	conts    []Container
	acts     []Action
	// how the freezer behaves: its write fails; or it is accepted and the
	// cgroup never reaches FROZEN
	failFreeze, stuckFreeze bool
}

func newFeed(t *testing.T, conts ...Container) *feed {
	return &feed{t: t, p: New(DefaultConfig()), now: time.Unix(1_700_000_000, 0), frozen: map[string]bool{}, freezing: map[string]bool{}, conts: conts}
}

// run ticks every period for d, carrying freeze and thaw out on f.frozen.
func (f *feed) run(d, period time.Duration) []Action {
	var got []Action
	for end := f.now.Add(d); f.now.Before(end); f.now = f.now.Add(period) {
		acts := f.p.Step(Input{Now: f.now, Containers: f.conts, Procs: f.procs, Frozen: f.frozen, Freezing: f.freezing})
		for _, a := range acts {
			switch a.Kind {
			case Freeze:
				if f.failFreeze {
					f.p.FreezeFailed(a.Container, "write cgroup.freeze: permission denied")
					break
				}
				f.frozen[a.Cgroup] = true
				f.freezing[a.Cgroup] = f.stuckFreeze
			case Thaw:
				f.frozen[a.Cgroup] = false
				f.freezing[a.Cgroup] = false
			case Kill:
				f.kill(a.PID)
			case KillAll:
				out := f.procs[:0]
				for _, p := range f.procs {
					if p.Container != a.Container {
						out = append(out, p)
					}
				}
				f.procs = out
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

// runUntil ticks for at most d, calling step before each tick, until a
// kill: the time of the tick that killed (zero: none) and the actions.
func (f *feed) runUntil(d time.Duration, step func()) (time.Time, []Action) {
	var got []Action
	for end := f.now.Add(d); f.now.Before(end); {
		at := f.now
		step()
		acts := f.run(100*time.Millisecond, 100*time.Millisecond)
		got = append(got, acts...)
		if len(kinds(acts, Kill)) > 0 {
			return at, got
		}
	}
	return time.Time{}, got
}

// The pattern seen on an H200 (docs/archive/gpu-runs.md): the container was frozen
// in a duty cycle, but its share hardly moved, so the duty never reached its
// maximum with the share beyond the bound and the old escalation never came.
// Whatever freezing does to a share that stays beyond limit + slack, the
// busiest process dies within Window (the first freeze) + EscalateAfter.
func TestShareFreezingDoesNotHoldIsKilledInTime(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name               string
		frozenUtil, thawed int
	}{
		{"queued kernels run on, share unchanged", 97, 97},
		{"half held, as measured on the H200", 45, 60},
		{"just beyond the bound", 36, 37},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeed(t, computeLimited("a", 25))
			f.procs = []Proc{{HostPID: 10, GPU: gpu0, Container: "a"}, {HostPID: 11, GPU: gpu0, SMUtil: 1, Container: "a"}}
			start := f.now
			at, acts := f.runUntil(5*time.Minute, func() { f.bypassUtil(10, tc.frozenUtil, tc.thawed, "/cg/a") })
			if at.IsZero() {
				t.Fatalf("not killed in 5 min: %d freezes, %d escalations", len(kinds(acts, Freeze)), len(kinds(acts, Escalate)))
			}
			if len(kinds(acts, Freeze)) == 0 {
				t.Fatalf("killed without a freeze first: %v", acts)
			}
			kills := kinds(acts, Kill)
			if len(kills) != 1 || kills[0].PID != 10 || kills[0].Reason != ReasonCompute {
				t.Fatalf("kills %+v, want pid 10 (the busiest) for compute", kills)
			}
			if took, max := at.Sub(start), cfg.Window+cfg.EscalateAfter+100*time.Millisecond; took > max {
				t.Fatalf("killed %v after the bypass began, want <= %v", took, max)
			}
			if f.frozen["/cg/a"] {
				t.Fatal("left frozen after the kill")
			}
		})
	}
}

// A share that freezing does hold is never escalated, from the first freeze
// on, at any limit; and over the windows after the first it stays within
// limit + slack.
func TestShareFreezingHoldsIsNeverKilled(t *testing.T) {
	for _, lim := range []int{5, 10, 25, 50, 75} {
		f := newFeed(t, computeLimited("a", lim))
		f.procs = []Proc{{HostPID: 10, GPU: gpu0, Container: "a"}}
		at, acts := f.runUntil(20*time.Second, func() { f.bypassUtil(10, 0, 100, "/cg/a") })
		if !at.IsZero() || len(kinds(acts, Freeze)) == 0 {
			t.Fatalf("limit %d: killed at %v or never frozen: %v", lim, at, acts)
		}
		worst := 0.0
		for i := 0; i < 100; i++ { // 5 more minutes, the share checked every 3 s
			if at, _ := f.runUntil(3*time.Second, func() { f.bypassUtil(10, 0, 100, "/cg/a") }); !at.IsZero() {
				t.Fatalf("limit %d: killed although freezing holds it", lim)
			}
			avg, _ := f.p.average(key{"a", gpu0})
			worst = maxf(worst, avg)
		}
		if worst > float64(lim+10) {
			t.Fatalf("limit %d: share up to %.1f%% under the duty cycle, want <= %d", lim, worst, lim+10)
		}
	}
}

// A bypass that idles for a period now and then (to end the throttle and
// start a new one, resetting its clock) is killed all the same: the
// throttle ends only once the window's share is back within the bound.
func TestThrottleCannotBeResetByIdling(t *testing.T) {
	f := newFeed(t, computeLimited("a", 25))
	f.procs = []Proc{{HostPID: 10, GPU: gpu0, Container: "a"}}
	i := 0
	at, _ := f.runUntil(5*time.Minute, func() {
		i++
		if i%90 < 22 { // 2.2 s idle in every 9 s: a whole period idle each time
			f.bypassUtil(10, 0, 0, "/cg/a")
		} else {
			f.bypassUtil(10, 97, 97, "/cg/a")
		}
	})
	if at.IsZero() {
		t.Fatal("an idling bypass was never killed")
	}
}

// A freeze the freezer refuses is escalated at the next round, not
// retried every round for ever; one that never reaches FROZEN is
// escalated after FreezeTimeout; and so is one someone keeps thawing.
func TestFreezeThatFailsIsEscalated(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name   string
		setup  func(f *feed)
		within time.Duration
	}{
		{"write fails", func(f *feed) { f.failFreeze = true }, 100 * time.Millisecond},
		{"never reaches FROZEN", func(f *feed) { f.stuckFreeze = true }, cfg.FreezeTimeout + 100*time.Millisecond},
		{"thawed behind our back", nil, cfg.FreezeTimeout + 100*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFeed(t, computeLimited("a", 25))
			// over the bound, not blatant (a blatant one is judged after
			// FastEscalate, before any freeze could time out)
			f.procs = []Proc{{HostPID: 10, GPU: gpu0, SMUtil: 60, Container: "a"}}
			if tc.setup != nil {
				tc.setup(f)
			}
			var frozeAt time.Time
			at, acts := f.runUntil(time.Minute, func() {
				if frozeAt.IsZero() && len(kinds(f.acts, Freeze)) > 0 {
					frozeAt = f.now.Add(-100 * time.Millisecond)
				}
				if tc.setup == nil {
					f.frozen["/cg/a"] = false // the tenant thaws itself
				}
			})
			if at.IsZero() || frozeAt.IsZero() {
				t.Fatalf("not escalated: %v", acts)
			}
			if took := at.Sub(frozeAt); took > tc.within {
				t.Fatalf("escalated %v after the first freeze, want <= %v", took, tc.within)
			}
			esc := kinds(acts, Escalate)
			if len(esc) != 1 || !strings.Contains(esc[0].Detail, "freezing failed") {
				t.Fatalf("escalations %+v, want one saying freezing failed", esc)
			}
			if n := len(kinds(acts, Freeze)); n > int(tc.within/cfg.DutyPeriod)+2 {
				t.Fatalf("%d freezes before the escalation: retried", n)
			}
		})
	}
}

// What the metrics show: the window's share and the throttle's duty.
func TestSharesReportWindowAndDuty(t *testing.T) {
	f := newFeed(t, computeLimited("a", 25), computeLimited("b", 50))
	f.procs = []Proc{{HostPID: 10, GPU: gpu0, SMUtil: 30, Container: "a"}, {HostPID: 20, GPU: gpu0, SMUtil: 97, Container: "b"}}
	f.run(5*time.Second, 100*time.Millisecond)
	sh := f.p.Shares()
	if len(sh) != 2 || sh[0].Container != "a" || int(sh[0].Percent+0.5) != 30 || sh[0].Duty != 0 || sh[1].Container != "b" || int(sh[1].Percent+0.5) != 97 {
		t.Fatalf("shares %+v", sh)
	}
	f.run(6*time.Second, 100*time.Millisecond)
	sh = f.p.Shares()
	if sh[1].Duty <= 0 || sh[1].Duty > DefaultConfig().MaxDuty || sh[0].Duty != 0 {
		t.Fatalf("shares %+v, want b throttled", sh)
	}
}

// The escalation's victim is the process busiest over time, not in the
// one round the escalation falls in: a bypass whose samples come every
// other round (the driver's period) is chosen over a steadier, lighter one.
func TestEscalationKillsBusiestOverTime(t *testing.T) {
	for phase := 0; phase < 2; phase++ {
		f := newFeed(t, computeLimited("a", 25))
		f.procs = []Proc{{HostPID: 10, GPU: gpu0, Container: "a"}, {HostPID: 11, GPU: gpu0, SMUtil: 30, Container: "a"}}
		i := phase
		at, acts := f.runUntil(time.Minute, func() {
			i++
			f.procs[0].SMUtil = 100 * (i % 2)
		})
		kills := kinds(acts, Kill)
		if at.IsZero() || len(kills) != 1 || kills[0].PID != 10 {
			t.Fatalf("phase %d: kills %+v, want pid 10 (50 %% over time, against 30 %%)", phase, kills)
		}
	}
}

// Bursts of 8x the limit, each shorter than the grace (300 ms every
// 600 ms), add up over the memory window: the bursting process is killed
// within 2 s of the first burst. (A grace that restarts on every sample
// under the limit never saw them.)
func TestMemoryBurstsAddUp(t *testing.T) {
	f := newFeed(t, memLimited("a", 2*gib))
	start := f.now
	var killedAt time.Time
	for i := 0; i < 100 && killedAt.IsZero(); i++ {
		used := uint64(0)
		if i%6 < 3 { // 300 ms of every 600 ms
			used = 16 * gib
		}
		f.procs = []Proc{{HostPID: 10, GPU: gpu0, UsedBytes: used, Container: "a"}}
		if k := kinds(f.run(100*time.Millisecond, 100*time.Millisecond), Kill); len(k) > 0 {
			if k[0].PID != 10 || k[0].Reason != ReasonMemory {
				t.Fatalf("kill %+v", k[0])
			}
			killedAt = f.now
		}
	}
	if killedAt.IsZero() || killedAt.Sub(start) > 2*time.Second {
		t.Fatalf("bursting process killed at %v after the first burst, want within 2 s", killedAt.Sub(start))
	}
}

// Six processes each under the limit, together 4.5x over it: one round
// kills as many as it takes (largest first) to bring the container under
// its limit, not one per grace.
func TestOneRoundBringsContainerUnderLimit(t *testing.T) {
	f := newFeed(t, memLimited("a", 2*gib))
	for i := 0; i < 6; i++ {
		f.procs = append(f.procs, Proc{HostPID: 10 + i, GPU: gpu0, UsedBytes: 3 * gib / 2, Container: "a"})
	}
	f.procs[2].UsedBytes = 3*gib/2 + 1 // the largest goes first
	acts := f.run(2*time.Second, 100*time.Millisecond)
	kills := kinds(acts, Kill)
	if len(kills) != 5 || kills[0].PID != 12 {
		t.Fatalf("kills %+v, want 5 in one round, pid 12 first", kills)
	}
	for _, k := range kills[1:] {
		if k.Detail == "" || !strings.Contains(k.Detail, "over limit") {
			t.Errorf("kill without its reason: %+v", k)
		}
	}
	var left uint64
	for _, p := range f.procs {
		left += p.UsedBytes
	}
	if left > 2*gib {
		t.Fatalf("left %d bytes, over the limit", left)
	}
	// all in the one round
	for _, a := range acts {
		if a.Kind == Kill && (a.Used != kills[0].Used) {
			t.Errorf("kills from several rounds: %+v", acts)
		}
	}
}

// Workers respawned after each kill: the container is killed whole (every
// process of its cgroup) at the third round of kills, within 5 s.
func TestRespawningWorkersKillContainer(t *testing.T) {
	f := newFeed(t, memLimited("a", 2*gib))
	start := f.now
	pid := 100
	f.procs = []Proc{{HostPID: 1, GPU: gpu0, UsedBytes: gib / 2, Container: "a"}}
	var all []Action
	for i := 0; i < 100; i++ {
		// the supervisor respawns a 6 GiB worker 200 ms after each kill
		if i%2 == 0 && len(f.procs) == 1 && f.procs[0].HostPID == 1 {
			pid++
			f.procs = append(f.procs, Proc{HostPID: pid, GPU: gpu0, UsedBytes: 6 * gib, Container: "a"})
		}
		acts := f.run(100*time.Millisecond, 100*time.Millisecond)
		all = append(all, acts...)
		if ka := kinds(acts, KillAll); len(ka) > 0 {
			if ka[0].Container != "a" || ka[0].Cgroup != "/cg/a" || ka[0].Reason != ReasonRepeat {
				t.Fatalf("kill-container %+v", ka[0])
			}
			if d := f.now.Sub(start); d > 5*time.Second {
				t.Fatalf("container killed %v after the first worker, want within 5 s", d)
			}
			if n := len(kinds(all, Kill)); n != 2 {
				t.Errorf("%d single kills before the container's, want 2", n)
			}
			return
		}
	}
	t.Fatalf("respawning workers never got the container killed: %d kills", len(kinds(all, Kill)))
}

// A process whose long kernels freezing cannot stop, respawned after each
// escalation's kill: the respawn inherits the container's history (no new
// window of its own): escalated again within EscalateRetry (+ a round), and
// at the third the container is killed whole.
func TestEscalationKeepsHistory(t *testing.T) {
	f := newFeed(t, computeLimited("a", 25))
	cfg := DefaultConfig()
	pid := 11
	f.procs = []Proc{{HostPID: pid, GPU: gpu0, Container: "a"}}
	var kills []time.Time
	for end := f.now.Add(2 * time.Minute); f.now.Before(end); {
		if len(f.procs) == 0 {
			pid++ // the supervisor respawns it at once
			f.procs = []Proc{{HostPID: pid, GPU: gpu0, Container: "a"}}
		}
		f.bypassUtil(pid, 97, 97, "/cg/a")
		acts := f.run(100*time.Millisecond, 100*time.Millisecond)
		for _, a := range acts {
			if a.Kind == Kill {
				kills = append(kills, f.now)
			}
			if a.Kind == KillAll {
				if len(kills) != 2 {
					t.Fatalf("container killed after %d escalations, want 2 first", len(kills))
				}
				if d := kills[1].Sub(kills[0]); d > cfg.EscalateRetry+time.Second {
					t.Fatalf("second escalation %v after the first, want within %v", d, cfg.EscalateRetry+time.Second)
				}
				if f.frozen["/cg/a"] {
					t.Fatal("left frozen")
				}
				return
			}
		}
	}
	t.Fatalf("respawned bypass never got its container killed: kills at %v", kills)
}

// A share far beyond the limit (97 % under 25 %) is throttled once the
// short window is covered, not after the whole 10 s window, and, freezing
// not holding it (long kernels), escalated FastEscalate after the freeze;
// a share over the bound but not that far waits for the whole window.
func TestBlatantShareActedOnFast(t *testing.T) {
	cfg := DefaultConfig()
	f := newFeed(t, computeLimited("a", 25), computeLimited("b", 25))
	f.procs = []Proc{{HostPID: 10, GPU: gpu0, SMUtil: 97, Container: "a"}, {HostPID: 20, GPU: gpu0, SMUtil: 60, Container: "b"}}
	start := f.now
	var frozeA, frozeB, killedA time.Time
	for end := start.Add(30 * time.Second); f.now.Before(end); {
		for _, a := range f.run(100*time.Millisecond, 100*time.Millisecond) {
			switch {
			case a.Kind == Freeze && a.Container == "a" && frozeA.IsZero():
				frozeA = f.now
			case a.Kind == Freeze && a.Container == "b" && frozeB.IsZero():
				frozeB = f.now
			case a.Kind == Kill && a.Container == "a" && killedA.IsZero():
				killedA = f.now
			}
		}
	}
	if d := frozeA.Sub(start); frozeA.IsZero() || d > cfg.FastWindow+300*time.Millisecond {
		t.Fatalf("97%% under 25%%: frozen after %v, want within %v", d, cfg.FastWindow+300*time.Millisecond)
	}
	if d := killedA.Sub(frozeA); killedA.IsZero() || d > cfg.FastEscalate+200*time.Millisecond {
		t.Fatalf("97%% under 25%%, freezing not holding: killed %v after the freeze, want within %v", d, cfg.FastEscalate+200*time.Millisecond)
	}
	if d := frozeB.Sub(start); frozeB.IsZero() || d < cfg.Window*9/10 {
		t.Fatalf("60%% under 25%%: frozen after %v, want once the whole window is covered", d)
	}
}
