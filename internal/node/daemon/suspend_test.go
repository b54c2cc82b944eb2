package daemon

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vgpu-dev/vgpu/internal/borrow"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/checkpoint"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/procmap"
)

// fakeRunner stands in for the checkpoint helpers: each call waits for the
// test's answer, so a round that waited on one would hang the test.
type fakeRunner struct {
	mu    sync.Mutex
	calls []string
	reply chan checkpoint.Result
}

func (r *fakeRunner) Run(_ context.Context, op checkpoint.Op, pid int, _ time.Duration) (checkpoint.Result, error) {
	r.mu.Lock()
	r.calls = append(r.calls, string(op)+" "+strconv.Itoa(pid))
	r.mu.Unlock()
	res := <-r.reply
	res.Op, res.PID = op, pid
	return res, nil
}

// awaitCalls gives the daemon's goroutines up to 200 ms to make n helper
// calls, and returns the calls made by then.
func (r *fakeRunner) awaitCalls(n int) []string {
	for i := 0; i < 100 && len(r.called()) < n; i++ {
		time.Sleep(2 * time.Millisecond)
	}
	return r.called()
}

func (r *fakeRunner) called() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// answer replies to the call in flight and waits until the daemon has it.
func (p *borrowPair) answer(t *testing.T, r *fakeRunner, res checkpoint.Result) {
	t.Helper()
	r.reply <- res
	for i := 0; i < 500 && len(p.d.sus.done) == 0; i++ {
		time.Sleep(2 * time.Millisecond)
	}
	if len(p.d.sus.done) == 0 {
		t.Fatal("the helper's answer did not reach the daemon")
	}
}

// writeStat gives a fake process a start time.
func (h *host) writeStat(pid int) {
	st := "(x) S" + strings.Repeat(" 0", 18) + " 4242 0 0\n"
	if err := os.WriteFile(filepath.Join(h.proc, strconv.Itoa(pid), "stat"), []byte(strconv.Itoa(pid)+" "+st), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func roomUntil(t *testing.T, path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[40:])
}

// suspendPair is borrowPair with suspension on, c1 borrowing 16 GiB above
// its request in pids 101 (12 GiB) and 102 (20), c2 holding 4 and waiting
// for 8 with 4 free.
func suspendPair(t *testing.T, host uint64) (*borrowPair, *fakeRunner) {
	const gib = uint64(1) << 30
	p := newBorrowPair(t, true)
	r := &fakeRunner{reply: make(chan checkpoint.Result)}
	p.d.o.Suspend = &SuspendOptions{Runner: r, HostMemory: host, InOrder: true}
	for _, pid := range []int{101, 102, 200, 201} {
		p.host.writeStat(pid)
	}
	p.f.samples = append(p.f.samples[:1], nvmlfeed.Sample{HostPID: 101, GPU: uuid, UsedBytes: 12 * gib},
		nvmlfeed.Sample{HostPID: 102, GPU: uuid, UsedBytes: 20 * gib}, nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 4 * gib})
	writeNeed(t, filepath.Join(p.host.state, "c2", "shared"), 5, 8<<10)
	return p, r
}

func (p *borrowPair) round() {
	p.now = p.now.Add(100 * time.Millisecond)
	p.d.Round()
}

