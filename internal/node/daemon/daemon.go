// Package daemon is the loop of `vgpu node` (docs/node.md): every Interval
// it reads the driver's per-process figures (nvmlfeed), maps the processes
// to the containers of the state directory (procmap), asks the policy
// (enforce) what to do, and does it: SIGKILL, the cgroup freezer. It logs
// every decision, counts it in Prometheus metrics and records kills,
// escalations and throttles in the state directory for `vgpu status`. It
// also keeps each container's host pid map (internal/hostpids) current, so
// the container's NVML shows its own processes under its own pids.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/freezer"
	"github.com/vgpu-dev/vgpu/internal/hostpids"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/mps"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/procmap"
)

// DefaultInterval is the sampling period. 100 ms: a kill lands within
// grace (500 ms) + two periods of the crossing, under the 1 s the issue
// asks; one round costs two NVML queries per GPU and a read of
// /proc/<pid>/cgroup per GPU process (bench/nodecost measures it), and the
// compute window (10 s) gets 100 samples. NVML's own per-process
// utilization is sampled by the driver at about 6 Hz on real GPUs, so a
// faster rate would only repeat samples.
const DefaultInterval = 100 * time.Millisecond

// Options of Run.
type Options struct {
	StateDir   string
	ProcRoot   string // default /proc
	CgroupRoot string // default /sys/fs/cgroup
	Interval   time.Duration
	Policy     enforce.Config
	Source     nvmlfeed.Source
	// NVMLPath is the driver's libnvidia-ml, where vgpu node reads the
	// driver's own per-cgroup memory limits ("" = it does not).
	NVMLPath   string
	Log        io.Writer
	Registry   prometheus.Registerer // nil: none
	MetricsURL string                // shown in the heartbeat
	// Now and Kill stand in for the clock and kill(2) in tests; Mono for
	// CLOCK_MONOTONIC in ns (the arbitration's clock, the library's).
	Now  func() time.Time
	Kill func(pid int) error
	Mono func() uint64
	// BorrowFree: memory_borrow = "free" (tenants borrow any free memory,
	// taken back when an owner needs it); else only what no request needs.
	BorrowFree bool
	// Suspend: take borrowed memory back by suspending the borrower's
	// processes (memory_reclaim = "suspend", suspend.go); nil: by kills.
	Suspend *SuspendOptions
	// NoSuspend: why memory is taken back by kills though memory_reclaim
	// asks for suspension (the driver has no checkpoint API); "" when it
	// does not ask.
	NoSuspend string
	// MPS: the control daemons of the spatial GPUs, by UUID (mpsround.go);
	// nil: none.
	MPS map[string]MPSDaemon
	// OnRound is called after each round that returned (the service
	// manager's watchdog); nil: nothing.
	OnRound func()
}

// MPSDaemon is what a round asks of a spatial GPU's control daemon
// (mps.Supervisor).
type MPSDaemon interface {
	State() mps.State
	Clients(ctx context.Context) (servers []int, clients map[int]bool, err error)
	Cap(ctx context.Context, servers []int, pct int) error
}

// Daemon is one running `vgpu node`.
type Daemon struct {
	o       Options
	policy  *enforce.Policy
	frz     *freezer.Freezer
	ev      *events.Writer
	started time.Time
	lastErr string
	// reapFailed: why removing a gone vgpu exec's entry failed, by id
	// (reapExecs), so that a failure is logged once, not every round
	reapFailed map[string]string
	beat       time.Time
	shares     []events.Share // of the last round, for the heartbeat
	m          metrics
	mu         sync.Mutex
	// pidMaps is the host pid map last written per container; a map is
	// written again only when it changes.
	pidMaps map[string]map[int]int
	pidErr  map[string]string // last write error per container, logged once
	arb     arbitration
	ord     *orderLoop // the order inside the period, between rounds (order.go)
	bor     borrowing
	// driverSeen: containers whose driver limits were read (driverlimits.go)
	driverSeen map[string]bool
	mpsSeen    map[string]*mpsView // by GPU UUID (mpsround.go)
	// regions: this round's tenant regions, read before the lock
	// (tenantfiles.go); regionErr: the problem last reported per entry
	regions   regionReads
	regionErr map[string]string
	// lastRound: UnixNano when Run last finished a round, read without
	// the lock by the health endpoint; runStart: when it was made
	lastRound atomic.Int64
	runStart  time.Time
	orph      orphans // memory nobody explains (orphan.go)
	grd       guard   // take-backs that cannot be outrun or misused (borrowguard.go)
	sus       suspensions
	// noSuspendWhy: why a take-back that would suspend kills (Options)
	noSuspendWhy string
}

