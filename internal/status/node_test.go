package status

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

func TestHostEnforcementShown(t *testing.T) {
	f := newFixture(t)
	created := time.Now().Add(-time.Hour).UTC()
	f.container("c1", &tenant.Record{ID: "c1", Created: created}, quotaOf(2*gib))
	text := func() (string, *Report) {
		r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
		var b bytes.Buffer
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		return b.String(), r
	}
	// no daemon has ever run
	if s, r := text(); !strings.Contains(s, "host enforcement: off (vgpu node is not running)") || r.HostEnforcement.On {
		t.Fatalf("without vgpu node:\n%s", s)
	}
	w, err := events.NewWriter(f.state)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := w.Beat(events.Heartbeat{PID: 4242, Started: now, Beat: now, Interval: "100ms", Grace: "500ms", Tolerance: "64 MiB + 1% of the limit"}); err != nil {
		t.Fatal(err)
	}
	at := now.Add(-time.Minute)
	if err := w.Append(events.Event{Time: created.Add(-time.Hour), Kind: "kill", Container: "c1", PID: 1, Reason: "memory", Used: 3 * gib, Limit: 2 * gib}); err != nil { // an earlier container of that id
		t.Fatal(err)
	}
	if err := w.Append(events.Event{Time: at, Kind: "kill", Container: "c1", PID: 1234, Device: 0, Reason: "memory", Used: 10*gib + 400<<20, Limit: 2 * gib}); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(events.Event{Time: at, Kind: "kill", Container: "other", PID: 99, Reason: "memory", Used: 3 * gib, Limit: gib}); err != nil {
		t.Fatal(err)
	}
	s, r := text()
	want := "killed pid 1234: 10.39 GiB on GPU 0 > limit 2.00 GiB at " + at.Local().Format("15:04:05")
	if !strings.Contains(s, "host enforcement: on (vgpu node pid 4242") || !strings.Contains(s, want) || strings.Contains(s, "pid 99") || strings.Contains(s, "killed pid 1:") {
		t.Fatalf("with vgpu node, want %q:\n%s", want, s)
	}
	if c := find(t, r, "c1"); !r.HostEnforcement.On || len(c.Enforcement) != 1 || c.Enforcement[0].PID != 1234 {
		t.Fatalf("report: %+v %+v", r.HostEnforcement, c.Enforcement)
	}
	// a heartbeat too old: the daemon died without removing it
	old := now.Add(-time.Minute)
	if err := w.Beat(events.Heartbeat{PID: 4242, Started: old, Beat: old}); err != nil {
		t.Fatal(err)
	}
	if s, r := text(); !strings.Contains(s, "host enforcement: off (vgpu node's last heartbeat") || r.HostEnforcement.On {
		t.Fatalf("stale heartbeat:\n%s", s)
	}
	// a clean stop removes it
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if s, _ := text(); !strings.Contains(s, "host enforcement: off (vgpu node is not running)") {
		t.Fatalf("after stop:\n%s", s)
	}
}

// A full state_dir: the daemon cannot write its heartbeat, and status says
// so rather than that enforcement is off.
func TestStateDirFullReported(t *testing.T) {
	f := newFixture(t)
	f.container("c1", &tenant.Record{ID: "c1", Created: time.Now().UTC()}, quotaOf(2*gib))
	w, err := events.NewWriter(f.state)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute).UTC()
	if err := w.Beat(events.Heartbeat{PID: 4242, Started: old, Beat: old}); err != nil {
		t.Fatal(err)
	}
	defer func(orig func(string, *unix.Statfs_t) error) { statfs = orig }(statfs)
	statfs = func(path string, st *unix.Statfs_t) error {
		*st = unix.Statfs_t{Blocks: 1000, Bfree: 0, Bavail: 0, Files: 100, Ffree: 50}
		return nil
	}
	r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "host enforcement: not known: state_dir "+f.state+" is full") || r.HostEnforcement.StateDirFull != f.state {
		t.Fatalf("full state_dir:\n%s", b.String())
	}
	statfs = func(path string, st *unix.Statfs_t) error {
		*st = unix.Statfs_t{Blocks: 1000, Bfree: 10, Bavail: 10, Files: 100, Ffree: 0}
		return nil
	}
	if r := Collect(Options{StateDir: f.state, ProcRoot: f.proc}); r.HostEnforcement.StateDirFull == "" {
		t.Fatal("no inode left: not reported")
	}
	statfs = func(path string, st *unix.Statfs_t) error {
		*st = unix.Statfs_t{Blocks: 1000, Bfree: 10, Bavail: 10, Files: 100, Ffree: 5}
		return nil
	}
	r = Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	b.Reset()
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "host enforcement: off (vgpu node's last heartbeat") {
		t.Fatalf("space left, stale heartbeat:\n%s", b.String())
	}
}

