package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/borrow"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/checkpoint"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/procmap"
)

// Taking borrowed memory back by suspension (memory_reclaim = "suspend",
// docs/node.md "Suspension"): where a kill would take a borrower's process,
// the process is suspended to host memory through the driver's checkpoint
// API and restored once its whole memory fits again. The driver's calls run
// in helper processes (internal/node/checkpoint), each started from a
// goroutine with its deadline; a round never waits on one, it drains their
// results at its start. A process that cannot be suspended is killed as
// before, the reason in the event.
//
// The suspended set is written to <state_dir>/.node/suspended.json at every
// change, so a restarted vgpu node restores them (or reports them gone).

// Checkpointer runs one checkpoint operation on a process
// (checkpoint.Runner; a fake in tests).
type Checkpointer interface {
	Run(ctx context.Context, op checkpoint.Op, pid int, deadline time.Duration) (checkpoint.Result, error)
}

// SuspendOptions turn suspension on (Options.Suspend).
type SuspendOptions struct {
	Runner Checkpointer
	// HostMemory caps the host memory the suspended processes' copies
	// hold together (bytes).
	HostMemory uint64
	// MaxTime: a process suspended longer is killed (0: no limit).
	MaxTime time.Duration
	// InOrder: the process suspended longest is restored first, the
	// others wait behind it (suspend.restore_order = "longest").
	InOrder bool
	// CopyRate is what a checkpoint copies per second (bytes; 0:
	// DefaultCopyRate), for the owner's wait and the helpers' deadlines.
	CopyRate uint64
	// LockTimeout is how long a lock waits for work in flight (the
	// helper's; 0: 10 s), for the helpers' deadlines.
	LockTimeout time.Duration
}

// DefaultCopyRate is the slowest checkpoint copy the probe measured
// (docs/results.md, "the driver's checkpoint API"), rounded down.
const DefaultCopyRate = 1 << 30

// roomBase is the owner's wait beside a suspension's copy time: the
// library's own wait. roomMax: the furthest ahead the library believes a
// room deadline (its VGPU_ROOM_MAX_NS).
const (
	roomBase = 2 * time.Second
	roomMax  = 180 * time.Second
)

// The causes of a take-back by kill (the metric's label; the event's
// detail says them in words).
const (
	causeKillPolicy   = "memory_reclaim_kill"
	causeNoAPI        = "no_checkpoint_api"
	causeHostMemory   = "host_memory_cap"
	causeCgroupMemory = "cgroup_memory"
	causeLockTimeout  = "lock_timeout"
	causeRefused      = "driver_refused"
	causeSpatial      = "spatial"
	causeFrozen       = "frozen"
	causeHelper       = "helper_failed"
	causeMaxTime      = "max_time"
	causeRestore      = "restore_failed"
)

// SuspendedProc is one process held on the host by a suspension, as the
// state directory records it (events.SuspendedFile).
type SuspendedProc = events.Suspended

// ReadSuspended reads the suspended set of a state directory.
func ReadSuspended(stateDir string) ([]SuspendedProc, error) { return events.ReadSuspended(stateDir) }

// SuspendedRecord is where the suspended set lives.
func SuspendedRecord(stateDir string) string {
	return filepath.Join(stateDir, config.StateNode, events.SuspendedFile)
}

// roomWait is an owner's wait for the suspensions started for it.
type roomWait struct {
	pids  map[int]bool // suspended for it, the driver not done yet
	until uint64       // room_until_ns as published
}

type helperDone struct {
	op  checkpoint.Op
	p   SuspendedProc
	res checkpoint.Result
	err error
}

// suspensions is the state between rounds.
type suspensions struct {
	held    map[int]SuspendedProc // by host pid: suspended, or being suspended
	resume  map[int]bool          // a restore's helper runs on it
	refused map[int]string        // the driver refused it once: not tried again
	done    chan helperDone
	// room: the owners whose share file says to wait for a suspension, by
	// share file path
	room map[string]*roomWait
	// ctx of the helpers: never cancelled, a helper outlives a stopping
	// vgpu node (the record tells the next one what it did)
	ctx    context.Context
	loaded bool
}

