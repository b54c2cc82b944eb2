package daemon

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

const gib = uint64(1) << 30

// setStat gives fake process pid a /proc/<pid>/stat with start time start.
func setStat(t *testing.T, procRoot string, pid int, start uint64) {
	t.Helper()
	f := []string{"S", "1"}
	for len(f) < 19 {
		f = append(f, "0")
	}
	f = append(f, strconv.FormatUint(start, 10), "0")
	b := strconv.Itoa(pid) + " (worker) " + strings.Join(f, " ") + "\n"
	if err := os.WriteFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"), []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// addProc puts a fake process pid in container id's cgroup.
func addProc(t *testing.T, procRoot, id string, pid int) {
	t.Helper()
	d := filepath.Join(procRoot, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "cgroup"), []byte("6:freezer:/runc/"+id+"\n0::/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	setMountNS(t, d, "mnt:[4026539999]")
}

// setMountNS points the fake process d's ns/mnt at ns, replacing what was
// there: a pid can be set up again as another process.
func setMountNS(t *testing.T, d, ns string) {
	t.Helper()
	link := filepath.Join(d, "ns", "mnt")
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.Symlink(ns, link); err != nil {
		t.Fatal(err)
	}
}

func eventsOf(t *testing.T, state string) []events.Event {
	t.Helper()
	evs, err := events.Read(state)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// A process of c1 (limit 1 GiB) holds 768 MiB, forks a child that keeps
// the driver's descriptors and exits: the driver goes on listing its pid.
// That memory stays c1's, so when another process of c1 takes 768 MiB more
// the container is over its limit; the kill aimed at the exited pid kills
// c1 whole (cgroup), with an event saying why. A pid seen in c1 and reused
// by a process of another container stays c1's; one never seen in a
// container is nobody's.
func TestDaemonChargesExitedPidToItsContainer(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" memory=1073741824")
	h.addContainer("c2", "vgpu-quota 1\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\ndevice 0 "+uuid+" memory=8589934592\n", 200)
	setStat(t, h.proc, 101, 1000)
	f := &feed{samples: []nvmlfeed.Sample{{HostPID: 101, GPU: uuid, UsedBytes: 768 << 20}}}
	now := time.Unix(1_800_000_000, 0)
	var killed []int
	var log bytes.Buffer
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f, Log: &log,
		Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }, Kill: func(pid int) error { killed = append(killed, pid); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	d.Round()
	os.RemoveAll(filepath.Join(h.proc, "101")) // exited; the driver still lists it
	f.samples = append(f.samples, nvmlfeed.Sample{HostPID: 102, GPU: uuid, UsedBytes: 768 << 20})
	for i := 0; i < 10; i++ {
		now = now.Add(100 * time.Millisecond)
		d.Round()
	}
	if len(killed) != 0 {
		t.Errorf("killed pids %v: the exited pid's memory is held by another process, the kill must take the container", killed)
	}
	var whole *events.Event
	evs := eventsOf(t, h.state)
	for i, e := range evs {
		if e.Kind == string(enforce.KillAll) && e.Container == "c1" {
			whole = &evs[i]
		}
	}
	if whole == nil || whole.Reason != enforce.ReasonMemory || !strings.Contains(whole.Detail, "pid 101 exited") || whole.Used != 1536<<20 {
		t.Fatalf("want c1 killed whole for 1.5 GiB over its 1 GiB limit, pid 101 named; events %+v\n%s", evs, log.String())
	}

	// reused: pid 300 seen in c1, then a process of c2 started later under
	// the same pid while the driver still lists it: the memory stays c1's
	addProc(t, h.proc, "c1", 300)
	setStat(t, h.proc, 300, 1000)
	f.samples = []nvmlfeed.Sample{{HostPID: 300, GPU: uuid, UsedBytes: 512 << 20}}
	d.Round()
	addProc(t, h.proc, "c2", 300)
	setStat(t, h.proc, 300, 2000)
	d.Round()
	if n := testutil.ToFloat64(d.m.procMem.WithLabelValues("c1", uuid, "300")); n != 512<<20 {
		t.Errorf("a pid reused by c2 while the driver lists c1's memory under it: c1 charged %v bytes, want 512 MiB", n)
	}
	// never seen in a container: nobody's
	f.samples = []nvmlfeed.Sample{{HostPID: 777, GPU: uuid, UsedBytes: 512 << 20}}
	d.Round()
	if n, _ := testutil.GatherAndCount(prometheus.Gatherer(nil2(d)), "vgpu_node_process_memory_bytes"); n != 0 {
		t.Errorf("pid 777, never a container's, is charged to one")
	}
}

// nil2 returns a gatherer of d's process memory gauge alone.
func nil2(d *Daemon) prometheus.Gatherer {
	r := prometheus.NewRegistry()
	r.MustRegister(d.m.procMem)
	return r
}

// Under free, on a fake driver of 140 GiB (100 held outside vgpu): c1's
// process holding 12 GiB leaves the driver's list but the GPU's used memory
// stays (a child of it keeps the descriptors, and the driver names no pid
// for it). The 12 GiB are held by nobody: c2's ceiling leaves them out
// from the second round; once the gap persisted a grace, c1 is killed whole
// with an event. Memory nobody explains that no container's departed
// processes held (at least half of it) is reported, never acted on.
func TestDaemonActsOnMemoryNoProcessExplains(t *testing.T) {
	p := newBorrowPair(t, true)
	d, f, h := p.d, p.f, p.host
	f.samples = append(f.samples, nvmlfeed.Sample{HostPID: 101, GPU: uuid, UsedBytes: 12 * gib}, nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 4 * gib})
	f.used = 116*gib + 64<<20 // the driver's own 64 MiB
	d.Round()
	if c := d.MemoryCeilings()["c2"][0]; c != 28*gib {
		t.Fatalf("c2's ceiling %d GiB, want 28 (4 + the 24 free)", c/gib)
	}
	f.samples = f.samples[:1]
	f.samples = append(f.samples, nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 4 * gib})
	for i := 0; i < 2; i++ {
		p.now = p.now.Add(100 * time.Millisecond)
		d.Round()
	}
	if c := d.MemoryCeilings()["c2"][0]; c != 28*gib {
		t.Errorf("c2's ceiling %d GiB with 12 GiB held by nobody, want 28 (not its limit 32: those 12 are not free)", c/gib)
	}
	if v := testutil.ToFloat64(d.m.unexplained.WithLabelValues(uuid)); v != float64(12*gib) {
		t.Errorf("unexplained memory metric %v, want 12 GiB", v)
	}
	for i := 0; i < 5; i++ {
		p.now = p.now.Add(100 * time.Millisecond)
		d.Round()
	}
	var whole *events.Event
	evs := eventsOf(t, h.state)
	for i, e := range evs {
		if e.Kind == string(enforce.KillAll) {
			whole = &evs[i]
		}
	}
	if whole == nil || whole.Container != "c1" || whole.Reason != ReasonOrphan || whole.Used != 12*gib || !strings.Contains(whole.Detail, "keeps the driver's descriptors") {
		t.Fatalf("want c1 killed whole for 12 GiB nobody explains; events %+v\n%s", evs, p.log.String())
	}

	// a gap with no container's processes gone before it that held as
	// much (c1's 512 MiB process exits as 6 GiB appear): reported only
	q := newBorrowPair(t, true)
	q.f.samples = append(q.f.samples, nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 4 * gib}, nvmlfeed.Sample{HostPID: 101, GPU: uuid, UsedBytes: gib / 2})
	q.f.used = 104*gib + gib/2
	q.d.Round()
	q.f.samples = q.f.samples[:2]
	q.f.used = 110 * gib
	for i := 0; i < 10; i++ {
		q.now = q.now.Add(100 * time.Millisecond)
		q.d.Round()
	}
	if evs := eventsOf(t, q.host.state); len(evs) != 0 {
		t.Errorf("acted on memory no container is suspected of: %+v", evs)
	}
	if !strings.Contains(q.log.String(), "6.0 GiB used that no listed process explains") {
		t.Errorf("the unexplained memory is not logged:\n%s", q.log.String())
	}
}