// memory_reclaim = "suspend" on a fake driver and a fake helper: the owner
// c2 waits for 8 GiB; c1's largest process is suspended, not killed, the
// round never waiting on the helper; c2's share file tells its library to
// wait 2 s plus the copy (20 GiB at 1 GiB/s); once suspended (an event),
// what its restore is owed is held from c1's ceiling; it is restored only
// when the whole process fits again (c2 gone), and the record follows.
func TestDaemonSuspendsForOwnerAndRestores(t *testing.T) {
	const gib = uint64(1) << 30
	p, r := suspendPair(t, 64*gib)
	d, f, h := p.d, p.f, p.host
	mono := uint64(5e12)
	d.o.Mono = func() uint64 { return mono }
	p.round()
	if got := r.awaitCalls(1); len(got) != 1 || got[0] != "suspend 102" {
		t.Fatalf("helper calls %v, want suspend 102\n%s", got, p.log.String())
	}
	if len(p.killed) != 0 {
		t.Fatalf("killed %v, want a suspension", p.killed)
	}
	c2share := filepath.Join(h.state, "c2", "host", "grant")
	if got, want := roomUntil(t, c2share), uint64(5e12)+uint64(22*time.Second); got != want {
		t.Errorf("c2's room_until_ns %d, want now + 2 s + 20 GiB at 1 GiB/s = %d", got, want)
	}
	mono += uint64(21 * time.Second) // a slow copy: the owner's wait is kept 2 s ahead
	p.round()                        // the helper has not answered: nothing more is done
	if got := r.called(); len(got) != 1 || len(p.killed) != 0 {
		t.Fatalf("a second round with the suspension in flight: calls %v, kills %v", got, p.killed)
	}
	if got, want := roomUntil(t, c2share), mono+uint64(2*time.Second); got != want {
		t.Errorf("c2's room_until_ns %d with the suspension still running, want now + 2 s = %d", got, want)
	}
	p.answer(t, r, checkpoint.Result{Done: true, State: checkpoint.StateCheckpointed, Elapsed: 20 * time.Second})
	f.samples = append(f.samples[:2], nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 12 * gib}) // 102 off the GPU; c2 took its 8
	writeNeed(t, filepath.Join(h.state, "c2", "shared"), 5, 0)
	p.round()
	evs, _ := events.Read(h.state)
	var sus *events.Event
	for i, e := range evs {
		if e.Kind == "suspend" {
			sus = &evs[i]
		}
	}
	if sus == nil || sus.PID != 102 || sus.Container != "c1" || !strings.Contains(sus.Detail, "c2 needs 8 GiB") {
		t.Fatalf("suspend event %+v, want pid 102 of c1 for c2\n%+v", sus, evs)
	}
	if got, want := roomUntil(t, c2share), mono+uint64(2*time.Second); got != want {
		t.Errorf("c2's room_until_ns %d just after the suspension landed, want it to run out at %d", got, want)
	}
	mono += uint64(2 * time.Second)
	p.round()
	if got := roomUntil(t, c2share); got != 0 {
		t.Errorf("c2's room_until_ns %d once it ran out, want 0 (the library's own wait)", got)
	}
	rec, err := ReadSuspended(h.state)
	if err != nil || len(rec) != 1 || rec[0].PID != 102 || rec[0].Bytes != 20*gib || rec[0].Suspending {
		t.Fatalf("the suspended record %+v (%v), want pid 102 with 20 GiB", rec, err)
	}
	if v := testutil.ToFloat64(d.m.suspendedBytes); v != float64(20*gib) {
		t.Errorf("vgpu_node_suspended_host_bytes %v, want 20 GiB", v)
	}
	// 140 - 100 outside - 12 - 12 = 16 free, all of it owed to 102's restore
	if c := d.MemoryCeilings()["c1"][0]; c != 16*gib {
		t.Errorf("c1's ceiling %d GiB while 102 is owed 16, want its request 16", c/gib)
	}
	p.round()
	if got := r.called(); len(got) != 1 {
		t.Fatalf("calls %v: restored while c2's request keeps the room", got)
	}
	// c2 ends: its request no longer claims the room
	if err := os.RemoveAll(filepath.Join(h.state, "c2")); err != nil {
		t.Fatal(err)
	}
	f.samples = f.samples[:2]
	p.round()
	if got := r.awaitCalls(2); len(got) != 2 || got[1] != "resume 102" {
		t.Fatalf("calls %v, want resume 102 once c2 is gone\n%s", got, p.log.String())
	}
	p.answer(t, r, checkpoint.Result{Done: true, State: checkpoint.StateRunning, Elapsed: time.Second})
	p.round()
	if rec, _ := ReadSuspended(h.state); len(rec) != 0 {
		t.Errorf("suspended record %+v after the restore, want none", rec)
	}
	evs, _ = events.Read(h.state)
	if e := evs[len(evs)-1]; e.Kind != "restore" || e.PID != 102 {
		t.Errorf("last event %+v, want the restore of 102", e)
	}
	if len(p.killed) != 0 {
		t.Errorf("killed %v", p.killed)
	}
}