func (s *suspensions) init() {
	if s.held == nil {
		s.held, s.resume, s.refused, s.room = map[int]SuspendedProc{}, map[int]bool{}, map[int]string{}, map[string]*roomWait{}
		s.done = make(chan helperDone, 64)
		s.ctx = context.Background()
	}
}

// suspendOn: suspension is on for this daemon.
func (d *Daemon) suspendOn() bool { return d.o.Suspend != nil && d.o.Suspend.Runner != nil }

func (d *Daemon) copyTime(bytes uint64) time.Duration {
	rate := uint64(DefaultCopyRate)
	if d.o.Suspend != nil && d.o.Suspend.CopyRate > 0 {
		rate = d.o.Suspend.CopyRate
	}
	return time.Duration(float64(bytes) / float64(rate) * float64(time.Second))
}

// helperDeadline: the lock's timeout, three times the copy at the rate
// measured, and 10 s for the helper's own start.
func (d *Daemon) helperDeadline(bytes uint64) time.Duration {
	lock := 10 * time.Second
	if d.o.Suspend.LockTimeout > 0 {
		lock = d.o.Suspend.LockTimeout
	}
	return lock + 3*d.copyTime(bytes) + 10*time.Second
}

// loadSuspended takes over what an earlier vgpu node left suspended: a
// process still there (same pid, same start) is restored when it fits; one
// gone is reported and dropped.
func (d *Daemon) loadSuspended() {
	s := &d.sus
	s.init()
	if s.loaded {
		return
	}
	s.loaded = true
	ps, err := ReadSuspended(d.o.StateDir)
	if err != nil {
		d.logf("vgpu node: the suspended processes an earlier vgpu node left: %v", err)
		return
	}
	for _, p := range ps {
		if st, ok := procStart(d.o.ProcRoot, p.PID); !ok || st != p.Start {
			d.logf("vgpu node: pid %d of %s, suspended by an earlier vgpu node, is gone", p.PID, p.Container)
			continue
		}
		p.Suspending = false // its state is asked again by the restore
		s.held[p.PID] = p
		then := "restored when it fits"
		if !d.suspendOn() {
			// no helper to restore it with: it waits, shown in vgpu status,
			// until a vgpu node with suspension on restores it or it is
			// killed
			then = "not restored: this vgpu node does not suspend (" + cmp.Or(d.noSuspendWhy, `memory_reclaim = "kill"`) + ")"
		}
		d.logf("vgpu node: pid %d of %s was suspended by an earlier vgpu node (%s on the host since %s): %s",
			p.PID, p.Container, bytesText(p.Bytes), p.Since.UTC().Format(time.RFC3339), then)
	}
	d.saveSuspended()
}

func (d *Daemon) saveSuspended() {
	ps := d.Suspended()
	if err := events.WriteSuspended(d.o.StateDir, ps); err != nil {
		d.logf("vgpu node: recording the suspended processes: %v", err)
	}
	var host uint64
	for _, p := range ps {
		host += p.Bytes
	}
	d.m.suspended.Set(float64(len(ps)))
	d.m.suspendedBytes.Set(float64(host))
}

