// Package enforce is the pure policy of `vgpu node` (docs/node.md): from
// what the driver reports per process (device memory, SM utilization), the
// container each process belongs to and a clock, it decides whom to kill,
// which cgroup to freeze or thaw, and when freezing is not enough. It does
// no I/O: the daemon feeds it and carries its actions out, so that tests can
// drive it with a feed and a clock of their own.
package enforce

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Proc is one process's sample on one GPU, as the driver reports it.
type Proc struct {
	HostPID   int
	GPU       string // the GPU's UUID
	UsedBytes uint64 // device memory the driver charges to the process
	// SMUtil: percent of the GPU's time the process's kernels ran since the
	// previous sample (0..100).
	SMUtil int
	// Container: the container the process belongs to ("" = none known:
	// a host process, a `vgpu exec` process; never acted on).
	Container string
	// MPS: the driver lists the process with an MPS compute context
	// (nvmlDeviceGetMPSComputeRunningProcesses): a client of an MPS server.
	MPS bool
}

// Limit is a container's limit on one GPU.
type Limit struct {
	MemoryBytes uint64 // 0 = none
	ComputePct  int    // 100 (or 0) = none
	// Spatial: the GPU is shared through MPS; every process of the
	// container on it must be one the driver lists as an MPS client
	// (Proc.MPS), the others reached the GPU around it.
	Spatial bool
}

// Container is one limited container.
type Container struct {
	ID     string
	Cgroup string           // its freezer cgroup ("" = cannot be frozen: compute is enforced by kill only)
	Limits map[string]Limit // by GPU UUID
}

// Input is one sampling round.
type Input struct {
	Now        time.Time
	Containers []Container
	Procs      []Proc
	// Frozen tells, per cgroup, whether the freezer holds it now or was
	// asked to (whoever froze it).
	Frozen map[string]bool
	// Freezing lists the cgroups asked to freeze that have not reached
	// FROZEN yet (v1 FREEZING; v2 cgroup.freeze 1 with "frozen 0" in
	// cgroup.events). Absent: frozen as asked.
	Freezing map[string]bool
}

// Kind of an action.
type Kind string

const (
	Kill     Kind = "kill"
	Freeze   Kind = "freeze"
	Thaw     Kind = "thaw"
	Escalate Kind = "escalate" // freezing did not hold the share: a Kill follows
	// KillAll: every process of the container's cgroup (cgroup.kill on v2),
	// when its processes keep coming back after being killed.
	KillAll Kind = "kill-container"
)

// ReasonRepeat: the container was killed whole, its processes having
// come back after RepeatKills rounds of kills within RepeatWindow.
const ReasonRepeat = "repeat"

// repeatReasons: the kills of Step's own rules, besides memory's and the
// compute escalation's, that count as a round toward ReasonRepeat.
var repeatReasons = []string{ReasonMPS}

// Reasons.
const (
	ReasonMemory  = "memory"
	ReasonCompute = "compute"
	// ReasonMPS: a process of a container on a spatial GPU that is not a
	// client of the GPU's MPS server.
	ReasonMPS = "mps"
)

// Action is one thing to do, with why.
type Action struct {
	Kind      Kind
	Container string
	Cgroup    string // Freeze, Thaw
	PID       int    // Kill
	Pids      []int  // KillAll: the container's GPU processes known (its cgroup holds them all)
	GPU       string
	Reason    string // ReasonMemory, ReasonCompute
	// Used and Limit: bytes (memory) or percent (compute) at the decision.
	Used, Limit uint64
	Detail      string
	// Cycle: a freeze or thaw inside a duty cycle (not its start or end);
	// logged and recorded only in metrics.
	Cycle bool
}