// The driver keeps memory that no process lists (on an H200 about 620 MiB
// beside one process): NVML's used figure counts it, the processes'
// figures do not. An owner short by less than that must still get its
// take-back, and a restore must leave it room (one that lacks room fails
// for good).
func TestDaemonCountsTheDriversOwnMemory(t *testing.T) {
	const gib, mib = uint64(1) << 30, uint64(1) << 20
	const own = 620 * mib
	// 140 GiB: 100 outside, c1 12 + 20, c2 4: 4 GiB free by the processes'
	// figures. c2 waits for 3.5 GiB.
	p, r := suspendPair(t, 64*gib)
	writeNeed(t, filepath.Join(p.host.state, "c2", "shared"), 5, 3584)
	p.f.used = 136 * gib // the driver counts nothing of its own: the room is there
	p.round()
	if got := r.called(); len(got) != 0 || len(p.killed) != 0 {
		t.Fatalf("calls %v, kills %v with 4 GiB free for a need of 3.5", got, p.killed)
	}
	// The driver's own from the first round on, as on the card (vgpu node's
	// rule for memory nobody explains takes it for the driver's baseline).
	p, r = suspendPair(t, 64*gib)
	writeNeed(t, filepath.Join(p.host.state, "c2", "shared"), 5, 3584)
	p.f.used = 136*gib + own // 3.4 GiB free by the driver's figure
	p.round()
	if got := r.awaitCalls(1); len(got) != 1 || got[0] != "suspend 102" || len(p.killed) != 0 {
		t.Fatalf("calls %v, kills %v with 3.4 GiB free by the driver's figure for a need of 3.5, want suspend 102\n%s", got, p.killed, p.log.String())
	}
	p.answer(t, r, checkpoint.Result{Done: true, State: checkpoint.StateCheckpointed, Elapsed: 20 * time.Second})
	p.f.samples = append(p.f.samples[:2], nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 7*gib + gib/2})
	writeNeed(t, filepath.Join(p.host.state, "c2", "shared"), 5, 0)
	p.round()

	// c2 ends. 102's restore is owed 16 GiB (c1 back at 32 less its
	// request); the holder outside vgpu grows to 107.6 GiB: 16.4 GiB beside
	// c1's claim by the processes' figures, 15.8 by the driver's.
	if err := os.RemoveAll(filepath.Join(p.host.state, "c2")); err != nil {
		t.Fatal(err)
	}
	p.f.samples = p.f.samples[:2]
	p.f.samples[0].UsedBytes = 107*gib + 6*gib/10
	p.f.used = p.f.samples[0].UsedBytes + 12*gib + own
	for range 3 {
		p.round()
	}
	if got := r.called(); len(got) != 1 {
		t.Fatalf("calls %v: restored into room the driver's own memory takes\n%s", got, p.log.String())
	}
	p.f.samples[0].UsedBytes = 100 * gib
	p.f.used = p.f.samples[0].UsedBytes + 12*gib + own
	p.round()
	if got := r.awaitCalls(2); len(got) != 2 || got[1] != "resume 102" {
		t.Fatalf("calls %v, want resume 102 once the holder shrank\n%s", got, p.log.String())
	}
	p.answer(t, r, checkpoint.Result{Done: true, State: checkpoint.StateRunning, Elapsed: time.Second})
}

// What cannot be suspended is killed, the reason in the event and the
// metric: a copy past suspend.host_memory at once, as without the API; a
// lock that times out, or a checkpoint the driver refuses, once the helper
// says so.
func TestDaemonSuspendFallsBackToKill(t *testing.T) {
	const gib = uint64(1) << 30
	p, _ := suspendPair(t, 10*gib)
	p.round()
	if len(p.killed) != 1 || p.killed[0] != 102 {
		t.Fatalf("killed %v with a host memory cap of 10 GiB, want 102\n%s", p.killed, p.log.String())
	}
	if !strings.Contains(p.log.String(), "killed, not suspended: the suspensions' host memory would reach 20.0 GiB, past suspend.host_memory 10.0 GiB") {
		t.Errorf("the kill does not say why:\n%s", p.log.String())
	}
	if v := testutil.ToFloat64(p.d.m.reclaimKills.WithLabelValues(causeHostMemory)); v != 1 {
		t.Errorf("reclaim kills for the host memory cap: %v, want 1", v)
	}

	p, r := suspendPair(t, 64*gib)
	p.round()
	p.answer(t, r, checkpoint.Result{Step: "lock", CUresult: 600, Error: "CUDA_ERROR_NOT_READY", State: checkpoint.StateRunning})
	p.round()
	if len(p.killed) != 1 || p.killed[0] != 102 {
		t.Fatalf("killed %v after the lock timed out, want 102\n%s", p.killed, p.log.String())
	}
	evs, _ := events.Read(p.host.state)
	if e := evs[len(evs)-1]; e.Kind != "kill" || e.PID != 102 || !strings.Contains(e.Detail, "could not lock it within the lock timeout") {
		t.Errorf("last event %+v, want the kill of 102 naming the lock timeout", e)
	}
	if v := testutil.ToFloat64(p.d.m.reclaimKills.WithLabelValues(causeLockTimeout)); v != 1 {
		t.Errorf("reclaim kills for a lock timeout: %v, want 1", v)
	}
	if rec, _ := ReadSuspended(p.host.state); len(rec) != 0 {
		t.Errorf("suspended record %+v, want none", rec)
	}

	// no checkpoint API: killed, saying so
	p, _ = suspendPair(t, 64*gib)
	p.d.o.Suspend, p.d.noSuspendWhy = nil, "the driver has no checkpoint API (libcuda.so.1: no cuCheckpointProcessLock)"
	p.round()
	if len(p.killed) != 1 || p.killed[0] != 102 || !strings.Contains(p.log.String(), "killed, not suspended: the driver has no checkpoint API") {
		t.Fatalf("killed %v without the API, want 102 with the reason\n%s", p.killed, p.log.String())
	}
	if v := testutil.ToFloat64(p.d.m.reclaimKills.WithLabelValues(causeNoAPI)); v != 1 {
		t.Errorf("reclaim kills for no API: %v, want 1", v)
	}

	// managed memory: the driver refuses the checkpoint; the process is
	// killed and never tried again
	p, r = suspendPair(t, 64*gib)
	p.round()
	p.answer(t, r, checkpoint.Result{Step: "checkpoint", CUresult: 801, Error: "CUDA_ERROR_NOT_SUPPORTED", State: checkpoint.StateRunning})
	p.round()
	if len(p.killed) != 1 || p.killed[0] != 102 || !strings.Contains(p.log.String(), "not suspended: suspend pid 102: checkpoint failed with CUDA_ERROR_NOT_SUPPORTED") {
		t.Fatalf("killed %v after the driver refused, want 102 with the reason\n%s", p.killed, p.log.String())
	}
	if v := testutil.ToFloat64(p.d.m.reclaimKills.WithLabelValues(causeRefused)); v != 1 {
		t.Errorf("reclaim kills for a refusal: %v, want 1", v)
	}
	if _, ok := p.d.sus.refused[102]; !ok {
		t.Errorf("the refused pid is not remembered")
	}
}