// Suspended is the suspended set, by pid.
func (d *Daemon) Suspended() []SuspendedProc {
	out := make([]SuspendedProc, 0, len(d.sus.held))
	for _, p := range d.sus.held {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// hostHeld is what the suspended processes' copies hold.
func (d *Daemon) hostHeld() uint64 {
	var n uint64
	for _, p := range d.sus.held {
		n += p.Bytes
	}
	return n
}

// suspendedOn is the suspended set on GPU uuid, as borrow.Suspended.
func (d *Daemon) suspendedOn(uuid string) []borrow.Suspended {
	var out []borrow.Suspended
	for _, p := range d.sus.held {
		if p.GPU == uuid {
			out = append(out, borrow.Suspended{ID: p.Container, PID: p.PID, Bytes: p.Bytes, Since: p.Since})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// suspendable is borrow.Suspendable for one round on GPU uuid: a process
// is suspended when the driver has the API, it was not refused before,
// its tenant is not spatial (an MPS client cannot be locked) nor frozen,
// the host memory cap has room for its copy, and so has its container's
// memory cgroup (the copy is charged to it). cause gets the kill's cause.
func (d *Daemon) suspendable(ts []memTenant, extra *uint64, cause map[int]string) borrow.Suspendable {
	return func(id string, p borrow.Proc) (bool, string) {
		no := func(c, why string) (bool, string) {
			cause[p.PID] = c
			return false, why
		}
		if !d.suspendOn() {
			if d.noSuspendWhy != "" {
				return no(causeNoAPI, d.noSuspendWhy)
			}
			return no(causeKillPolicy, `memory_reclaim = "kill"`)
		}
		if why, ok := d.sus.refused[p.PID]; ok {
			return no(causeRefused, "the driver refused to suspend it before: "+why)
		}
		var t *memTenant
		for i := range ts {
			if ts[i].c.ID == id {
				t = &ts[i]
			}
		}
		if t == nil {
			return no(causeHelper, "its tenant is not known this round")
		}
		if t.spatial {
			return no(causeSpatial, "an MPS client (spatial GPU) cannot be suspended")
		}
		if cg := t.c.Cgroup; cg != "" {
			if frozen, err := d.frz.State(cg); err == nil && frozen {
				return no(causeFrozen, "its container is frozen")
			}
			if room, ok := cgroupRoom(d.frz.Root, cg); ok && room < p.Used {
				return no(causeCgroupMemory, fmt.Sprintf("its container's memory cgroup has %s free, its host copy needs %s", bytesText(room), bytesText(p.Used)))
			}
		}
		if host := d.hostHeld() + *extra + p.Used; host > d.o.Suspend.HostMemory {
			return no(causeHostMemory, fmt.Sprintf("the suspensions' host memory would reach %s, past suspend.host_memory %s", bytesText(host), bytesText(d.o.Suspend.HostMemory)))
		}
		*extra += p.Used
		return true, ""
	}
}

// cgroupRoom is memory.max less memory.current of the cgroup cg (cgroup
// v2); ok false: no limit, or not readable.
func cgroupRoom(root, cg string) (uint64, bool) {
	dir := filepath.Join(root, filepath.Clean("/"+cg))
	mx, err := os.ReadFile(filepath.Join(dir, "memory.max"))
	if err != nil {
		return 0, false
	}
	m, err := strconv.ParseUint(strings.TrimSpace(string(mx)), 10, 64)
	if err != nil {
		return 0, false // "max"
	}
	cur, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, false
	}
	c, err := strconv.ParseUint(strings.TrimSpace(string(cur)), 10, 64)
	if err != nil {
		return 0, false
	}
	return sub64(m, c), true
}

func sub64(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}

// procStart is field 22 of /proc/<pid>/stat (the start time in ticks).
func procStart(procRoot string, pid int) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return 0, false
	}
	n, err := strconv.ParseUint(f[19], 10, 64)
	return n, err == nil
}

// startSuspend starts a helper suspending p for the owner whose share file
// is ownerShare, and tells the owner's library to wait for it.
func (d *Daemon) startSuspend(p SuspendedProc, ownerShare string) {
	s := &d.sus
	p.Start, _ = procStart(d.o.ProcRoot, p.PID)
	p.Suspending = true
	s.held[p.PID] = p
	d.saveSuspended()
	if ownerShare != "" {
		w := s.room[ownerShare]
		if w == nil {
			w = &roomWait{pids: map[int]bool{}}
			s.room[ownerShare] = w
		}
		w.pids[p.PID] = true
		w.until = max(w.until, d.o.Mono()+uint64(min(roomBase+d.copyTime(p.Bytes), roomMax)))
		d.setRoomUntil(ownerShare, w.until)
	}
	d.logf("vgpu node: suspending pid %d of %s (%s on GPU %d, %s): %s", p.PID, p.Container, bytesText(p.Bytes), p.Device, p.GPU, p.For)
	r, ctx, deadline := d.o.Suspend.Runner, s.ctx, d.helperDeadline(p.Bytes)
	go func() {
		res, err := r.Run(ctx, checkpoint.Suspend, p.PID, deadline)
		s.done <- helperDone{op: checkpoint.Suspend, p: p, res: res, err: err}
	}()
}

func (d *Daemon) startResume(p SuspendedProc) {
	s := &d.sus
	s.resume[p.PID] = true
	d.logf("vgpu node: restoring pid %d of %s (%s on GPU %d, %s)", p.PID, p.Container, bytesText(p.Bytes), p.Device, p.GPU)
	r, ctx, deadline := d.o.Suspend.Runner, s.ctx, d.helperDeadline(p.Bytes)
	go func() {
		res, err := r.Run(ctx, checkpoint.Resume, p.PID, deadline)
		s.done <- helperDone{op: checkpoint.Resume, p: p, res: res, err: err}
	}()
}

// setRoomUntil publishes room_until_ns in the share file at path (0: the
// library's own wait again).
func (d *Daemon) setRoomUntil(path string, until uint64) {
	mp := d.bor.maps[path]
	if mp == nil {
		var err error
		if mp, err = arbiter.Map(path); err != nil {
			return // no share file of this release: the library's own 2 s
		}
		if d.bor.maps == nil {
			d.bor.maps = map[string]*arbiter.Mapped{}
		}
		d.bor.maps[path] = mp
	}
	mp.SetRoomUntil(until)
}

// drainSuspensions takes in the helpers' answers since the last round,
// kills what could not be suspended or restored, and what stayed
// suspended past suspend.max_time or whose process is gone.
func (d *Daemon) drainSuspensions(now time.Time, m *procmap.Map) {
	s := &d.sus
	s.init()
	changed := false
	for len(s.done) > 0 {
		changed = true
		d.helperAnswered(now, m, <-s.done) // this goroutine is the only reader
	}
	for pid, p := range s.held {
		if p.Suspending || s.resume[pid] {
			continue
		}
		if st, ok := procStart(d.o.ProcRoot, pid); !ok || st != p.Start {
			d.logf("vgpu node: pid %d of %s ended while suspended", pid, p.Container)
			delete(s.held, pid)
			changed = true
			continue
		}
		if mt := d.o.Suspend; mt != nil && mt.MaxTime > 0 && now.Sub(p.Since) > mt.MaxTime {
			delete(s.held, pid)
			changed = true
			d.killSuspended(now, m, p, causeMaxTime, fmt.Sprintf("suspended since %s, longer than suspend.max_time %v", p.Since.UTC().Format(time.RFC3339), mt.MaxTime))
		}
	}
	// While a suspension for it runs (a loaded host copies slower than
	// the rate measured), the owner's wait is kept 2 s ahead, within the
	// helper's deadline; once all landed the deadline runs out, then
	// the library's own wait is back.
	mono := d.o.Mono()
	for path, w := range s.room {
		for pid := range w.pids {
			if p, ok := s.held[pid]; !ok || !p.Suspending {
				delete(w.pids, pid)
			}
		}
		switch {
		case len(w.pids) > 0 && mono+uint64(roomBase) > w.until:
			w.until = mono + uint64(roomBase)
			d.setRoomUntil(path, w.until)
		case len(w.pids) == 0 && mono >= w.until:
			d.setRoomUntil(path, 0)
			delete(s.room, path)
		}
	}
	if changed {
		d.saveSuspended()
	}
}

func (d *Daemon) helperAnswered(now time.Time, m *procmap.Map, r helperDone) {
	s := &d.sus
	p := r.p
	d.m.checkpointSeconds.WithLabelValues(string(r.op)).Observe(r.res.Elapsed.Seconds())
	switch r.op {
	case checkpoint.Suspend:
		switch {
		case r.err == nil && r.res.Done:
			p.Suspending = false
			p.Since = now
			s.held[p.PID] = p
			d.m.checkpoints.WithLabelValues("suspend", "done").Inc()
			d.event(now, events.Event{Kind: "suspend", Container: p.Container, GPU: p.GPU, Device: p.Device, PID: p.PID, Reason: ReasonBorrow,
				Used: p.Bytes, Detail: fmt.Sprintf("suspended %s to host memory in %v: %s", bytesText(p.Bytes), r.res.Elapsed.Round(time.Millisecond), p.For)})
			return
		case errors.Is(r.err, checkpoint.ErrNoAPI):
			d.logf("vgpu node: %v: taking memory back by kills from now on", r.err)
			d.o.Suspend = nil
			d.noSuspendWhy = r.err.Error()
			delete(s.held, p.PID)
			d.m.checkpoints.WithLabelValues("suspend", "failed").Inc()
			d.killSuspended(now, m, p, causeNoAPI, "the driver has no checkpoint API")
			return
		}
		delete(s.held, p.PID)
		d.m.checkpoints.WithLabelValues("suspend", "failed").Inc()
		cause, why := causeHelper, ""
		switch {
		case r.err != nil:
			why = r.err.Error()
		case r.res.Busy():
			cause, why = causeLockTimeout, "the driver could not lock it within the lock timeout: "+r.res.String()
		default:
			cause, why = causeRefused, r.res.String()
			s.refused[p.PID] = why
		}
		d.killSuspended(now, m, p, cause, "not suspended: "+why)
	case checkpoint.Resume:
		delete(s.resume, p.PID)
		if _, still := s.held[p.PID]; !still {
			return // killed meanwhile
		}
		switch {
		case r.err == nil && (r.res.Done || r.res.State == checkpoint.StateRunning):
			delete(s.held, p.PID)
			d.m.checkpoints.WithLabelValues("restore", "done").Inc()
			d.event(now, events.Event{Kind: "restore", Container: p.Container, GPU: p.GPU, Device: p.Device, PID: p.PID, Reason: ReasonBorrow,
				Used: p.Bytes, Detail: fmt.Sprintf("restored %s to the GPU in %v after %v suspended", bytesText(p.Bytes), r.res.Elapsed.Round(time.Millisecond), now.Sub(p.Since).Round(time.Millisecond))})
		default:
			delete(s.held, p.PID)
			d.m.checkpoints.WithLabelValues("restore", "failed").Inc()
			why := ""
			if r.err != nil {
				why = r.err.Error()
			} else {
				why = r.res.String()
			}
			d.killSuspended(now, m, p, causeRestore, "its restore failed: "+why)
		}
	}
}

// killSuspended kills a process that was to be, or was, suspended.
func (d *Daemon) killSuspended(now time.Time, m *procmap.Map, p SuspendedProc, cause, why string) {
	d.m.reclaimKills.WithLabelValues(cause).Inc()
	if d.bor.reclaimed == nil {
		d.bor.reclaimed = map[int]time.Time{}
		d.bor.lastWhy = map[string]string{}
	}
	d.bor.reclaimed[p.PID] = now.Add(5 * time.Second) // the driver lists it a while yet
	d.act(now, m, enforce.Action{Kind: enforce.Kill, Container: p.Container, PID: p.PID, GPU: p.GPU, Reason: ReasonBorrow,
		Used: p.Bytes, Detail: why + "; " + p.For}, p.Device)
}

// event appends e, logged.
func (d *Daemon) event(now time.Time, e events.Event) {
	e.Time = now.UTC()
	d.logf("vgpu node: %s pid %d of %s: %s", e.Kind, e.PID, e.Container, e.Detail)
	if err := d.ev.Append(e); err != nil {
		d.logf("vgpu node: events file: %v", err)
	}
}

// restoreRound starts the restores that fit on GPU uuid now
// (borrow.Restores: the whole process, ahead of any new borrowing).
func (d *Daemon) restoreRound(uuid string, total, outside uint64, in []borrow.Tenant) {
	if !d.suspendOn() {
		return
	}
	var ready []borrow.Suspended
	var inFlight uint64
	for _, s := range d.suspendedOn(uuid) {
		p := d.sus.held[s.PID]
		if p.Suspending || d.sus.resume[s.PID] {
			if d.o.Suspend.InOrder {
				return // one in flight: the next round sees where it landed
			}
			if !p.Suspending {
				inFlight = sat(inFlight, s.Bytes) // a restore in flight: taken
			}
			continue
		}
		ready = append(ready, s)
	}
	if len(ready) == 0 {
		return
	}
	// A restore that lacks room fails for good: the driver's own memory
	// counts (withDriverOwn), and a restore in flight counts whole (what
	// of it has landed may count twice: room kept, never room missing).
	var tenants uint64
	for _, t := range in {
		tenants = sat(tenants, t.Used)
	}
	outside = sat(d.withDriverOwn(uuid, outside, tenants), inFlight)
	claims := outside
	for _, t := range in {
		claims = sat(claims, t.Claim())
	}
	for _, s := range borrow.Restores(total, outside, in, ready, d.o.Suspend.InOrder) {
		d.logf("vgpu node: GPU %s has %s beside every tenant's claim and %s held outside vgpu: pid %d of %s fits again",
			uuid, bytesText(sub64(total, claims)), bytesText(outside), s.PID, s.ID)
		d.startResume(d.sus.held[s.PID])
	}
}

// takeBack takes memory back for the owner t (need bytes missing on GPU
// uuid) under memory_reclaim = "suspend" (borrow.Reclaim): the fewest
// processes of the borrowers most over their request, each suspended when
// it can be, else killed with the reason; the room is held for the owner
// and its library told to wait for the copies. false: nothing taken.
func (d *Daemon) takeBack(now time.Time, m *procmap.Map, uuid string, total, outside uint64, t memTenant, need uint64, ts []memTenant, hs []borrow.Holder, samples []nvmlfeed.Sample, owner map[int]string) bool {
	cause := map[int]string{}
	var extra uint64
	takes, why, ok := borrow.Reclaim(total, outside, t.in, need, hs, d.suspendable(ts, &extra, cause))
	if !ok {
		if why != d.bor.lastWhy[t.c.ID] {
			d.logf("vgpu node: %s", why)
		}
		d.bor.lastWhy[t.c.ID] = why
		return false
	}
	delete(d.bor.lastWhy, t.c.ID)
	devOf := map[string]int{}
	for _, u := range ts {
		devOf[u.in.ID] = u.dev
	}
	for _, tk := range takes {
		if tk.Suspend {
			d.startSuspend(SuspendedProc{Container: tk.ID, PID: tk.PID, GPU: uuid, Device: devOf[tk.ID], Bytes: tk.Bytes, Since: now, For: tk.Why},
				t.c.Places.ShareFile())
			d.hold(now, uuid, t.c.ID, need)
			d.cutToRequest(uuid, tk.ID)
			continue
		}
		d.bor.reclaimed[tk.PID] = now.Add(5 * time.Second)
		c := cause[tk.PID]
		if c == "" {
			c = causeNoAPI
		}
		d.m.reclaimKills.WithLabelValues(c).Inc()
		var v borrow.Tenant
		for _, u := range ts {
			if u.in.ID == tk.ID {
				v = u.in
			}
		}
		d.actTakeBack(now, m, enforce.Action{Kind: enforce.Kill, Container: tk.ID, PID: tk.PID, GPU: uuid, Reason: ReasonBorrow,
			Used: v.Used, Limit: v.Request, Detail: tk.Why}, devOf[tk.ID], t.c.ID, need, samples, owner)
	}
	return true
}