func (a Action) String() string {
	switch a.Kind {
	case KillAll:
		return fmt.Sprintf("killed container %s whole (%s): %s", a.Container, a.Cgroup, a.Detail)
	case Kill:
		if a.Reason == ReasonMPS {
			return fmt.Sprintf("kill pid %d of %s: on spatial GPU %s but not an MPS client (%s)", a.PID, a.Container, a.GPU, a.Detail)
		}
		if a.Reason == ReasonMemory {
			return fmt.Sprintf("kill pid %d of %s: %d bytes on GPU %s > limit %d (%s)", a.PID, a.Container, a.Used, a.GPU, a.Limit, a.Detail)
		}
		return fmt.Sprintf("kill pid %d of %s: compute share %d%% on GPU %s > limit %d%% (%s)", a.PID, a.Container, a.Used, a.GPU, a.Limit, a.Detail)
	default:
		return fmt.Sprintf("%s %s (%s): %s", a.Kind, a.Container, a.Cgroup, a.Detail)
	}
}

// Config: the stated tolerances (docs/node.md).
type Config struct {
	// Memory: a container's device memory on a GPU may exceed its limit by
	// MemoryTolerance + MemoryToleranceFrac*limit; once the time it spent
	// above that within the last MemoryWindow adds up to Grace (bursts add
	// up; a sample under it resets nothing), its processes on that GPU are
	// killed, largest first, as many as it takes to bring it under its
	// limit, in one round.
	MemoryTolerance     uint64
	MemoryToleranceFrac float64
	Grace               time.Duration
	MemoryWindow        time.Duration
	// Repeat: a container that needs RepeatKills rounds of kills (memory,
	// compute escalation, repeatReasons) within RepeatWindow has its processes coming
	// back: it is killed whole (KillAll). After an escalation, a throttle
	// of the same container within RepeatWindow is judged after
	// EscalateRetry instead of EscalateAfter.
	RepeatKills   int
	RepeatWindow  time.Duration
	EscalateRetry time.Duration
	// Blatant: a share beyond limit + ComputeSlack + FastMargin over the
	// last FastWindow starts the throttle at once (not after the whole
	// Window), and that throttle is judged after FastEscalate. The library
	// paces an honest container within a few points of its limit over any
	// second or two; no honest one comes near this bound.
	FastWindow   time.Duration
	FastMargin   int
	FastEscalate time.Duration
	// Compute: the share averaged over Window may exceed the limit by
	// ComputeSlack points; beyond it the container is frozen in a duty
	// cycle of DutyPeriod. Each period's frozen fraction is the one that
	// would have held the period before to the limit, if freezing stops
	// the kernels: 1 - limit/demand, demand = share/(1 - duty), at most
	// MaxDuty. The throttle ends (thawed) when that fraction is 0 and the
	// window's share is within limit+slack.
	// EscalateAfter from the first freeze of a throttle, whatever the
	// duty, the share measured since that freeze is judged: still beyond
	// limit+slack, the busiest process is killed.
	Window        time.Duration
	ComputeSlack  int
	DutyPeriod    time.Duration
	MaxDuty       float64
	EscalateAfter time.Duration
	// FreezeTimeout: a freeze of ours not seen to hold (the cgroup stays
	// FREEZING, or someone thaws it) for this long counts as a freeze that
	// failed: escalation, as when the freezer's write fails.
	FreezeTimeout time.Duration
	// KillWait: a killed pid is not counted (nor killed again) for this long
	// while the driver still lists it (its memory is being reclaimed).
	KillWait time.Duration
	// MPSGrace: a process of a container on a spatial GPU that the driver
	// does not list as an MPS client (Proc.MPS) is killed once seen so this
	// long (at least Grace). A client connects to the control daemon, which
	// may first have to start the server: it can hold memory before the
	// driver lists it, and killing a client also breaks its neighbours in
	// the same server.
	MPSGrace time.Duration
}

// DefaultConfig is what `vgpu node` uses unless told otherwise.
func DefaultConfig() Config {
	return Config{
		MemoryTolerance:     128 << 20,
		MemoryToleranceFrac: 0.02,
		Grace:               500 * time.Millisecond,
		MemoryWindow:        10 * time.Second,
		RepeatKills:         3,
		RepeatWindow:        30 * time.Second,
		EscalateRetry:       time.Second,
		FastWindow:          3 * time.Second,
		FastMargin:          40,
		FastEscalate:        2 * time.Second,
		Window:              10 * time.Second,
		ComputeSlack:        10,
		DutyPeriod:          time.Second,
		MaxDuty:             0.9,
		EscalateAfter:       10 * time.Second,
		FreezeTimeout:       3 * time.Second,
		KillWait:            5 * time.Second,
		MPSGrace:            2 * time.Second,
	}
}