// A container whose init moved /run/vgpu away (no capability needed) is
// still running, with its processes, when its cgroup and init start time
// were recorded: membership is the cgroup's, not what a process sees.
func TestHiddenQuotaStillRunningByCgroup(t *testing.T) {
	f := newFixture(t)
	dir := f.container("c1", &tenant.Record{ID: "c1", Created: time.Now().UTC(), PIDs: []int{100}, InitStart: 777, Cgroup: "/k/c1"}, quotaOf(2*gib))
	f.process(100, []int{100, 1}, "sh", "", false, "")
	f.process(101, []int{101, 7}, "python3", "", false, "")
	f.process(102, []int{102, 8}, "spy", dir, false, "") // sees the quota file, in another cgroup
	for pid, cg := range map[int]string{100: "/k/c1", 101: "/k/c1/sub", 102: "/k/other"} {
		write(t, filepath.Join(f.proc, fmt.Sprint(pid), "cgroup"), []byte("0::"+cg+"\n"))
		write(t, filepath.Join(f.proc, fmt.Sprint(pid), "stat"), []byte(fmt.Sprintf("%d (sh) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 1 1", pid)))
	}
	r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	c := find(t, r, "c1")
	if c.State != Running || !c.InitAlive || c.HostProcesses != 2 || c.Cgroup != "/k/c1" {
		t.Fatalf("container with /run/vgpu hidden: state %s initAlive %v host processes %d cgroup %q", c.State, c.InitAlive, c.HostProcesses, c.Cgroup)
	}
}

// vgpu status shows each device's mode and, from a running vgpu node's
// heartbeat, the spatial GPUs' MPS control daemons.
func TestSpatialShown(t *testing.T) {
	f := newFixture(t)
	q := quotaOf(2 * gib)
	q.Devices[0].Compute, q.Devices[0].Mode, q.Devices[0].MPSPipe = 40, tenant.Spatial, "/run/vgpu/mps"
	f.container("s1", &tenant.Record{ID: "s1", Created: time.Now().UTC()}, q)
	f.container("t1", &tenant.Record{ID: "t1", Created: time.Now().UTC()}, quotaOf(gib))
	w, err := events.NewWriter(f.state)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := w.Beat(events.Heartbeat{PID: 4242, Started: now, Beat: now, MPS: []events.MPS{{GPU: "GPU-5e3b6a2e-0000-4000-8000-000000000000", State: "running", PID: 77, Since: now,
		Restarts: 1, LastExit: "signal: killed", Servers: []int{88}, Clients: 2, Cap: 40}}}); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{
		"spatial GPU GPU-5e3b6a2e-0000-4000-8000-000000000000: MPS control daemon running (pid 77 since",
		"1 server(s) [88], 2 client(s), servers held to 40% of the SMs); restarted 1 time(s), last exit: signal: killed",
		"40% (spatial: MPS share)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("want %q in:\n%s", want, s)
		}
	}
	if find(t, r, "s1").Devices[0].Mode != ModeSpatial || find(t, r, "t1").Devices[0].Mode != ModeTime || len(r.MPS) != 1 {
		t.Errorf("report: %+v", r)
	}
}

// vgpu status attributes processes by vgpu node's rule (internal/procmap):
// a container whose cgroup was not recorded (run --detach, an older
// release) has it bound from its live init, and a process in it that hides
// /run/vgpu is still the container's; one that sees the quota file from
// another cgroup is not.
func TestProcessesByTheNodesRule(t *testing.T) {
	f := newFixture(t)
	dir := f.container("c1", &tenant.Record{ID: "c1", Created: time.Now().UTC(), PIDs: []int{300}}, quotaOf(gib))
	f.process(300, []int{300, 1}, "sh", dir, false, "")
	f.process(301, []int{301, 7}, "python3", "", false, "")
	f.process(302, []int{302, 8}, "spy", dir, false, "")
	for pid, cg := range map[int]string{301: "/test/c1/sub", 302: "/other"} {
		write(t, filepath.Join(f.proc, fmt.Sprint(pid), "cgroup"), []byte("0::"+cg+"\n"))
	}
	c := find(t, Collect(Options{StateDir: f.state, ProcRoot: f.proc}), "c1")
	var pids []int
	for _, p := range c.Processes {
		pids = append(pids, p.HostPID)
	}
	if c.HostProcesses != 2 || c.Cgroup != "" {
		t.Errorf("host processes %d %v (cgroup %q), want 300 and 301 (the init's cgroup, bound, not written)", c.HostProcesses, pids, c.Cgroup)
	}
	if info, err := state.Read(f.state, "c1"); err != nil || info.Cgroup != "" {
		t.Errorf("vgpu status wrote the bound cgroup back: %+v %v", info, err)
	}
}
