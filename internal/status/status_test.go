package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/regionread"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// regionBytes lays out a region (lib/cudahook/include/vgpu_region.h).
func regionBytes(version uint32, slots map[int]regionread.Slot, busy []uint64) []byte {
	h := contract.NewRegionHeader(version)
	for d, v := range busy {
		h.Compute[d].BusyNs = v
	}
	rs := map[int]contract.RegionSlot{}
	for i, s := range slots {
		rs[i] = contract.RegionSlot{State: 1, Pid: uint32(s.PID), Claimed: s.ClaimedNs, Usage: s.Usage}
	}
	return contract.EncodeRegion(h, rs)
}

type fixture struct {
	t     *testing.T
	state string
	proc  string
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) container(id string, info *tenant.Record, q *quota.File) string {
	dir := filepath.Join(f.state, id)
	if info != nil {
		b, _ := json.Marshal(info)
		write(f.t, filepath.Join(dir, config.StateInfo), b)
	}
	if q != nil {
		b, err := q.Marshal()
		if err != nil {
			f.t.Fatal(err)
		}
		write(f.t, filepath.Join(dir, config.StateQuota), b)
	}
	if err := os.MkdirAll(filepath.Join(dir, config.StateShared), 0o755); err != nil {
		f.t.Fatal(err)
	}
	return dir
}

// process fabricates /proc/<pid> of a process of the container whose state
// directory is dir: root/run/vgpu/quota is that container's quota file,
// its cgroup /test/<the directory's name>.
func (f *fixture) process(pid int, nspid []int, name, dir string, lockFd bool, lockLine string) {
	p := filepath.Join(f.proc, fmt.Sprint(pid))
	root := filepath.Join(p, "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "run", "vgpu"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if dir != "" { // a hard link: the same file, as the runtime's bind mount is
		if err := os.Link(filepath.Join(dir, config.StateQuota), filepath.Join(root, "run", "vgpu", "quota")); err != nil {
			f.t.Fatal(err)
		}
		// in the container's cgroup and a mount namespace of its own, as
		// its processes are: the cgroup is bound from a live init of a
		// record that has none (internal/procmap)
		write(f.t, filepath.Join(p, "cgroup"), []byte("0::/test/"+filepath.Base(dir)+"\n"))
		if err := os.MkdirAll(filepath.Join(p, "ns"), 0o755); err != nil {
			f.t.Fatal(err)
		}
		if err := os.Symlink("mnt:[4026539999]", filepath.Join(p, "ns", "mnt")); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := os.Symlink("rootfs", filepath.Join(p, "root")); err != nil {
		f.t.Fatal(err)
	}
	ns := strings.Trim(fmt.Sprint(nspid), "[]")
	write(f.t, filepath.Join(p, "status"), []byte(fmt.Sprintf("Name:\t%s\nPid:\t%d\nNSpid:\t%s\n", name, pid, strings.ReplaceAll(ns, " ", "\t"))))
	if err := os.MkdirAll(filepath.Join(p, "fd"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(p, "fd", "0")); err != nil {
		f.t.Fatal(err)
	}
	if lockFd {
		if err := os.Symlink(filepath.Join(dir, config.StateShared, contract.RegionLockFile), filepath.Join(p, "fd", "5")); err != nil {
			f.t.Fatal(err)
		}
		write(f.t, filepath.Join(p, "fdinfo", "5"), []byte("pos:\t0\nflags:\t02100002\nmnt_id:\t27\nino:\t1\n"+lockLine))
	}
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, state: filepath.Join(t.TempDir(), "state"), proc: filepath.Join(t.TempDir(), "proc")}
}

// holdSlots takes the OFD locks of the given slots on dir's lock file, as
// their live owners would.
func (f *fixture) holdSlots(dir string, slots ...int) {
	lf, err := os.OpenFile(filepath.Join(dir, config.StateShared, contract.RegionLockFile), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { lf.Close() })
	for _, s := range slots {
		fl := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(1 + s), Len: 1}
		if err := unix.FcntlFlock(lf.Fd(), unix.F_OFD_SETLK, &fl); err != nil {
			f.t.Fatal(err)
		}
	}
}