// Tolerance is the memory a container may hold above limit on one GPU.
func (c Config) Tolerance(limit uint64) uint64 {
	return c.MemoryTolerance + uint64(float64(limit)*c.MemoryToleranceFrac)
}

type key struct{ container, gpu string }

type sample struct {
	at    time.Time
	dt    time.Duration
	share int
}

// throttle is the duty cycle of one container we froze (or are freezing).
type throttle struct {
	duty        float64
	periodStart time.Time
	frozen      bool      // we froze it and have not thawed it
	since       time.Time // the throttle's first freeze: escalation is judged from it
	unheldSince time.Time // zero, or since when a freeze of ours has not been seen to hold
	failed      string    // a freeze of ours failed: why (escalate at the next round)
	gpu         string
	fast        bool // started by the blatant rule (FastWindow): judged after FastEscalate
}

// Policy keeps what one round must remember of the earlier ones.
type Policy struct {
	cfg       Config
	over      map[key][]sample       // memory: the rounds over limit + tolerance (share unused)
	rounds    map[string][]time.Time // kill rounds (memory, escalation) per container
	escalated map[string]time.Time   // last escalation per container
	window    map[key][]sample
	lastAt    time.Time
	throttled map[string]*throttle // by container id
	killed    map[int]time.Time
	// outside: since when a process of a container on a spatial GPU has
	// been seen there without being a client of the GPU's MPS server
	outside map[pidGPU]time.Time
	// busy: each process's share on a GPU, averaged over about a window
	// (exponentially): the escalation's victim is the busiest over time,
	// not in the one round it happens in
	busy map[pidGPU]float64
}

type pidGPU struct {
	pid int
	gpu string
}

// New returns a policy with cfg.
func New(cfg Config) *Policy {
	return &Policy{cfg: cfg, over: map[key][]sample{}, rounds: map[string][]time.Time{}, escalated: map[string]time.Time{}, window: map[key][]sample{},
		throttled: map[string]*throttle{}, killed: map[int]time.Time{}, busy: map[pidGPU]float64{}, outside: map[pidGPU]time.Time{}}
}

// FrozenByUs tells whether the policy holds container id frozen.
func (p *Policy) FrozenByUs(id string) bool {
	t := p.throttled[id]
	return t != nil && t.frozen
}

// FreezeFailed tells the policy that its Freeze of container id could not
// be carried out (the freezer's write failed). Retrying every round would
// leave the share unheld for ever: the next Step escalates instead.
func (p *Policy) FreezeFailed(id, why string) {
	if t := p.throttled[id]; t != nil {
		t.failed = why
	}
}

// Share is the policy's view of one container on one GPU: what a metric
// shows so that its decisions can be checked against the device.
type Share struct {
	Container, GPU string
	// Percent: the share averaged over the window (what the policy judges).
	Percent float64
	// Duty: the frozen fraction of the container's throttle (0: none); set
	// on the GPU the throttle judges.
	Duty float64
}

// Shares lists, for every container and GPU with samples in its window,
// the share the policy measures, and the throttle's duty.
func (p *Policy) Shares() []Share {
	var out []Share
	for k := range p.window {
		a, cover := p.average(k)
		if cover <= 0 {
			continue
		}
		sh := Share{Container: k.container, GPU: k.gpu, Percent: a}
		if t := p.throttled[k.container]; t != nil && t.gpu == k.gpu {
			sh.Duty = t.duty
		}
		out = append(out, sh)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Container != out[j].Container {
			return out[i].Container < out[j].Container
		}
		return out[i].GPU < out[j].GPU
	})
	return out
}