type metrics struct {
	kills, freezes, escalations *prometheus.CounterVec
	rounds, roundErrors         prometheus.Counter
	roundSeconds                prometheus.Histogram
	procMem                     *prometheus.GaugeVec
	share, duty, driverLimit    *prometheus.GaugeVec
	up                          prometheus.Gauge
	unexplained                 *prometheus.GaugeVec
	suspended, suspendedBytes   prometheus.Gauge
	checkpoints, reclaimKills   *prometheus.CounterVec
	checkpointSeconds           *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		kills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vgpu_enforcement_kills_total",
			Help: "Processes vgpu node killed (SIGKILL), by container, GPU (UUID) and reason (memory, compute)."}, []string{"container", "gpu", "reason"}),
		freezes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vgpu_enforcement_freezes_total",
			Help: "Times vgpu node froze a container's cgroup (each duty-cycle freeze counts)."}, []string{"container", "gpu"}),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vgpu_enforcement_escalations_total",
			Help: "Times freezing could not hold a container's compute share and vgpu node killed a process."}, []string{"container", "gpu"}),
		rounds:      prometheus.NewCounter(prometheus.CounterOpts{Name: "vgpu_node_rounds_total", Help: "Sampling rounds of vgpu node."}),
		roundErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "vgpu_node_round_errors_total", Help: "Rounds that could not read the driver or the state directory (nothing was enforced in them)."}),
		roundSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vgpu_node_round_duration_seconds", Help: "Time one sampling round took.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2}}),
		procMem: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vgpu_node_process_memory_bytes",
			Help: "Device memory the driver charges to a process of a limited container (NVML)."}, []string{"container", "gpu", "host_pid"}),
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vgpu_container_compute_share_percent",
			Help: "A limited container's compute share on a GPU as vgpu node measures it from NVML's per-process samples: the average over the compute window, what the policy judges."}, []string{"container", "gpu"}),
		duty: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vgpu_container_throttle_duty",
			Help: "The fraction of each duty period vgpu node keeps a throttled container frozen (0: not throttled now), on the GPU its throttle judges."}, []string{"container", "gpu"}),
		driverLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vgpu_driver_memory_limit_bytes",
			Help: "The hard memory limit the driver itself holds on a container's cgroup (driver r615 and later; absent where the library and vgpu node hold it)."}, []string{"container", "gpu"}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vgpu_node_up", Help: "1 while vgpu node enforces limits."}),
		unexplained: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vgpu_node_unexplained_memory_bytes",
			Help: "Device memory the driver counts as used that no listed process explains (beyond the driver's own): held by nobody, not lent out."}, []string{"gpu"}),
		suspended: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vgpu_node_suspended_processes",
			Help: "Processes vgpu node holds suspended to host memory to take borrowed memory back (or is suspending now)."}),
		suspendedBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vgpu_node_suspended_host_bytes",
			Help: "Device memory of the suspended processes, held in host memory until they are restored."}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vgpu_node_checkpoints_total",
			Help: "Suspensions and restores vgpu node asked of the driver's checkpoint API, by operation (suspend, restore) and result (done, failed)."}, []string{"op", "result"}),
		checkpointSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vgpu_node_checkpoint_duration_seconds",
			Help: "Time the driver took to suspend or restore a process (the helper's figure), by operation.", Buckets: []float64{.01, .1, .5, 1, 2, 5, 10, 30, 60}}, []string{"op"}),
		reclaimKills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vgpu_node_reclaim_kills_total",
			Help: "Processes killed to take borrowed memory back instead of suspended, by cause (memory_reclaim_kill, no_checkpoint_api, host_memory_cap, cgroup_memory, lock_timeout, driver_refused, spatial, frozen, helper_failed, max_time, restore_failed)."}, []string{"cause"}),
	}
	if reg != nil {
		reg.MustRegister(m.kills, m.freezes, m.escalations, m.rounds, m.roundErrors, m.roundSeconds, m.procMem, m.share, m.duty, m.driverLimit, m.up, m.unexplained,
			m.suspended, m.suspendedBytes, m.checkpoints, m.checkpointSeconds, m.reclaimKills)
	}
	return m
}

