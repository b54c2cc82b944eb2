package top

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/status"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

const (
	gib  = 1 << 30
	gpu0 = "GPU-5e3b6a2e-0000-4000-8000-000000000000"
	gpu1 = "GPU-5e3b6a2e-0000-4000-8000-000000000001"
)

var created = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

// region lays out a shared region (lib/cudahook/include/vgpu_region.h):
// one slot per entry of usage (bytes per container device), busy ns per
// device.
func region(usage [][]uint64, busy []uint64) []byte {
	h := contract.NewRegionHeader(contract.RegionVersion)
	for d, v := range busy {
		h.Compute[d].BusyNs = v
	}
	slots := map[int]contract.RegionSlot{}
	for i, u := range usage {
		s := contract.RegionSlot{State: 1, Pid: uint32(100 + i), Claimed: uint64(created.UnixNano())}
		copy(s.Usage[:], u)
		slots[i] = s
	}
	return contract.EncodeRegion(h, slots)
}

type ctr struct {
	id, name string
	devs     []tenant.Device
	usage    [][]uint64
}

func ptr(v int) *int { return &v }

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func jsonOf(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fixture lays out a state directory as vgpu-runtime and vgpu node leave
// it: three containers on two GPUs (one in a pod, one throttled), the
// node's heartbeat (current: node says on) with its shares and GPU totals,
// and its events. The slots' lock bytes are held by the test, as live
// processes hold theirs.
func fixture(t *testing.T, node bool) string {
	dir := filepath.Join(t.TempDir(), "state")
	cs := []ctr{
		{"c1", "train", []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: gpu0}, Memory: 8 * gib, Compute: 50, ComputeRequest: ptr(30)}}, [][]uint64{{3 * gib}, {2 * gib}}},
		{"c2", "bypass", []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: gpu0}, Memory: 2 * gib, Compute: 25}}, [][]uint64{{1 * gib}}},
		{"c3", "infer", []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: gpu1}, Memory: 4 * gib, Compute: 100}}, [][]uint64{{3900 << 20}}},
	}
	for _, c := range cs {
		d := filepath.Join(dir, c.id)
		write(t, filepath.Join(d, config.StateInfo), jsonOf(t, &tenant.Record{Name: c.name, Created: created}))
		q := &quota.File{DriverCuda: "/usr/lib/vgpu/driver/libcuda.so.1", DriverNvml: "/usr/lib/vgpu/driver/libnvidia-ml.so.1", SharedDir: "/run/vgpu/shared", Devices: c.devs}
		qb, err := q.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(d, config.StateQuota), qb)
		write(t, filepath.Join(d, config.StateShared, contract.RegionFile), region(c.usage, []uint64{uint64(5 * time.Second)}))
		lf, err := os.OpenFile(filepath.Join(d, config.StateShared, contract.RegionLockFile), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lf.Close() })
		for s := range c.usage {
			fl := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(1 + s), Len: 1}
			if err := unix.FcntlFlock(lf.Fd(), unix.F_OFD_SETLK, &fl); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !node {
		return dir
	}
	ev, err := events.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Beat(events.Heartbeat{PID: 4242, Started: created, Beat: time.Now(), Interval: "100ms", Grace: "500ms", Tolerance: "128 MiB + 2% of the limit",
		Shares: []events.Share{{Container: "c1", GPU: gpu0, Percent: 48}, {Container: "c2", GPU: gpu0, Percent: 41, Duty: 0.4}},
		GPUs: []events.GPU{{Index: 0, UUID: gpu0, Name: "NVIDIA H200", MemoryTotal: 140 * gib, MemoryUsed: 6 * gib, Busy: 89},
			{Index: 1, UUID: gpu1, Name: "NVIDIA H200", MemoryTotal: 140 * gib, MemoryUsed: 3900 << 20, Busy: 12}}}); err != nil {
		t.Fatal(err)
	}
	at := created.Add(time.Hour)
	for i, e := range []events.Event{
		{Kind: "freeze", Container: "c2", GPU: gpu0, Reason: "compute", Used: 97, Limit: 25},
		{Kind: "kill", Container: "c3", GPU: gpu1, PID: 5120, Reason: "memory", Used: 6 * gib, Limit: 4 * gib},
	} {
		e.Time = at.Add(time.Duration(i) * time.Second)
		if err := ev.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := events.WritePods(dir, map[string]events.Pod{"c1": {Namespace: "ml", Name: "train-0", Container: "trainer"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// collect reads the fixture as vgpu top does, with the clock and the path
// fixed for a golden comparison.
func collect(t *testing.T, dir string) *status.Report {
	r := status.Collect(status.Options{StateDir: dir, ProcRoot: t.TempDir()})
	r.StateDir = "/var/lib/vgpu"
	r.Time = created.Add(time.Hour + time.Minute)
	// what vgpu node's arbitration grants train now (its grant file is
	// internal/arbiter's, read by status.Collect; the frame shows the figure)
	for i := range r.Containers {
		if r.Containers[i].ID == "c1" {
			g := 45.0
			r.Containers[i].Devices[0].ComputeGrant, r.Containers[i].Devices[0].GrantSource = &g, "arbitration"
		}
	}
	return r
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		write(t, path, []byte(got))
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test ./internal/top -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestOnceGolden(t *testing.T) {
	time.Local = time.UTC
	r := collect(t, fixture(t, true))
	if !r.HostEnforcement.On {
		t.Fatalf("the fixture's heartbeat is not read as on: %+v", r.HostEnforcement)
	}
	out := Frame(r, View{Loc: time.UTC})
	if strings.Contains(out, "\x1b") {
		t.Errorf("--once frame holds escape codes:\n%q", out)
	}
	golden(t, "once.golden", out)
	// the bypass is throttled and over its compute limit; its row says so
	for _, want := range []string{"frozen 40%", "41% / 25%", "30% / 45%", "ml/train-0/trainer", "killed pid 5120"} {
		if !strings.Contains(out, want) {
			t.Errorf("frame lacks %q", want)
		}
	}
}

// Without vgpu node: the frame says host enforcement is off and shows
// what the records alone give.
func TestOnceWithoutNode(t *testing.T) {
	time.Local = time.UTC
	out := Frame(collect(t, fixture(t, false)), View{Loc: time.UTC, Sort: ByName})
	golden(t, "once-no-node.golden", out)
	if !strings.Contains(out, "host enforcement: off") {
		t.Errorf("no 'host enforcement: off' line:\n%s", out)
	}
}

func TestStyledFrameKeepsColumns(t *testing.T) {
	r := collect(t, fixture(t, true))
	plain := Frame(r, View{Loc: time.UTC})
	styled := Frame(r, View{Loc: time.UTC, Styled: true})
	if !strings.Contains(styled, "\x1b[") {
		t.Fatal("styled frame has no escape codes")
	}
	if got := stripANSI(styled); got != plain {
		t.Errorf("styled frame without its escape codes is not the plain one:\n%s\n---\n%s", got, plain)
	}
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func key(s string) tea.KeyPressMsg {
	return tea.KeyPressMsg(tea.Key{Text: s, Code: rune(s[0])})
}

// The live view's logic, without a terminal: a reading is shown and the
// next one scheduled; s cycles the order; g steps through the GPUs and
// back to all; q quits.
func TestModelUpdate(t *testing.T) {
	dir := fixture(t, true)
	n := 0
	m := NewModel(func() *status.Report { n++; return collect(t, dir) }, View{Loc: time.UTC})
	if got := m.View().Content; !strings.Contains(fmt.Sprint(got), "reading") {
		t.Errorf("before the first reading: %q", got)
	}
	msg := m.Init()()
	_, cmd := m.Update(msg)
	if m.Report() == nil || cmd == nil {
		t.Fatalf("a reading did not land or schedule the next: %v %v", m.Report(), cmd)
	}
	_, cmd = m.Update(tickMsg{})
	if cmd == nil {
		t.Fatal("a tick does not read again")
	}
	m.Update(cmd())
	if n != 2 {
		t.Errorf("%d readings, want 2", n)
	}
	for _, want := range []SortKey{ByCompute, ByName, ByMemory} {
		m.Update(key("s"))
		if m.Current().Sort != want {
			t.Errorf("after s: sort %v, want %v", m.Current().Sort, want)
		}
	}
	for _, want := range []string{gpu0, gpu1, ""} {
		m.Update(key("g"))
		if m.Current().GPU != want {
			t.Errorf("after g: GPU %q, want %q", m.Current().GPU, want)
		}
	}
	m.Update(key("g"))
	view := fmt.Sprint(m.View().Content)
	if !strings.Contains(view, "bypass") || strings.Contains(view, "infer") {
		t.Errorf("GPU 0 only: the frame shows\n%s", view)
	}
	m.Update(key("a"))
	if m.Current().GPU != "" {
		t.Errorf("a: GPU %q, want all", m.Current().GPU)
	}
	if _, cmd := m.Update(key("q")); cmd == nil {
		t.Fatal("q does not quit")
	} else if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Errorf("q: %T, want tea.QuitMsg", cmd())
	}
}

// Sorting by compute puts the larger measured share first.
func TestSortByCompute(t *testing.T) {
	r := collect(t, fixture(t, true))
	out := Frame(r, View{Loc: time.UTC, Sort: ByCompute, GPU: gpu0})
	if i, j := strings.Index(out, "train "), strings.Index(out, "bypass "); i < 0 || j < 0 || i > j {
		t.Errorf("by compute: train (48%%) must come before bypass (41%%):\n%s", out)
	}
	out = Frame(r, View{Loc: time.UTC, Sort: ByName, GPU: gpu0})
	if i, j := strings.Index(out, "train "), strings.Index(out, "bypass "); i < 0 || j < 0 || j > i {
		t.Errorf("by name: bypass before train:\n%s", out)
	}
}

// A container with no compute setting on a GPU where others hold requests
// gets request 0 (surplus only): vgpu top says so, as vgpu status does.
func TestRequestZeroAsStatus(t *testing.T) {
	r := &status.Report{Time: time.Unix(1700000000, 0).UTC(), Containers: []status.Container{{
		ID: "c1", Name: "plain", State: "running",
		Devices: []status.Device{{Index: 0, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000000", ComputeRequest: 0, ComputeLimit: 100}},
	}}}
	out := Frame(r, View{Loc: time.UTC})
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^ *0 .* 0% +none `).MatchString(b.String()) {
		t.Fatalf("vgpu status does not show request 0:\n%s", b.String())
	}
	if !regexp.MustCompile(`(?m)^ *plain .* 0% / - `).MatchString(out) {
		t.Errorf("vgpu top does not show request 0:\n%s", out)
	}
}

// vgpu top shows a device's priority beside its request when it is not
// normal, as vgpu status does.
func TestTopShowsPriority(t *testing.T) {
	r := &status.Report{Time: time.Unix(1700000000, 0).UTC(), Containers: []status.Container{
		{ID: "c1", Name: "serve", State: "running", Devices: []status.Device{{Index: 0, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000000", ComputeRequest: 30, ComputeLimit: 100, Priority: "high"}}},
		{ID: "c2", Name: "batch", State: "running", Devices: []status.Device{{Index: 0, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000000", ComputeRequest: 100, ComputeLimit: 100, Priority: "low"}}},
		{ID: "c3", Name: "plain", State: "running", Devices: []status.Device{{Index: 0, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000000", ComputeRequest: 100, ComputeLimit: 100}}},
	}}
	out := Frame(r, View{Loc: time.UTC})
	for _, re := range []string{`(?m)^ *serve .* 30% / - high `, `(?m)^ *batch .* low `} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("frame does not match %s:\n%s", re, out)
		}
	}
	if regexp.MustCompile(`(?m)^ *plain .*(high|low|normal)`).MatchString(out) {
		t.Errorf("a normal device shows a priority:\n%s", out)
	}
}

// A device with a suspended process shows the host memory it holds and
// since when, in the memory cell.
func TestFrameShowsSuspended(t *testing.T) {
	since := time.Date(2026, 1, 2, 12, 1, 7, 0, time.UTC)
	r := &status.Report{StateDir: "/s", Time: since.Add(time.Minute), HostEnforcement: status.HostEnforcement{On: true},
		Containers: []status.Container{{ID: "borrower", Devices: []status.Device{{UUID: "GPU-1", MemoryLimit: 8 << 30, MemoryUsed: 1 << 30,
			Suspended: []events.Suspended{{Container: "borrower", PID: 42, GPU: "GPU-1", Bytes: 6 << 30, Since: since}}}}}}}
	if out := Frame(r, View{Loc: time.UTC}); !strings.Contains(out, "(+6.00 GiB suspended since 12:01:07)") {
		t.Errorf("frame lacks the suspended memory:\n%s", out)
	}
}

// THROTTLE says how much of the time vgpu node froze a container and how
// much its own pacer held it; a hold under half a percent is none.
func TestThrottleShowsPacerHold(t *testing.T) {
	r := collect(t, fixture(t, true))
	held := map[string]float64{"c1": 0.79, "c2": 0.3, "c3": 0.001}
	for i := range r.Containers {
		h := held[r.Containers[i].ID]
		r.Containers[i].PaceHeld = &h
	}
	out := Frame(r, View{Loc: time.UTC})
	for name, want := range map[string]string{"train": "held 79%", "bypass": "frozen 40%, held 30%", "infer": "none"} {
		line := ""
		for l := range strings.SplitSeq(out, "\n") {
			if strings.HasPrefix(l, "  "+name+" ") {
				line = l
			}
		}
		if !strings.Contains(line, "  "+want+"  ") {
			t.Errorf("%s's row %q lacks %q in THROTTLE:\n%s", name, line, want, out)
		}
	}
}

// A device nothing paces beside requests shows UNPACED in REQUEST/GRANT, as
// vgpu status warns; a paced neighbour and a lone unpaced device do not.
func TestTopFlagsUnpacedBesideRequests(t *testing.T) {
	gpu := "GPU-5e3b6a2e-0000-4000-8000-000000000000"
	r := &status.Report{Time: time.Unix(1700000000, 0).UTC(), Containers: []status.Container{
		{ID: "c1", Name: "legacy", State: "running", Devices: []status.Device{{Index: 0, UUID: gpu, ComputeRequest: 100, ComputeLimit: 100, UnpacedBesideRequests: true}}},
		{ID: "c2", Name: "serve", State: "running", Devices: []status.Device{{Index: 0, UUID: gpu, ComputeRequest: 50, ComputeLimit: 100}}},
	}}
	out := Frame(r, View{Loc: time.UTC})
	if !regexp.MustCompile(`(?m)^ *legacy .* UNPACED `).MatchString(out) {
		t.Errorf("the unpaced device's row does not say UNPACED:\n%s", out)
	}
	if regexp.MustCompile(`(?m)^ *serve .*UNPACED`).MatchString(out) {
		t.Errorf("the paced neighbour's row says UNPACED:\n%s", out)
	}
}