// Step takes one round of samples and returns what to do, in order.
func (p *Policy) Step(in Input) []Action {
	var acts []Action
	now := in.Now
	for pid, at := range p.killed {
		if now.Sub(at) >= p.cfg.KillWait {
			delete(p.killed, pid)
		}
	}
	byID := map[string]*Container{}
	for i := range in.Containers {
		byID[in.Containers[i].ID] = &in.Containers[i]
	}
	// per container and GPU: its live (not being killed) processes
	procs := map[key][]Proc{}
	for _, pr := range in.Procs {
		if pr.Container == "" || byID[pr.Container] == nil {
			continue
		}
		if _, dying := p.killed[pr.HostPID]; dying {
			continue
		}
		k := key{pr.Container, pr.GPU}
		procs[k] = append(procs[k], pr)
	}
	dt := time.Duration(0)
	if !p.lastAt.IsZero() && now.After(p.lastAt) {
		dt = now.Sub(p.lastAt)
	}
	p.lastAt = now

	keys := make([]key, 0)
	for _, c := range in.Containers {
		for gpu := range c.Limits {
			keys = append(keys, key{c.ID, gpu})
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].container != keys[j].container {
			return keys[i].container < keys[j].container
		}
		return keys[i].gpu < keys[j].gpu
	})
	acts = append(acts, p.mps(now, byID, keys, procs)...)
	live := map[key]bool{}
	killedFor := map[string]bool{} // containers with a kill this round of a reason in repeatReasons
	for _, a := range acts {
		killedFor[a.Container] = killedFor[a.Container] || a.Kind == Kill && slices.Contains(repeatReasons, a.Reason)
	}
	for _, k := range keys {
		live[k] = true
		a := p.memory(now, dt, k, byID[k.container].Limits[k.gpu], procs[k])
		killedFor[k.container] = killedFor[k.container] || len(a) > 0
		acts = append(acts, a...)
		p.record(now, dt, k, procs[k])
	}
	for k := range p.over {
		if !live[k] {
			delete(p.over, k)
		}
	}
	for id := range p.rounds {
		if byID[id] == nil {
			delete(p.rounds, id)
		}
	}
	for id := range p.escalated {
		if byID[id] == nil {
			delete(p.escalated, id)
		}
	}
	for k := range p.window {
		if !live[k] {
			delete(p.window, k)
		}
	}
	listed := map[pidGPU]bool{}
	for _, ps := range procs {
		for _, pr := range ps {
			listed[pidGPU{pr.HostPID, pr.GPU}] = true
		}
	}
	for pg := range p.busy {
		if !listed[pg] {
			delete(p.busy, pg)
		}
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a := p.compute(now, in, byID[id], procs)
		escalated := false
		for _, x := range a {
			escalated = escalated || x.Kind == Escalate
		}
		acts = append(acts, a...)
		if killedFor[id] || escalated {
			acts = p.repeat(now, byID[id], procs, acts)
		}
	}
	for id, t := range p.throttled {
		if byID[id] == nil && t != nil { // gone: nothing left to thaw
			delete(p.throttled, id)
		}
	}
	return acts
}

// mps kills, after MPSGrace, each process of a container on a spatial GPU
// that the driver does not list as an MPS client (Proc.MPS): under MPS
// every process of the GPU's tenants runs through the server (the library
// fails closed otherwise), so one that does not went around it, past the SM
// share. The driver's word alone: a process can register on the control
// daemon's socket without running through a server, and while the daemon
// is down (a tenant that is root can send it quit) nothing runs through
// one.
func (p *Policy) mps(now time.Time, byID map[string]*Container, keys []key, procs map[key][]Proc) []Action {
	var acts []Action
	seen := map[pidGPU]bool{}
	for _, k := range keys {
		if !byID[k.container].Limits[k.gpu].Spatial {
			continue
		}
		for _, pr := range procs[k] {
			pg := pidGPU{pr.HostPID, pr.GPU}
			if pr.MPS {
				continue
			}
			seen[pg] = true
			first, ok := p.outside[pg]
			if !ok {
				p.outside[pg] = now
				first = now
			}
			if now.Sub(first) < max(p.cfg.MPSGrace, p.cfg.Grace) {
				continue
			}
			delete(p.outside, pg)
			p.killed[pr.HostPID] = now
			acts = append(acts, Action{Kind: Kill, Container: k.container, PID: pr.HostPID, GPU: k.gpu, Reason: ReasonMPS, Used: pr.UsedBytes,
				Detail: fmt.Sprintf("seen on the GPU for %v with %d bytes, the driver does not list it as an MPS client", now.Sub(first).Round(time.Millisecond), pr.UsedBytes)})
		}
	}
	for pg := range p.outside {
		if !seen[pg] {
			delete(p.outside, pg)
		}
	}
	return acts
}