// New prepares a daemon (the state directory's .node/ is created).
func New(o Options) (*Daemon, error) {
	if o.Source == nil {
		return nil, errors.New("no NVML source")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Mono == nil {
		o.Mono = monoNow
	}
	if o.Kill == nil {
		o.Kill = func(pid int) error { return unix.Kill(pid, unix.SIGKILL) }
	}
	ev, err := events.NewWriter(o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("state directory %s: %w", o.StateDir, err)
	}
	d := &Daemon{o: o, policy: enforce.New(o.Policy), frz: newFreezer(o.StateDir, o.CgroupRoot), ev: ev, m: newMetrics(o.Registry),
		pidMaps: map[string]map[int]int{}, pidErr: map[string]string{}, driverSeen: map[string]bool{}, runStart: time.Now()}
	d.noSuspendWhy = o.NoSuspend
	d.loadSuspended()
	d.ord = newOrderLoop(o.Mono)
	// What an earlier daemon froze and never thawed (killed with SIGKILL,
	// a crash): thawed before anything else.
	if thawed, err := d.frz.Recover(); err != nil || len(thawed) > 0 {
		d.logf("vgpu node: thawed what an earlier vgpu node left frozen: %v (%v)", thawed, err)
	}
	return d, nil
}

// FrozenRecord is where the daemon records, durably, the cgroups it holds
// frozen: <state_dir>/.node/frozen.json.
func FrozenRecord(stateDir string) string {
	return filepath.Join(stateDir, config.StateNode, "frozen.json")
}

func newFreezer(stateDir, cgroupRoot string) *freezer.Freezer {
	f := freezer.New(cgroupRoot)
	f.Record = FrozenRecord(stateDir)
	return f
}

// ThawRecorded thaws what a vgpu node on stateDir recorded as frozen by it
// and did not thaw (vgpu node --thaw: the systemd unit's ExecStopPost, run
// however the daemon ended).
func ThawRecorded(stateDir, cgroupRoot string) ([]string, error) {
	return newFreezer(stateDir, cgroupRoot).Recover()
}

// Grants is the last arbitration's grants, by entry id and device index.
func (d *Daemon) Grants() map[string]map[int]arbiter.Grant {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.arb.Grants
}

// Run samples until ctx ends; on the way out it thaws what it froze and
// removes its heartbeat. A round runs beside the wait for ctx: one that
// hangs (a driver call that never returns) does not keep Run from ending,
// it thaws from the durable record then (the round's freezer is busy).
func (d *Daemon) Run(ctx context.Context) (err error) {
	d.started = d.o.Now()
	d.m.up.Set(1)
	d.logf("vgpu node: enforcing in %s every %v (grace %v, tolerance %s + %.0f%% of the limit, compute +%d points over %v)",
		d.o.StateDir, d.o.Interval, d.o.Policy.Grace, bytesText(d.o.Policy.MemoryTolerance), d.o.Policy.MemoryToleranceFrac*100, d.o.Policy.ComputeSlack, d.o.Policy.Window)
	done := make(chan struct{}, 1)
	running := false
	defer func() {
		if running {
			// give a slow round a moment to finish before leaving it behind
			select {
			case <-done:
				running = false
			case <-time.After(stuckGrace):
			}
		}
		if running {
			err = ErrRoundStuck
			d.logf("vgpu node: a round has not returned for %v; thawing from %s and leaving it", stuckGrace, FrozenRecord(d.o.StateDir))
			if thawed, err := ThawRecorded(d.o.StateDir, d.o.CgroupRoot); err != nil || len(thawed) > 0 {
				d.logf("vgpu node: thawed %v (%v)", thawed, err)
			}
		} else {
			d.arb.close()
			for _, mp := range d.bor.maps {
				mp.Close()
			}
			d.frz.ThawAll()
		}
		_ = d.ev.Stop() // stopping: the events file's last error was logged
		d.m.up.Set(0)
		d.logf("vgpu node: stopped; containers keep their in-process limits only")
	}()
	t := time.NewTicker(d.o.Interval)
	defer t.Stop()
	orderCtx, stopOrder := context.WithCancel(context.Background())
	orderDone := make(chan struct{})
	go func() { d.ord.run(orderCtx); close(orderDone) }()
	defer func() { stopOrder(); <-orderDone }()
	for {
		running = true
		go func() { d.Round(); done <- struct{}{} }()
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			running = false
		}
		d.lastRound.Store(time.Now().UnixNano())
		if d.o.OnRound != nil {
			d.o.OnRound()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ErrRoundStuck: Run stopped with a round still in progress; whatever that
// round may be blocked in (the driver's library) is best left alone.
var ErrRoundStuck = errors.New("stopped with an enforcement round that had not returned (what it froze was thawed from the record)")

// stuckGrace is how long Run, told to stop, waits for a round in progress.
const stuckGrace = 2 * time.Second

// LastRound is when Run last finished a round (zero before the first).
func (d *Daemon) LastRound() time.Time {
	if ns := d.lastRound.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Healthy says whether Run finished a round within the last max(10
// intervals, 5 s), timed from New before the first: the liveness check
// of the health endpoint.
func (d *Daemon) Healthy(now time.Time) bool {
	last := d.LastRound()
	if last.IsZero() {
		last = d.runStart
	}
	return now.Sub(last) <= max(10*d.o.Interval, 5*time.Second)
}

// Round is one sampling round (exported for tests and the benchmark).
func (d *Daemon) Round() {
	start := time.Now()
	regions, problems := readRegions(d.o.StateDir)
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.o.Now()
	d.regions = regions
	d.reportRegions(problems)
	d.arb.regions = regions
	d.arb.arbitrate(d.o.StateDir, d.o.Mono()) // needs no driver: runs when NVML fails too
	d.ord.offer(d.arb.roster())
	err := d.round(now)
	d.m.rounds.Inc()
	d.m.roundSeconds.Observe(time.Since(start).Seconds())
	msg := ""
	if err != nil {
		d.m.roundErrors.Inc()
		msg = err.Error()
		if msg != d.lastErr {
			d.logf("vgpu node: round skipped: %v", err)
		}
	}
	d.lastErr = msg
	if now.Sub(d.beat) >= time.Second || err != nil {
		d.beat = now
		hb := events.Heartbeat{PID: os.Getpid(), Started: d.started, Beat: now, Interval: d.o.Interval.String(), Grace: d.o.Policy.Grace.String(),
			Tolerance: fmt.Sprintf("%s + %.0f%% of the limit", bytesText(d.o.Policy.MemoryTolerance), d.o.Policy.MemoryToleranceFrac*100),
			Metrics:   d.o.MetricsURL, Error: msg, Shares: d.shares, GPUs: d.gpus(), MPS: d.mpsStates()}
		if err := d.ev.Beat(hb); err != nil {
			d.logf("vgpu node: heartbeat: %v", err)
		}
	}
}

// round reads the host once (view) and runs roundSteps over what it read.
func (d *Daemon) round(now time.Time) error {
	v, err := d.view(now)
	if err != nil {
		return err
	}
	for _, s := range roundSteps {
		s.run(d, v)
	}
	return nil
}

// view reads the driver's samples and the tenants, attributes each
// process, and builds the enforcement input: what every step of the round
// reads.
func (d *Daemon) view(now time.Time) (*roundView, error) {
	samples, err := d.o.Source.Read()
	if err != nil {
		return nil, err
	}
	m, err := procmap.Load(d.o.StateDir, d.o.ProcRoot)
	if err != nil {
		return nil, err
	}
	if err := m.Bind(d.o.StateDir); err != nil {
		d.logf("vgpu node: recording a container's cgroup: %v", err)
	}
	in := enforce.Input{Now: now, Frozen: map[string]bool{}, Freezing: map[string]bool{}}
	judged := d.judgedByGrants()
	devIndex := map[string]map[string]int{} // container -> uuid -> index
	spatialShare := map[string]int{}        // spatial GPU -> the largest share of its tenants
	byID := map[string]*procmap.Container{}
	for _, c := range m.Containers {
		if c.Record == nil {
			continue
		}
		byID[c.ID] = c
		ec := enforce.Container{ID: c.ID, Limits: map[string]enforce.Limit{}}
		ec.Cgroup = c.Cgroup
		devIndex[c.ID] = map[string]int{}
		compute := false
		for _, dv := range c.Record.Devices {
			pct := dv.Compute
			if pct <= 0 {
				pct = 100
			}
			if g, ok := judged[[2]string{c.ID, dv.GPU.UUID}]; ok && g < pct {
				pct = g // a neighbour is starved: held to its grant (arbitrate.go)
			}
			if dv.Mode.IsSpatial() {
				// MPS holds the SM share (and NVML charges the time to
				// the server): judged by the client rule, not by samples
				spatialShare[dv.GPU.UUID] = max(spatialShare[dv.GPU.UUID], dv.Compute)
				pct = 100
			}
			compute = compute || pct < 100
			ec.Limits[dv.GPU.UUID] = enforce.Limit{MemoryBytes: dv.Memory, ComputePct: pct, Spatial: dv.Mode.IsSpatial()}
			devIndex[c.ID][dv.GPU.UUID] = dv.Index
		}
		if compute && ec.Cgroup != "" {
			if frozen, err := d.frz.State(ec.Cgroup); err == nil {
				in.Frozen[ec.Cgroup] = frozen
				if frozen {
					// unreadable: not counted as stuck (no escalation on a read error)
					held, err := d.frz.Holds(ec.Cgroup)
					in.Freezing[ec.Cgroup] = err == nil && !held
				}
			}
		}
		in.Containers = append(in.Containers, ec)
	}
	d.m.procMem.Reset()
	d.orph.exited = map[int]string{}
	owner := map[int]string{}
	for _, s := range samples {
		id, ok := owner[s.HostPID]
		if !ok {
			if c := m.Owner(s.HostPID); c != nil && byID[c.ID] != nil && !d.mpsServer(s.HostPID) {
				id = c.ID
			}
			id = d.orphanOf(s.HostPID, id, byID)
			owner[s.HostPID] = id
		}
		in.Procs = append(in.Procs, enforce.Proc{HostPID: s.HostPID, GPU: s.GPU, UsedBytes: s.UsedBytes, SMUtil: s.SMUtil, Container: id, MPS: s.MPS})
		if id != "" {
			d.m.procMem.WithLabelValues(id, s.GPU, fmt.Sprint(s.HostPID)).Set(float64(s.UsedBytes))
		}
	}
	return &roundView{now: now, samples: samples, tenants: m, byID: byID, owner: owner, in: in, devIndex: devIndex, spatialShare: spatialShare}, nil
}

// judgedByGrants: what enforcement holds tenants to beside a starved
// neighbour (arbitration.judged), from the policy's shares of last round.
func (d *Daemon) judgedByGrants() map[[2]string]int {
	shares := map[[2]string]float64{}
	for _, sh := range d.policy.Shares() {
		shares[[2]string{sh.Container, sh.GPU}] = sh.Percent
	}
	return d.arb.judged(shares, uint64(d.o.Policy.Window), d.o.Policy.ComputeSlack, d.o.Mono())
}

// writePidMaps brings each limited container's host pid map up to date with
// the GPU processes attributed to it this round (owner: host pid ->
// container id, "" for none). A container with no GPU process gets an
// empty map. A process that exited before its NSpid was read is left out;
// the next round sees it gone from NVML too.
func (d *Daemon) writePidMaps(byID map[string]*procmap.Container, owner map[int]string) {
	want := make(map[string]map[int]int, len(byID))
	for id := range byID {
		want[id] = map[int]int{}
	}
	for hostPID, id := range owner {
		if id == "" {
			continue
		}
		if pid, err := nsPID(d.o.ProcRoot, hostPID); err == nil {
			want[id][hostPID] = pid
		}
	}
	for id, m := range want {
		if old, ok := d.pidMaps[id]; ok && sameMap(old, m) {
			continue
		}
		if err := hostpids.Write(d.o.StateDir, id, m); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // removed since the view listed it (a vgpu exec that just ended): nothing to keep current
			}
			if msg := err.Error(); msg != d.pidErr[id] {
				d.pidErr[id] = msg
				d.logf("vgpu node: pid map of %s: %v", id, err)
			}
			continue
		}
		delete(d.pidErr, id)
		d.pidMaps[id] = m
	}
	for id := range d.pidMaps {
		if _, ok := want[id]; !ok {
			delete(d.pidMaps, id) // gone: its state directory goes with it
			delete(d.pidErr, id)
		}
	}
}

// nsPID is hostPID's pid in its own (innermost) pid namespace: the last
// field of the NSpid line of /proc/<hostPID>/status.
func nsPID(procRoot string, hostPID int) (int, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(hostPID), "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "NSpid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		pid, err := strconv.Atoi(f[len(f)-1])
		if err != nil || pid <= 0 {
			return 0, fmt.Errorf("pid %d: NSpid %q", hostPID, rest)
		}
		return pid, nil
	}
	return 0, fmt.Errorf("pid %d: no NSpid line in status", hostPID)
}

func sameMap(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func (d *Daemon) act(now time.Time, m *procmap.Map, a enforce.Action, dev int) {
	a = d.wholeIfExited(m, a)
	var err error
	switch a.Kind {
	case enforce.Kill:
		// The pid must still be the container's: never kill a reused pid.
		c := m.Owner(a.PID)
		if c == nil && a.Reason == ReasonBorrow {
			c = m.ExecOwner(a.PID) // a vgpu exec borrower's (memOwners)
		}
		if c == nil || c.ID != a.Container {
			err = fmt.Errorf("pid %d is no longer in the container", a.PID)
			break
		}
		d.thawBelow(c.Cgroup)
		err = d.o.Kill(a.PID)
		if errors.Is(err, unix.ESRCH) {
			err = nil // it died by itself meanwhile
		}
		d.m.kills.WithLabelValues(a.Container, a.GPU, a.Reason).Inc()
	case enforce.Freeze:
		err = d.frz.Freeze(a.Cgroup)
		switch {
		case err == nil:
			d.m.freezes.WithLabelValues(a.Container, a.GPU).Inc()
		case !errors.Is(err, freezer.ErrForeign) && !errors.Is(err, os.ErrNotExist):
			// paused by someone else meanwhile: the next round sees it and
			// leaves it alone; its cgroup gone: so is the container. Any
			// other failure is escalated, not retried.
			d.policy.FreezeFailed(a.Container, err.Error())
		}
	case enforce.Thaw:
		err = d.frz.Thaw(a.Cgroup)
	case enforce.Escalate:
		d.m.escalations.WithLabelValues(a.Container, a.GPU).Inc()
	case enforce.KillAll:
		err = d.killAll(m, a)
		d.m.kills.WithLabelValues(a.Container, a.GPU, a.Reason).Inc()
	}
	line := a.String()
	if a.Kind == enforce.Kill && a.Reason == enforce.ReasonMemory {
		line = fmt.Sprintf("killed pid %d of %s: %s on GPU %d (%s) > limit %s: %s", a.PID, a.Container, bytesText(a.Used), dev, a.GPU, bytesText(a.Limit), a.Detail)
	}
	if a.Kind == enforce.Kill && a.Reason == ReasonBorrow {
		line = fmt.Sprintf("killed pid %d of %s to take borrowed memory back on GPU %d (%s): %s", a.PID, a.Container, dev, a.GPU, a.Detail)
	}
	if err != nil {
		line += ": " + err.Error()
	}
	if a.Cycle && err == nil {
		return // the duty cycle's own freezes and thaws: metrics only
	}
	d.logf("vgpu node: %s", line)
	e := events.Event{Time: now.UTC(), Kind: string(a.Kind), Container: a.Container, GPU: a.GPU, Device: dev, PID: a.PID,
		Reason: a.Reason, Used: a.Used, Limit: a.Limit, Detail: a.Detail, Priority: priorityOf(m, a.Container, a.GPU)}
	if err != nil {
		e.Error = err.Error()
	}
	if werr := d.ev.Append(e); werr != nil {
		d.logf("vgpu node: events file: %v", werr)
	}
}

// thawBelow thaws the cgroups a tenant froze below its container's, so
// that a kill lands (logged: a tenant that does it is hiding from one).
func (d *Daemon) thawBelow(cg string) {
	if cg == "" {
		return
	}
	if thawed, err := d.frz.ThawBelow(cg); len(thawed) > 0 || (err != nil && !errors.Is(err, os.ErrNotExist)) {
		d.logf("vgpu node: thawed cgroups frozen inside %s before a kill: %v (%v)", cg, thawed, err)
	}
}

// killAll kills a container whole: every process of its cgroup
// (cgroup.kill), or, its cgroup not known, every GPU process of it the
// driver lists (each checked to be still the container's).
func (d *Daemon) killAll(m *procmap.Map, a enforce.Action) error {
	var errs []error
	if a.Cgroup != "" {
		if _, err := d.frz.KillAll(a.Cgroup); err != nil {
			errs = append(errs, err)
		}
		// a frozen task dies only once thawed (v1): ours thawed too
		if d.frz.Ours(a.Cgroup) {
			if err := d.frz.Thaw(a.Cgroup); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, pid := range a.Pids {
		if c := m.Owner(pid); c == nil || c.ID != a.Container {
			continue
		}
		if err := d.o.Kill(pid); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

func (d *Daemon) logf(format string, args ...any) {
	fmt.Fprintf(d.o.Log, "%s "+format+"\n", append([]any{time.Now().UTC().Format(time.RFC3339Nano)}, args...)...)
}

func bytesText(n uint64) string {
	const gi, mi = 1 << 30, 1 << 20
	switch {
	case n >= gi:
		return fmt.Sprintf("%.1f GiB", float64(n)/gi)
	case n >= mi:
		return fmt.Sprintf("%.0f MiB", float64(n)/mi)
	}
	return fmt.Sprintf("%d B", n)
}
