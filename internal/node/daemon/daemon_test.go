package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/hostpids"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// feed is an NVML the test controls.
type feed struct{ samples []nvmlfeed.Sample }

func (f *feed) Read() ([]nvmlfeed.Sample, error) {
	return append([]nvmlfeed.Sample(nil), f.samples...), nil
}
func (f *feed) Close() error { return nil }

const uuid = "GPU-5e3b6a2e-0000-4000-8000-000000000000"

// host lays out a state directory with one container, a /proc with its
// processes and a v1 freezer hierarchy.
type host struct {
	t               testing.TB
	state, proc, cg string
}

func newHost(t *testing.T, quotaLine string) *host {
	h := &host{t: t, state: t.TempDir(), proc: t.TempDir(), cg: t.TempDir()}
	dir := filepath.Join(h.state, "c1")
	if err := os.MkdirAll(filepath.Join(dir, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "quota"), []byte("vgpu-quota 1\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\n"+quotaLine+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "container.json"), []byte(`{"id":"c1","created":"2026-01-01T00:00:00Z","pids":[100],"devices":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(h.cg, "freezer", "runc", "c1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.cg, "freezer", "freezer.state"), []byte("THAWED\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.cg, "freezer", "runc", "c1", "freezer.state"), []byte("THAWED\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{100, 101, 102} {
		d := filepath.Join(h.proc, strconv.Itoa(pid))
		if err := os.MkdirAll(filepath.Join(d, "root", "run", "vgpu"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup"), []byte("6:freezer:/runc/c1\n0::/\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("mnt:[4026539999]", filepath.Join(d, "ns", "mnt")); err != nil { // a container's own
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(dir, "quota"), filepath.Join(d, "root", "run", "vgpu", "quota")); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func TestDaemonKillsOverLimit(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" memory=1073741824")
	f := &feed{samples: []nvmlfeed.Sample{
		{HostPID: 101, GPU: uuid, UsedBytes: 512 << 20},
		{HostPID: 102, GPU: uuid, UsedBytes: 4 << 30}, // through the real driver
		{HostPID: 555, GPU: uuid, UsedBytes: 8 << 30}, // not a container's
	}}
	now := time.Unix(1_800_000_000, 0)
	var killed []int
	var log bytes.Buffer
	reg := prometheus.NewRegistry()
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f, Log: &log,
		Registry: reg, Now: func() time.Time { return now }, Kill: func(pid int) error { killed = append(killed, pid); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		d.Round()
		now = now.Add(100 * time.Millisecond)
	}
	if len(killed) != 1 || killed[0] != 102 {
		t.Fatalf("killed %v, want [102]\n%s", killed, log.String())
	}
	if !strings.Contains(log.String(), "killed pid 102 of c1: 4.5 GiB on GPU 0 ("+uuid+") > limit 1.0 GiB") {
		t.Errorf("log:\n%s", log.String())
	}
	evs, err := events.Read(h.state)
	if err != nil || len(evs) != 1 || evs[0].Kind != "kill" || evs[0].PID != 102 || evs[0].Device != 0 || evs[0].Used != 4<<30+512<<20 || evs[0].Limit != 1<<30 {
		t.Fatalf("events %+v %v", evs, err)
	}
	hb, err := events.ReadHeartbeat(h.state)
	if err != nil || hb == nil || hb.PID != os.Getpid() || hb.Interval != DefaultInterval.String() {
		t.Fatalf("heartbeat %+v %v", hb, err)
	}
	if v := testutil.ToFloat64(d.m.kills.WithLabelValues("c1", uuid, "memory")); v != 1 {
		t.Errorf("kills metric %v", v)
	}
	if n, _ := testutil.GatherAndCount(reg, "vgpu_node_process_memory_bytes"); n != 2 {
		t.Errorf("%d process memory series, want the container's 2", n)
	}
}

func TestDaemonFreezesComputeBypassAndThawsOnExit(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" compute=25")
	f := &feed{samples: []nvmlfeed.Sample{{HostPID: 101, GPU: uuid, SMUtil: 97}}}
	now := time.Unix(1_800_000_000, 0)
	reg := prometheus.NewRegistry()
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f,
		Registry: reg, Now: func() time.Time { return now }, Kill: func(int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(h.cg, "freezer", "runc", "c1", "freezer.state")
	frozen := false
	for i := 0; i < 150 && !frozen; i++ {
		d.Round()
		now = now.Add(100 * time.Millisecond)
		b, _ := os.ReadFile(state)
		frozen = strings.TrimSpace(string(b)) == "FROZEN"
	}
	if !frozen {
		t.Fatal("a container at 97% under a 25% limit was not frozen within 15 s of samples")
	}
	// what the policy sees, for a check against the device's utilization
	if v := testutil.ToFloat64(d.m.share.WithLabelValues("c1", uuid)); v < 96.5 || v > 97.5 {
		t.Errorf("vgpu_container_compute_share_percent %v, want 97", v)
	}
	if v := testutil.ToFloat64(d.m.duty.WithLabelValues("c1", uuid)); v <= 0 || v > enforce.DefaultConfig().MaxDuty {
		t.Errorf("vgpu_container_throttle_duty %v, want in (0, max]", v)
	}
	// Run, stopped, thaws on its way out what the rounds froze
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(state); strings.TrimSpace(string(b)) != "THAWED" {
		t.Fatalf("vgpu node stopped and left the container %s", b)
	}
}

// A daemon killed with SIGKILL while it holds a container frozen (no
// thaw on its way out) leaves the freeze recorded: the next daemon thaws
// it before its first round, and so does `vgpu node --thaw`.
func TestDaemonThawsWhatAKilledDaemonLeftFrozen(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" compute=25")
	f := &feed{samples: []nvmlfeed.Sample{{HostPID: 101, GPU: uuid, SMUtil: 97}}}
	now := time.Unix(1_800_000_000, 0)
	o := Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f,
		Now: func() time.Time { return now }, Kill: func(int) error { return nil }}
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(h.cg, "freezer", "runc", "c1", "freezer.state")
	frozen := func() bool { b, _ := os.ReadFile(state); return strings.TrimSpace(string(b)) == "FROZEN" }
	for i := 0; i < 150 && !frozen(); i++ {
		d.Round()
		now = now.Add(100 * time.Millisecond)
	}
	if !frozen() {
		t.Fatal("not frozen")
	}
	// kill -9: nothing more of d runs
	var log bytes.Buffer
	o.Log = &log
	if _, err := New(o); err != nil {
		t.Fatal(err)
	}
	if frozen() {
		t.Fatalf("a restarted daemon left the container frozen\n%s", log.String())
	}
	// the unit's ExecStopPost: the same, without a daemon
	if err := os.WriteFile(state, []byte("FROZEN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(FrozenRecord(h.state), []byte(`["/runc/c1"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if thawed, err := ThawRecorded(h.state, h.cg); err != nil || len(thawed) != 1 || frozen() {
		t.Fatalf("ThawRecorded: %v %v", thawed, err)
	}
}

// A freeze the freezer cannot carry out is escalated to a kill at once,
// not retried every round.
func TestDaemonEscalatesFreezeThatFails(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" compute=25")
	state := filepath.Join(h.cg, "freezer", "runc", "c1", "freezer.state")
	os.Remove(state)
	if err := os.Mkdir(state, 0o755); err != nil { // unreadable and unwritable as a file, even by root
		t.Fatal(err)
	}
	f := &feed{samples: []nvmlfeed.Sample{{HostPID: 101, GPU: uuid, SMUtil: 97}}}
	now := time.Unix(1_800_000_000, 0)
	var killed []int
	var log bytes.Buffer
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f, Log: &log,
		Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }, Kill: func(pid int) error { killed = append(killed, pid); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	freezeErrs := 0
	for i := 0; i < 150 && len(killed) == 0; i++ {
		d.Round()
		now = now.Add(100 * time.Millisecond)
	}
	evs, _ := events.Read(h.state)
	for _, e := range evs {
		if e.Kind == "freeze" && e.Error != "" {
			freezeErrs++
		}
	}
	if len(killed) != 1 || killed[0] != 101 || freezeErrs != 1 {
		t.Fatalf("killed %v after %d failed freezes, want 101 after one\n%s", killed, freezeErrs, log.String())
	}
	if !strings.Contains(log.String(), "freezing failed") {
		t.Errorf("log does not say freezing failed:\n%s", log.String())
	}
	if v := testutil.ToFloat64(d.m.escalations.WithLabelValues("c1", uuid)); v != 1 {
		t.Errorf("escalations metric %v", v)
	}
}

// A freeze the kernel never completes (v1 FREEZING: a task that does not
// stop) is escalated once FreezeTimeout passes, not retried for ever.
func TestDaemonEscalatesFreezeThatNeverHolds(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" compute=25")
	state := filepath.Join(h.cg, "freezer", "runc", "c1", "freezer.state")
	f := &feed{samples: []nvmlfeed.Sample{{HostPID: 101, GPU: uuid, SMUtil: 60}}} // over the bound, not blatant: judged by the freeze holding
	now := time.Unix(1_800_000_000, 0)
	var killed []int
	var log bytes.Buffer
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f, Log: &log,
		Now: func() time.Time { return now }, Kill: func(pid int) error { killed = append(killed, pid); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	var frozeAt time.Time
	for i := 0; i < 300 && len(killed) == 0; i++ {
		d.Round()
		if b, _ := os.ReadFile(state); strings.TrimSpace(string(b)) == "FROZEN" {
			if frozeAt.IsZero() {
				frozeAt = now
			}
			if err := os.WriteFile(state, []byte("FREEZING\n"), 0o644); err != nil { // what the kernel shows while a task resists
				t.Fatal(err)
			}
		}
		now = now.Add(100 * time.Millisecond)
	}
	if frozeAt.IsZero() || len(killed) != 1 || killed[0] != 101 {
		t.Fatalf("froze at %v, killed %v\n%s", frozeAt, killed, log.String())
	}
	if took := now.Sub(frozeAt); took > enforce.DefaultConfig().FreezeTimeout+300*time.Millisecond {
		t.Errorf("escalated %v after the freeze, want within FreezeTimeout", took)
	}
	if !strings.Contains(log.String(), "did not reach FROZEN") {
		t.Errorf("log:\n%s", log.String())
	}
}

// The container's NVML shows its processes under its own pids only if the
// daemon keeps the host pid map current: written when it changes, not every
// round; empty for a container with no GPU process.
func TestDaemonKeepsPidMapCurrent(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" memory=1073741824")
	for pid, status := range map[int]string{
		101: "Name:\tpython3\nNSpid:\t101\t7\nNSsid:\t1\n",
		102: "Name:\tpython3\nNSpid:\t102\t8\n",
	} {
		if err := os.WriteFile(filepath.Join(h.proc, strconv.Itoa(pid), "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := &feed{}
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f,
		Now: func() time.Time { return time.Unix(1_800_000_000, 0) }, Kill: func(int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	path := hostpids.Path(h.state, "c1")
	read := func() (string, uint64) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatalf("pid map: %v", err)
		}
		b, _ := os.ReadFile(path)
		return string(b), st.Ino
	}

	d.Round() // no GPU process yet
	if got, _ := read(); got != "" {
		t.Fatalf("pid map with no GPU process: %q, want empty", got)
	}

	f.samples = []nvmlfeed.Sample{
		{HostPID: 102, GPU: uuid, UsedBytes: 1 << 20},
		{HostPID: 101, GPU: uuid, UsedBytes: 1 << 20},
		{HostPID: 555, GPU: uuid, UsedBytes: 1 << 20}, // not the container's
	}
	d.Round()
	got, ino := read()
	if got != "101 7\n102 8\n" {
		t.Fatalf("pid map %q, want 101->7 and 102->8 only", got)
	}
	d.Round()
	if again, ino2 := read(); again != got || ino2 != ino {
		t.Fatalf("an unchanged map was written again (%q, inode %d -> %d)", again, ino, ino2)
	}

	f.samples = f.samples[1:] // 102 left the GPU
	d.Round()
	if got, _ := read(); got != "101 7\n" {
		t.Fatalf("pid map %q after 102 left, want 101->7", got)
	}
}

// A tenant removed while a round runs (a vgpu exec that ended between the
// round's view and its steps) stays removed: no step of that round makes
// its directory again, which no one would remove, and none reports it.
func TestDaemonRoundLeavesATenantRemovedMidRoundRemoved(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" memory=1073741824")
	var log strings.Builder
	f := &feed{samples: []nvmlfeed.Sample{{HostPID: 101, GPU: uuid, UsedBytes: 1 << 20}}}
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f, Log: &log,
		Now: func() time.Time { return time.Unix(1_800_000_000, 0) }, Kill: func(int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.view(d.o.Now())
	if err != nil {
		t.Fatal(err)
	}
	if v.byID["c1"] == nil {
		t.Fatal("the view does not list c1")
	}
	if err := state.Remove(h.state, "c1"); err != nil {
		t.Fatal(err)
	}
	for _, s := range roundSteps {
		s.run(d, v)
	}
	ents, _ := os.ReadDir(h.state)
	for _, e := range ents {
		if strings.Contains(e.Name(), "c1") {
			t.Errorf("the state directory holds %s after the round, want c1 gone", e.Name())
		}
	}
	if strings.Contains(log.String(), "c1") {
		t.Errorf("the round reported the removed tenant:\n%s", log.String())
	}
}

func TestNSPID(t *testing.T) {
	proc := t.TempDir()
	for pid, status := range map[int]string{
		1: "Name:\tinit\nNSpid:\t1\n",
		2: "NSpid:\t2\t40\t3\n",
		3: "Name:\tx\n",
		4: "NSpid:\t4\tx\n",
	} {
		if err := os.MkdirAll(filepath.Join(proc, strconv.Itoa(pid)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, strconv.Itoa(pid), "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for pid, want := range map[int]int{1: 1, 2: 3, 3: 0, 4: 0, 5: 0} {
		got, err := nsPID(proc, pid)
		if got != want || (want == 0) != (err != nil) {
			t.Errorf("nsPID(%d) = %d, %v; want %d", pid, got, err, want)
		}
	}
}