func (p *Policy) memory(now time.Time, dt time.Duration, k key, lim Limit, ps []Proc) []Action {
	if lim.MemoryBytes == 0 {
		delete(p.over, k)
		return nil
	}
	var used uint64
	for _, pr := range ps {
		used += pr.UsedBytes
	}
	w := p.over[k]
	for len(w) > 0 && now.Sub(w[0].at) >= p.cfg.MemoryWindow {
		w = w[1:]
	}
	bound := lim.MemoryBytes + p.cfg.Tolerance(lim.MemoryBytes)
	if used > bound {
		// after a pause of the daemon one sample stands for at most half
		// the grace, not the gap: two samples over are always needed
		w = append(w, sample{at: now, dt: min(dt, p.cfg.Grace/2)})
	}
	if len(w) == 0 {
		delete(p.over, k)
		return nil
	}
	p.over[k] = w
	if used <= bound {
		return nil
	}
	var overFor time.Duration
	for _, s := range w {
		overFor += s.dt
	}
	if overFor < p.cfg.Grace {
		return nil
	}
	// Like the kernel's OOM killer, the largest process first; as many as
	// it takes to bring the container under its limit in this round.
	sorted := append([]Proc(nil), ps...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].UsedBytes != sorted[j].UsedBytes {
			return sorted[i].UsedBytes > sorted[j].UsedBytes
		}
		return sorted[i].HostPID < sorted[j].HostPID
	})
	var acts []Action
	left := used
	for _, victim := range sorted {
		if left <= lim.MemoryBytes {
			break
		}
		p.killed[victim.HostPID] = now
		acts = append(acts, Action{Kind: Kill, Container: k.container, PID: victim.HostPID, GPU: k.gpu, Reason: ReasonMemory,
			Used: used, Limit: lim.MemoryBytes,
			Detail: fmt.Sprintf("over limit + tolerance %d for %v of the last %v, process holds %d", p.cfg.Tolerance(lim.MemoryBytes), overFor.Round(time.Millisecond), p.cfg.MemoryWindow, victim.UsedBytes)})
		left -= victim.UsedBytes
	}
	return acts
}

// repeat counts a round of kills of container c and, at the RepeatKills-th
// within RepeatWindow, replaces the round's kills by one KillAll: its
// processes keep coming back.
func (p *Policy) repeat(now time.Time, c *Container, procs map[key][]Proc, acts []Action) []Action {
	r := p.rounds[c.ID]
	for len(r) > 0 && now.Sub(r[0]) >= p.cfg.RepeatWindow {
		r = r[1:]
	}
	r = append(r, now)
	p.rounds[c.ID] = r
	if p.cfg.RepeatKills <= 0 || len(r) < p.cfg.RepeatKills {
		return acts
	}
	out := acts[:0]
	for _, a := range acts {
		if a.Container != c.ID || a.Kind != Kill {
			out = append(out, a)
		}
	}
	var pids []int
	for k, ps := range procs {
		if k.container == c.ID {
			for _, pr := range ps {
				pids = append(pids, pr.HostPID)
				p.killed[pr.HostPID] = now
			}
		}
	}
	sort.Ints(pids)
	delete(p.rounds, c.ID)
	return append(out, Action{Kind: KillAll, Container: c.ID, Cgroup: c.Cgroup, Reason: ReasonRepeat, Pids: pids,
		Detail: fmt.Sprintf("%d rounds of kills within %v: its processes keep coming back", len(r), p.cfg.RepeatWindow)})
}