// The host copy is charged to the container's memory cgroup: a container
// whose memory.max leaves less room than the process holds is killed, not
// suspended (its cgroup would kill it mid-copy); a frozen container is
// never checkpointed; nor is an MPS client.
func TestDaemonSuspendChecksTheContainer(t *testing.T) {
	const gib = uint64(1) << 30
	p, _ := suspendPair(t, 64*gib)
	h := p.host
	dir := filepath.Join(h.cg, "test", "c1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"memory.max": "21474836480\n", "memory.current": "2147483648\n"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ts := []memTenant{{c: &procmap.Container{ID: "c1", Cgroup: "/test/c1"}, in: borrow.Tenant{ID: "c1"}}}
	can := p.d.suspendable(ts, new(uint64), map[int]string{})
	if ok, why := can("c1", borrow.Proc{PID: 102, Used: 20 * gib}); ok || !strings.Contains(why, "memory cgroup has 18.0 GiB free, its host copy needs 20.0 GiB") {
		t.Errorf("20 GiB beside a cgroup with 18 free: %v %q, want refused naming the cgroup", ok, why)
	}
	if ok, why := can("c1", borrow.Proc{PID: 101, Used: 12 * gib}); !ok {
		t.Errorf("12 GiB beside a cgroup with 18 free: refused (%s)", why)
	}
	frz := filepath.Join(h.cg, "freezer", "test", "c1")
	if err := os.MkdirAll(frz, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(frz, "freezer.state"), []byte("FROZEN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, why := can("c1", borrow.Proc{PID: 101, Used: 1 * gib}); ok || why != "its container is frozen" {
		t.Errorf("a frozen container: %v %q, want refused", ok, why)
	}
	ts[0].spatial = true
	if ok, why := can("c1", borrow.Proc{PID: 101, Used: 1 * gib}); ok || !strings.Contains(why, "MPS client") {
		t.Errorf("an MPS client: %v %q, want refused", ok, why)
	}
}

// A restarted vgpu node takes over what the last one left suspended: the
// process still there is kept (and restored when it fits), one gone (or a
// reused pid) is dropped.
func TestDaemonLoadsSuspended(t *testing.T) {
	p, _ := suspendPair(t, 64<<30)
	h := p.host
	rec := `[{"container":"c1","pid":102,"start":4242,"gpu":"` + uuid + `","device":0,"bytes":1024,"since":"2026-01-01T00:00:00Z"},` +
		`{"container":"c1","pid":101,"start":1,"gpu":"` + uuid + `","device":0,"bytes":1024,"since":"2026-01-01T00:00:00Z"}]`
	if err := os.WriteFile(SuspendedRecord(h.state), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	o := p.d.o
	o.Registry = nil
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	got := d.Suspended()
	if len(got) != 1 || got[0].PID != 102 {
		t.Fatalf("taken over %+v, want pid 102 only (101's start differs)", got)
	}
}