const gib = 1 << 30

func quotaOf(mem ...uint64) *quota.File {
	q := &quota.File{DriverCuda: "/usr/lib/vgpu/driver/libcuda.so.1", DriverNvml: "/usr/lib/vgpu/driver/libnvidia-ml.so.1", SharedDir: "/run/vgpu/shared"}
	for i, m := range mem {
		q.Devices = append(q.Devices, tenant.Device{Index: i, GPU: tenant.GPU{UUID: fmt.Sprintf("GPU-5e3b6a2e-0000-4000-8000-00000000000%d", i)}, Memory: m, Compute: 100 - 50*i})
	}
	return q
}

func find(t *testing.T, r *Report, id string) Container {
	t.Helper()
	for _, c := range r.Containers {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("container %s not in the report: %+v", id, r.Containers)
	return Container{}
}

func TestCollect(t *testing.T) {
	f := newFixture(t)
	live := f.container("live", &tenant.Record{ID: "live", Name: "web", PIDs: []int{1001}}, quotaOf(2*gib, 0))
	var u0, u1, u2 [contract.RegionDevices]uint64
	u0[0], u0[1] = 512<<20, 3<<20
	u1[0] = 256 << 20
	u2[0] = 1 * gib // dead: never counted
	write(t, filepath.Join(live, "shared", contract.RegionFile), regionBytes(1, map[int]regionread.Slot{
		0: {PID: 7, Usage: u0}, 1: {PID: 9, Usage: u1}, 5: {PID: 12, Usage: u2},
	}, nil))
	f.holdSlots(live, 0, 1)
	f.process(1001, []int{1001, 1}, "sh", live, false, "")
	f.process(1002, []int{1002, 7}, "python", live, true, "lock:\t1: OFDLCK ADVISORY  WRITE -1 00:1f:12 1 1\n")
	f.process(1003, []int{1003, 9}, "worker", live, false, "") // slot by NSpid
	f.process(1004, []int{1004}, "bash", "", false, "")        // a host process

	stale := f.container("stale", &tenant.Record{ID: "stale", PIDs: []int{4242}}, quotaOf(gib))
	write(t, filepath.Join(stale, "shared", contract.RegionFile), regionBytes(1, map[int]regionread.Slot{0: {PID: 3, Usage: u2}}, nil))

	bad := f.container("corrupt", nil, quotaOf(gib))
	write(t, filepath.Join(bad, "shared", contract.RegionFile), append([]byte("NOTAREGN"), make([]byte, 8192)...))
	short := f.container("short", &tenant.Record{ID: "short"}, nil)
	write(t, filepath.Join(short, "shared", contract.RegionFile), []byte("VGPUREG1"))
	newer := f.container("newer", &tenant.Record{ID: "newer"}, quotaOf(gib))
	write(t, filepath.Join(newer, "shared", contract.RegionFile), regionBytes(99, nil, nil))
	f.container("fresh", &tenant.Record{ID: "fresh"}, quotaOf(gib)) // no region yet
	if err := os.MkdirAll(filepath.Join(f.state, ".tmp-x-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	badjson := f.container("badjson", nil, nil)
	write(t, filepath.Join(badjson, config.StateInfo), []byte("{not json"))
	write(t, filepath.Join(badjson, config.StateQuota), []byte("vgpu-quota 7\n"))

	r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	if len(r.Containers) != 7 {
		t.Errorf("%d containers, want 7 (the temp directory is not one)", len(r.Containers))
	}

	c := find(t, r, "live")
	if c.State != Running || c.Name != "web" || c.InitPID != 1001 || !c.InitAlive || c.HostProcesses != 3 || c.RegionVersion != 1 || len(c.Errors) != 0 {
		t.Errorf("live: %+v", c)
	}
	if len(c.Devices) != 2 || c.Devices[0].MemoryLimit != 2*gib || c.Devices[0].MemoryUsed != 768<<20 ||
		c.Devices[0].ComputeLimit != 100 || c.Devices[1].MemoryLimit != 0 || c.Devices[1].MemoryUsed != 3<<20 || c.Devices[1].ComputeLimit != 50 {
		t.Errorf("live devices: %+v", c.Devices)
	}
	if c.DeadSlots != 1 || len(c.Processes) != 2 {
		t.Fatalf("live: %d dead slots, processes %+v", c.DeadSlots, c.Processes)
	}
	want := []Process{{HostPID: 1002, PID: 7, Name: "python", Slot: 0, Memory: []uint64{512 << 20, 3 << 20}, MemoryTotal: 515 << 20},
		{HostPID: 1003, PID: 9, Name: "worker", Slot: 1, Memory: []uint64{256 << 20, 0}, MemoryTotal: 256 << 20}}
	for i, w := range want {
		p := c.Processes[i]
		p.Since = w.Since
		if fmt.Sprint(p) != fmt.Sprint(w) {
			t.Errorf("process %d: %+v, want %+v", i, p, w)
		}
	}

	if c := find(t, r, "stale"); c.State != Stale || c.InitAlive || c.Devices[0].MemoryUsed != 0 || c.DeadSlots != 1 || len(c.Processes) != 0 {
		t.Errorf("stale: %+v", c)
	}
	// no record: no devices either (the quota file is the record's
	// rendering, not a second source)
	if c := find(t, r, "corrupt"); len(c.Errors) != 2 || !strings.Contains(strings.Join(c.Errors, "|"), "bad magic") || len(c.Devices) != 0 {
		t.Errorf("corrupt: %+v", c)
	}
	if c := find(t, r, "short"); !strings.Contains(strings.Join(c.Errors, "|"), "truncated") {
		t.Errorf("short: %+v", c)
	}
	if c := find(t, r, "newer"); !strings.Contains(strings.Join(c.Errors, "|"), "layout version 99") {
		t.Errorf("newer: %+v", c)
	}
	if c := find(t, r, "fresh"); len(c.Errors) != 0 || c.RegionVersion != 0 || c.State != Stale {
		t.Errorf("fresh: %+v", c)
	}
	if c := find(t, r, "badjson"); len(c.Errors) != 1 || len(c.Devices) != 0 {
		t.Errorf("badjson: %+v", c)
	}

	var txt, js bytes.Buffer
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"CONTAINER live  name web  RUNNING  init pid 1001", "768.00 MiB", "2.00 GiB", "50%", "python",
		"CONTAINER stale", "STALE", "init pid 4242 (gone)", "bad magic", "1 slot(s) of dead processes"} {
		if !strings.Contains(txt.String(), s) {
			t.Errorf("text output lacks %q:\n%s", s, txt.String())
		}
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Containers) != 7 {
		t.Errorf("JSON does not read back: %v", err)
	}
}

// Layout 2: busy_ns per device; the share is measured between two readings.
func TestComputeShare(t *testing.T) {
	f := newFixture(t)
	dir := f.container("c", &tenant.Record{ID: "c"}, quotaOf(gib, gib))
	path := filepath.Join(dir, "shared", contract.RegionFile)
	write(t, path, regionBytes(2, nil, []uint64{1e9, 0}))
	r1 := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	if !r1.HasBusy() || *r1.Containers[0].Devices[0].BusyNs != 1e9 {
		t.Fatalf("busy not read: %+v", r1.Containers[0].Devices)
	}
	write(t, path, regionBytes(2, nil, []uint64{1e9 + 5e7, 0}))
	r2 := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	// pretend exactly 100 ms passed between the readings
	r2.Containers[0].when = r1.Containers[0].when.Add(1e8)
	MeasureShares(r1, r2)
	d := r2.Containers[0].Devices
	if d[0].ComputeShare == nil || *d[0].ComputeShare < 0.49 || *d[0].ComputeShare > 0.51 || d[1].ComputeShare == nil || *d[1].ComputeShare != 0 {
		t.Errorf("shares: %v %v, want 0.5 and 0", d[0].ComputeShare, d[1].ComputeShare)
	}
	var txt bytes.Buffer
	if err := r2.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "50.0%") {
		t.Errorf("text lacks the share:\n%s", txt.String())
	}
}

func TestMissingStateDir(t *testing.T) {
	r := Collect(Options{StateDir: filepath.Join(t.TempDir(), "none")})
	if r.Error != "" || len(r.Containers) != 0 {
		t.Errorf("%+v", r)
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := Collect(Options{StateDir: f}); r.Error == "" {
		t.Errorf("a file as state dir: no error")
	}
}

// The pod's names reach vgpu status from pods.json; names a tenant chose
// cannot put control characters on the terminal.
func TestPodNames(t *testing.T) {
	f := newFixture(t)
	f.container("k", &tenant.Record{ID: "k", Name: "web/nginx"}, quotaOf(gib))
	f.container("evil", &tenant.Record{ID: "evil", Name: "x\x1b[2Jy"}, quotaOf(gib))
	f.container("plain", &tenant.Record{ID: "plain"}, quotaOf(gib))
	long := strings.Repeat("a", 300)
	if err := events.WritePods(f.state, map[string]events.Pod{
		"k":    {Namespace: "shop", Name: "web", Container: "nginx"},
		"evil": {Namespace: "t1", Name: "p\x1b]0;owned\x07", Container: long},
	}); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	if p := find(t, r, "k").Pod; p == nil || *p != (events.Pod{Namespace: "shop", Name: "web", Container: "nginx"}) {
		t.Errorf("k: pod %+v", p)
	}
	if p := find(t, r, "plain").Pod; p != nil {
		t.Errorf("plain: pod %+v, want none", p)
	}
	if p := find(t, r, "evil").Pod; p == nil || len(p.Container) != events.MaxPodField {
		t.Errorf("evil: pod %+v, want the container name cut to %d bytes", p, events.MaxPodField)
	}
	var txt bytes.Buffer
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	out := txt.String()
	if !strings.Contains(out, "  namespace shop  pod web  container nginx\n") {
		t.Errorf("text lacks k's pod line:\n%s", out)
	}
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("text holds control characters:\n%q", out)
	}
	if !strings.Contains(out, `pod "p\x1b]0;owned\a"`) || !strings.Contains(out, `name "x\x1b[2Jy"`) {
		t.Errorf("text does not show the escaped names:\n%s", out)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if p := find(t, &back, "k").Pod; p == nil || p.Name != "web" || p.Namespace != "shop" || p.Container != "nginx" {
		t.Errorf("JSON: k's pod %+v:\n%s", p, js.String())
	}
	// A broken pods.json is an error of the report, not of a container.
	if err := os.WriteFile(filepath.Join(f.state, config.StateNode, events.PodsFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	if !strings.Contains(r.HostEnforcement.Error, events.PodsFile) || find(t, r, "k").Pod != nil {
		t.Errorf("corrupt pods.json: error %q, k's pod %+v", r.HostEnforcement.Error, find(t, r, "k").Pod)
	}
}

// A process outside any container whose /run/vgpu/quota is an absolute
// symlink to a container's quota file is not that container's process: the
// link is resolved inside the process's root, where it names nothing.
func TestSymlinkedQuotaNotAProcess(t *testing.T) {
	f := newFixture(t)
	// no init recorded: its processes are those that see its quota file
	live := f.container("live", &tenant.Record{ID: "live"}, quotaOf(gib))
	f.process(1001, []int{1001, 1}, "sh", live, false, "")
	f.process(1005, []int{1005}, "impostor", "", false, "")
	link := filepath.Join(f.proc, "1005", "rootfs", "run", "vgpu", "quota")
	if err := os.Symlink(filepath.Join(live, config.StateQuota), link); err != nil {
		t.Fatal(err)
	}
	c := find(t, Collect(Options{StateDir: f.state, ProcRoot: f.proc}), "live")
	if c.HostProcesses != 1 {
		t.Errorf("%d host processes, want 1 (the impostor's link must not count)", c.HostProcesses)
	}
}

const chrootChildEnv = "VGPU_TEST_CHROOT_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(chrootChildEnv); dir != "" {
		if err := unix.Chroot(dir); err != nil {
			fmt.Fprintln(os.Stderr, "chroot:", err)
			os.Exit(1)
		}
		if _, err := os.Stdout.WriteString("ready"); err != nil {
			os.Exit(1)
		}
		for {
			time.Sleep(time.Hour) // until killed
		}
	}
	os.Exit(m.Run())
}

// Layout 7: the time the container's launches waited for its own pacer,
// all devices together. An older layout's bytes there are not a count.
func TestPaceWait(t *testing.T) {
	for _, tc := range []struct {
		version uint32
		want    *uint64
	}{{7, new(uint64(4321))}, {6, nil}} {
		f := newFixture(t)
		dir := f.container("c", &tenant.Record{ID: "c"}, quotaOf(gib, gib))
		h := contract.NewRegionHeader(tc.version)
		h.PaceWaitMs = 4321
		write(t, filepath.Join(dir, "shared", contract.RegionFile), contract.EncodeRegion(h, nil))
		got := Collect(Options{StateDir: f.state, ProcRoot: f.proc}).Containers[0].PaceWaitMS
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("layout %d: pace wait %v, want %v", tc.version, got, tc.want)
		}
	}
}

// Two readings measure the share of the time the container's own pacer held
// it (its pace wait's growth over the time between them), clamped to the
// whole time; vgpu status says it from half a percent. A counter that went
// back (a region made anew) measures nothing.
func TestPaceHeld(t *testing.T) {
	for _, tc := range []struct {
		before, after uint32
		want          float64 // -1: not measured
		line          string  // "": no line
	}{
		{4321, 4821, 0.5, "its own pacer held its launches 50% of the time between the readings (4.8 s in all)"},
		{4321, 6321, 1, "its own pacer held its launches 100% of the time"},
		{4321, 4325, 0.004, ""},
		{4321, 100, -1, ""},
	} {
		f := newFixture(t)
		dir := f.container("c", &tenant.Record{ID: "c"}, quotaOf(gib))
		reading := func(ms uint32) *Report {
			h := contract.NewRegionHeader(contract.RegionVersion)
			h.PaceWaitMs = ms
			write(t, filepath.Join(dir, "shared", contract.RegionFile), contract.EncodeRegion(h, nil))
			return Collect(Options{StateDir: f.state, ProcRoot: f.proc})
		}
		r1, r2 := reading(tc.before), reading(tc.after)
		r2.Containers[0].when = r1.Containers[0].when.Add(time.Second)
		MeasureShares(r1, r2)
		got := r2.Containers[0].PaceHeld
		if tc.want < 0 && got != nil || tc.want >= 0 && (got == nil || math.Abs(*got-tc.want) > 1e-9) {
			t.Errorf("pace wait %d then %d ms a second later: held %v, want %v", tc.before, tc.after, got, tc.want)
		}
		var txt bytes.Buffer
		if err := r2.WriteText(&txt); err != nil {
			t.Fatal(err)
		}
		has := strings.Contains(txt.String(), "its own pacer held")
		if tc.line == "" && has || tc.line != "" && !strings.Contains(txt.String(), "  compute: "+tc.line) {
			t.Errorf("pace wait %d then %d ms: vgpu status says\n%s\nwant the line %q", tc.before, tc.after, txt.String(), tc.line)
		}
	}
}