// CountKill counts kill a, decided outside Step (memory taken back for an
// owner), as a round of kills of container c toward the repeat rule: at the
// RepeatKills-th round within RepeatWindow it returns c's KillAll instead
// (procs: c's processes, for the record).
func (p *Policy) CountKill(now time.Time, c Container, a Action, procs []Proc) []Action {
	m := map[key][]Proc{}
	for _, pr := range procs {
		if pr.Container == c.ID {
			m[key{c.ID, pr.GPU}] = append(m[key{c.ID, pr.GPU}], pr)
		}
	}
	if a.Kind == Kill {
		p.killed[a.PID] = now
	}
	return p.repeat(now, &c, m, []Action{a})
}

func (p *Policy) record(now time.Time, dt time.Duration, k key, ps []Proc) {
	if dt <= 0 {
		return
	}
	share := 0
	for _, pr := range ps {
		share += pr.SMUtil
	}
	if share > 100 {
		share = 100
	}
	a := minf(1, dt.Seconds()/p.cfg.Window.Seconds())
	for _, pr := range ps {
		pg := pidGPU{pr.HostPID, pr.GPU}
		p.busy[pg] = p.busy[pg]*(1-a) + float64(pr.SMUtil)*a
	}
	w := append(p.window[k], sample{at: now, dt: dt, share: share})
	for len(w) > 0 && now.Sub(w[0].at) >= p.cfg.Window {
		w = w[1:]
	}
	p.window[k] = w
}

// average is the time-weighted share over the window and the time covered.
func (p *Policy) average(k key) (float64, time.Duration) {
	return p.averageSince(k, time.Time{})
}

// averageSince is the time-weighted share of the window's samples taken
// after since (each sample covers the dt before it), and the time covered.
func (p *Policy) averageSince(k key, since time.Time) (float64, time.Duration) {
	var sum float64
	var cover time.Duration
	for _, s := range p.window[k] {
		if !s.at.After(since) {
			continue
		}
		sum += float64(s.share) * s.dt.Seconds()
		cover += s.dt
	}
	if cover <= 0 {
		return 0, 0
	}
	return sum / cover.Seconds(), cover
}

// computeLimitedGPUs are the GPUs where c has a compute limit below 100, in
// a fixed order, so that ties between GPUs always go the same way.
func computeLimitedGPUs(c *Container) []string {
	gpus := make([]string, 0, len(c.Limits))
	for g, l := range c.Limits {
		if l.ComputePct > 0 && l.ComputePct < 100 {
			gpus = append(gpus, g)
		}
	}
	sort.Strings(gpus)
	return gpus
}

// worst is the GPU where the container is furthest beyond its share, from
// the samples after since (zero: the whole window).
func (p *Policy) worst(c *Container, since time.Time) (gpu string, avg float64, lim int, full bool) {
	best := -1e9
	for _, g := range computeLimitedGPUs(c) {
		l := c.Limits[g].ComputePct
		a, cover := p.averageSince(key{c.ID, g}, since)
		if a-float64(l) > best {
			best, gpu, avg, lim, full = a-float64(l), g, a, l, cover >= p.cfg.Window*9/10
		}
	}
	return
}

// blatant finds a GPU where container c's share over the last FastWindow
// (covered for at least 90 % of it) is beyond its limit + slack +
// FastMargin: a bypass so far over its limit that waiting for the whole
// window only hands its neighbours' time to it.
func (p *Policy) blatant(c *Container, now time.Time) (gpu string, avg float64, lim int, ok bool) {
	if p.cfg.FastWindow <= 0 {
		return "", 0, 0, false
	}
	since := now.Add(-p.cfg.FastWindow)
	for _, g := range computeLimitedGPUs(c) {
		l := c.Limits[g].ComputePct
		a, cover := p.averageSince(key{c.ID, g}, since)
		if cover >= p.cfg.FastWindow*9/10 && a > float64(l+p.cfg.ComputeSlack+p.cfg.FastMargin) && (!ok || a-float64(l) > avg-float64(lim)) {
			gpu, avg, lim, ok = g, a, l, true
		}
	}
	return
}

// dutyFor is the frozen fraction that brings a container whose kernels run
// share percent of the time while frozen a fraction duty of it down to lim,
// if freezing stops them: its demand is share/(1-duty).
func (p *Policy) dutyFor(share, duty float64, lim int) float64 {
	demand := 100.0
	if duty < 1 {
		demand = minf(100, share/(1-duty))
	}
	if demand <= 0 {
		return 0
	}
	return minf(p.cfg.MaxDuty, maxf(0, 1-float64(lim)/demand))
}

func (p *Policy) compute(now time.Time, in Input, c *Container, procs map[key][]Proc) []Action {
	t := p.throttled[c.ID]
	frozenNow := c.Cgroup != "" && in.Frozen[c.Cgroup]
	gpu, avg, lim, full := p.worst(c, time.Time{})
	if t != nil && t.failed != "" && gpu != "" {
		// Retrying a freeze that fails would leave the share unheld for ever.
		return p.escalate(now, c, t, gpu, avg, lim, procs, "freezing failed: "+t.failed)
	}
	if t != nil && t.frozen && !frozenNow {
		// Someone thawed what we froze: frozen again at the next period. The
		// throttle (and the time it is judged from) goes on, or a tenant
		// able to thaw itself would never be escalated; a freeze undone
		// behind our back counts as one that does not hold.
		t.frozen = false
		if t.unheldSince.IsZero() {
			t.unheldSince = now
		}
	}
	if t != nil && !t.frozen && frozenNow {
		// Frozen while our duty cycle had it thawed: someone else paused it.
		delete(p.throttled, c.ID)
		t = nil
	}
	if t == nil && frozenNow {
		return nil // paused by someone else: left alone
	}
	if gpu == "" {
		if t != nil && t.frozen {
			delete(p.throttled, c.ID)
			return []Action{{Kind: Thaw, Container: c.ID, Cgroup: c.Cgroup, Reason: ReasonCompute, Detail: "no compute limit any more"}}
		}
		delete(p.throttled, c.ID)
		return nil
	}
	bound := float64(lim + p.cfg.ComputeSlack)
	if t == nil {
		fast := false
		over := p.cfg.Window
		if !full || avg <= bound {
			// Far beyond the limit: no need to wait for the whole window.
			g, a, l, ok := p.blatant(c, now)
			if !ok {
				return nil
			}
			fast, gpu, avg, lim, over = true, g, a, l, p.cfg.FastWindow
		}
		t = &throttle{duty: p.dutyFor(avg, 0, lim), periodStart: now, since: now, gpu: gpu, fast: fast}
		p.throttled[c.ID] = t
		if c.Cgroup == "" {
			return p.escalate(now, c, t, gpu, avg, lim, procs, "no cgroup to freeze")
		}
		t.frozen = true
		return []Action{{Kind: Freeze, Container: c.ID, Cgroup: c.Cgroup, GPU: gpu, Reason: ReasonCompute,
			Used: uint64(avg + 0.5), Limit: uint64(lim),
			Detail: fmt.Sprintf("share %.0f%% over %v > limit %d%% + %d; frozen %.0f%% of every %v", avg, over, lim, p.cfg.ComputeSlack, t.duty*100, p.cfg.DutyPeriod)}}
	}
	if t.frozen {
		// Seen once the freeze had a round to act (the daemon writes after Step).
		switch {
		case !in.Freezing[c.Cgroup]:
			t.unheldSince = time.Time{}
		case t.unheldSince.IsZero():
			t.unheldSince = now
		}
	}
	if !t.unheldSince.IsZero() && now.Sub(t.unheldSince) >= p.cfg.FreezeTimeout {
		return p.escalate(now, c, t, gpu, avg, lim, procs, fmt.Sprintf("freezing failed: the cgroup did not reach FROZEN in %v", now.Sub(t.unheldSince).Round(time.Millisecond)))
	}
	// The rule a tenant cannot dodge: EscalateAfter from the first freeze,
	// the share measured since is judged, whatever the duty did meanwhile;
	// EscalateRetry for a container escalated within RepeatWindow (a
	// respawned process gets no new window of its own).
	after := p.cfg.EscalateAfter
	if t.fast && p.cfg.FastEscalate > 0 {
		after = p.cfg.FastEscalate
	}
	if last, ok := p.escalated[c.ID]; ok && now.Sub(last) < p.cfg.RepeatWindow && p.cfg.EscalateRetry > 0 {
		after = min(after, p.cfg.EscalateRetry)
	}
	if now.Sub(t.since) >= after {
		if g, a, l, _ := p.worst(c, t.since); g != "" && a > float64(l+p.cfg.ComputeSlack) {
			return p.escalate(now, c, t, g, a, l, procs, fmt.Sprintf("throttled for %v and the share since is still %.0f%% > limit %d%% + %d",
				now.Sub(t.since).Round(time.Millisecond), a, l, p.cfg.ComputeSlack))
		}
	}
	var acts []Action
	if now.Sub(t.periodStart) >= p.cfg.DutyPeriod {
		// A new period: the duty that would have held the last one to the limit.
		last, _ := p.averageSince(key{c.ID, t.gpu}, t.periodStart)
		t.duty = p.dutyFor(last, t.duty, lim)
		t.periodStart = now
		if t.duty <= 0 && avg <= bound {
			delete(p.throttled, c.ID)
			if t.frozen {
				return []Action{{Kind: Thaw, Container: c.ID, Cgroup: c.Cgroup, GPU: gpu, Reason: ReasonCompute,
					Used: uint64(avg + 0.5), Limit: uint64(lim), Detail: fmt.Sprintf("share %.0f%% back within limit %d%%", avg, lim)}}
			}
			return nil
		}
		if !t.frozen && t.duty > 0 {
			t.frozen = true
			return []Action{{Kind: Freeze, Container: c.ID, Cgroup: c.Cgroup, GPU: gpu, Reason: ReasonCompute,
				Used: uint64(avg + 0.5), Limit: uint64(lim), Detail: fmt.Sprintf("duty %.0f%%", t.duty*100), Cycle: true}}
		}
	}
	// Within a period: frozen for the first duty fraction, thawed after.
	if t.frozen && now.Sub(t.periodStart) >= time.Duration(float64(p.cfg.DutyPeriod)*t.duty) {
		t.frozen = false
		acts = append(acts, Action{Kind: Thaw, Container: c.ID, Cgroup: c.Cgroup, GPU: gpu, Reason: ReasonCompute,
			Used: uint64(avg + 0.5), Limit: uint64(lim), Detail: fmt.Sprintf("duty %.0f%%", t.duty*100), Cycle: true})
	}
	return acts
}

// escalate kills the container's busiest process on gpu (over about the
// last window), then thaws the
// container if we hold it frozen (a frozen task dies only once thawed).
func (p *Policy) escalate(now time.Time, c *Container, t *throttle, gpu string, avg float64, lim int, procs map[key][]Proc, why string) []Action {
	ps := procs[key{c.ID, gpu}]
	acts := []Action{{Kind: Escalate, Container: c.ID, Cgroup: c.Cgroup, GPU: gpu, Reason: ReasonCompute,
		Used: uint64(avg + 0.5), Limit: uint64(lim), Detail: why}}
	if len(ps) > 0 {
		busy := func(pr Proc) float64 { return p.busy[pidGPU{pr.HostPID, gpu}] }
		victim := ps[0]
		for _, pr := range ps[1:] {
			if busy(pr) > busy(victim) || (busy(pr) == busy(victim) && pr.HostPID < victim.HostPID) {
				victim = pr
			}
		}
		p.killed[victim.HostPID] = now
		acts = append(acts, Action{Kind: Kill, Container: c.ID, PID: victim.HostPID, GPU: gpu, Reason: ReasonCompute,
			Used: uint64(avg + 0.5), Limit: uint64(lim), Detail: why})
	}
	if t.frozen {
		acts = append(acts, Action{Kind: Thaw, Container: c.ID, Cgroup: c.Cgroup, GPU: gpu, Reason: ReasonCompute, Detail: "after the kill"})
	}
	delete(p.throttled, c.ID)
	// The window is kept: a process respawned after the kill inherits the
	// container's history (throttled again at once while the window's share
	// is over, and judged after EscalateRetry).
	p.escalated[c.ID] = now
	return acts
}

func minf(a, b float64) float64 {
	if a < b {
		return a
	}
	return b
}

func maxf(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}
