package daemon

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// totalFeed is a feed that also lists the GPU's total (and, when set, what
// the driver says is used, its own memory included).
type totalFeed struct {
	feed
	total, used uint64
}

func (f *totalFeed) GPUs() ([]nvmlfeed.GPU, error) {
	return []nvmlfeed.GPU{{UUID: uuid, MemoryTotal: f.total, MemoryUsed: f.used, Busy: -1}}, nil
}

// On a fake driver: 140 GiB, 116 GiB held by a process outside vgpu, a
// container with request 16 GiB and limit 32 GiB holding 16: its ceiling is
// 24 GiB (the 8 left), published in its grant file with a deadline ahead of
// now, which the library believes; when the outsider grows to 124 GiB, the
// ceiling falls to its request (nothing is taken back: it holds 16).
func TestDaemonPublishesMemoryCeilings(t *testing.T) {
	const gib = uint64(1) << 30
	h := newHost(t, "device 0 "+uuid+" memory=34359738368")
	q := "vgpu-quota 2\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\ndevice 0 " + uuid + " memory=34359738368 memory-request=17179869184\n"
	if err := os.WriteFile(filepath.Join(h.state, "c1", "quota"), []byte(q), 0o644); err != nil {
		t.Fatal(err)
	}
	gpath := filepath.Join(h.state, "c1", "host", "grant")
	if err := os.MkdirAll(filepath.Dir(gpath), 0o755); err != nil {
		t.Fatal(err)
	}
	g, _ := arbiter.Encode(make([]uint64, 1))
	if err := os.WriteFile(gpath, g, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &totalFeed{total: 140 * gib, feed: feed{samples: []nvmlfeed.Sample{
		{HostPID: 101, GPU: uuid, UsedBytes: 16 * gib},
		{HostPID: 555, GPU: uuid, UsedBytes: 116 * gib},
	}}}
	mono := uint64(5e12)
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f, Log: io.Discard,
		Registry: prometheus.NewRegistry(), Now: func() time.Time { return time.Unix(1_800_000_000, 0) }, Mono: func() uint64 { return mono },
		Kill: func(int) error { return nil }, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d.Round()
	if c := d.MemoryCeilings()["c1"][0]; c != 24*gib {
		t.Fatalf("ceiling %d GiB, want 24", c/gib)
	}
	gr, err := arbiter.Read(gpath)
	if err != nil {
		t.Fatal(err)
	}
	if cp, ok := gr.MemoryCap(0, 16*gib, 32*gib, mono); cp != 24*gib || !ok {
		t.Errorf("the library's cap %d GiB (borrowing %v), want 24", cp/gib, ok)
	}
	if cp, ok := gr.MemoryCap(0, 16*gib, 32*gib, mono+uint64(3*time.Second)); cp != 16*gib || ok {
		t.Errorf("after the deadline, no round since: cap %d GiB (borrowing %v), want the request 16", cp/gib, ok)
	}
	f.samples[1].UsedBytes = 124 * gib
	d.Round()
	gr, _ = arbiter.Read(gpath)
	if cp, _ := gr.MemoryCap(0, 16*gib, 32*gib, mono); cp != 16*gib {
		t.Errorf("nothing free: cap %d GiB, want the request 16", cp/gib)
	}
}

// addContainer adds a second container to h, id with pids, its quota q.
func (h *host) addContainer(id, q string, pids ...int) {
	dir := filepath.Join(h.state, id)
	if err := os.MkdirAll(filepath.Join(dir, "shared"), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "quota"), []byte(q), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "container.json"), []byte(`{"id":"`+id+`","created":"2026-01-01T00:00:00Z","pids":[`+strconv.Itoa(pids[0])+`],"devices":[]}`), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(h.cg, "freezer", "runc", id), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.cg, "freezer", "runc", id, "freezer.state"), []byte("THAWED\n"), 0o644); err != nil {
		h.t.Fatal(err)
	}
	for _, pid := range pids {
		d := filepath.Join(h.proc, strconv.Itoa(pid))
		if err := os.MkdirAll(filepath.Join(d, "root", "run", "vgpu"), 0o755); err != nil {
			h.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup"), []byte("6:freezer:/runc/"+id+"\n0::/\n"), 0o644); err != nil {
			h.t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
			h.t.Fatal(err)
		}
		if err := os.Symlink("mnt:[4026539998]", filepath.Join(d, "ns", "mnt")); err != nil {
			h.t.Fatal(err)
		}
		if err := os.Link(filepath.Join(dir, "quota"), filepath.Join(d, "root", "run", "vgpu", "quota")); err != nil {
			h.t.Fatal(err)
		}
	}
}

// writeNeed writes a region header of layout version with device 0's need.
func writeNeed(t *testing.T, dir string, version uint32, mib uint32) {
	b := make([]byte, contract.RegionHeaderSize)
	binary.LittleEndian.PutUint64(b[0:], contract.RegionMagic)
	binary.LittleEndian.PutUint32(b[8:], version)
	binary.LittleEndian.PutUint32(b[704:], mib)
	if err := os.WriteFile(filepath.Join(dir, contract.RegionFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// borrowPair is a fake driver of 140 GiB with 100 held by a process outside
// vgpu (pid 555), and containers c1 (pids 101, 102) and c2 (200, 201),
// each requesting 16 GiB up to 32, with grant files; its daemon's clock is
// now and its kills are recorded, not done.
type borrowPair struct {
	host   *host
	f      *totalFeed
	d      *Daemon
	now    time.Time
	killed []int
	log    bytes.Buffer
}

func newBorrowPair(t *testing.T, free bool) *borrowPair {
	const gib = uint64(1) << 30
	q := "vgpu-quota 2\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\ndevice 0 " + uuid + " memory=34359738368 memory-request=17179869184\n"
	p := &borrowPair{host: newHost(t, "device 0 "+uuid+" memory=34359738368"), now: time.Unix(1_800_000_000, 0)}
	h := p.host
	if err := os.WriteFile(filepath.Join(h.state, "c1", "quota"), []byte(q), 0o644); err != nil {
		t.Fatal(err)
	}
	h.addContainer("c2", q, 200, 201)
	for _, id := range []string{"c1", "c2"} {
		gpath := filepath.Join(h.state, id, "host", "grant")
		if err := os.MkdirAll(filepath.Dir(gpath), 0o755); err != nil {
			t.Fatal(err)
		}
		g, _ := arbiter.Encode(make([]uint64, 1))
		if err := os.WriteFile(gpath, g, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p.f = &totalFeed{total: 140 * gib, feed: feed{samples: []nvmlfeed.Sample{{HostPID: 555, GPU: uuid, UsedBytes: 100 * gib}}}}
	var err error
	p.d, err = New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: p.f, Log: &p.log,
		Registry: prometheus.NewRegistry(), Now: func() time.Time { return p.now }, Mono: func() uint64 { return 5e12 },
		Kill: func(pid int) error { p.killed = append(p.killed, pid); return nil }, Interval: 100 * time.Millisecond, BorrowFree: free})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Under memory_borrow = "free" on a fake driver: 140 GiB, 100 held outside
// vgpu, two containers requesting 16 GiB up to 32. c1 may take all 32 while
// c2 holds little; when c2 (holding 4) waits for 8 GiB more, the GPU having
// 4 free, vgpu node kills c1's largest process with an event naming why,
// and only once; a claim past c2's request by the driver's figures, a
// need the GPU has room for, or a region of layout 4 kills nothing.
func TestDaemonReclaimsForOwner(t *testing.T) {
	const gib = uint64(1) << 30
	p := newBorrowPair(t, true)
	d, f, h := p.d, p.f, p.host
	f.samples = append(f.samples, nvmlfeed.Sample{HostPID: 101, GPU: uuid, UsedBytes: 2 * gib})
	d.Round()
	if c := d.MemoryCeilings()["c1"][0]; c != 32*gib {
		t.Fatalf("c1's ceiling %d GiB with 38 free, want its limit 32", c/gib)
	}
	// c1 borrows 16 above its request, in two processes; c2 holds 4.
	f.samples = append(f.samples[:1], nvmlfeed.Sample{HostPID: 101, GPU: uuid, UsedBytes: 12 * gib},
		nvmlfeed.Sample{HostPID: 102, GPU: uuid, UsedBytes: 20 * gib}, nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 4 * gib})
	c2shared := filepath.Join(h.state, "c2", "shared")
	writeNeed(t, c2shared, 4, 8<<10)
	d.Round()
	writeNeed(t, c2shared, 5, 4<<10) // the 4 GiB free suffice
	d.Round()
	writeNeed(t, c2shared, 5, 13<<10) // 4 + 13 > 16 by the driver's figures
	d.Round()
	if len(p.killed) != 0 {
		t.Fatalf("killed %v before a claim within the request that does not fit\n%s", p.killed, p.log.String())
	}
	if !strings.Contains(p.log.String(), "past its request") {
		t.Errorf("the refused claim is not logged:\n%s", p.log.String())
	}
	// 3.5 GiB free by the processes' figures, the driver keeping 1 GiB of
	// its own: only 2.5 by the GPU's, short of the 3 GiB asked
	f.used = 137*gib + gib/2
	f.samples[0].UsedBytes = 100*gib + gib/2
	writeNeed(t, c2shared, 5, 3<<10)
	d.Round()
	if len(p.killed) != 1 || p.killed[0] != 102 {
		t.Fatalf("killed %v for a need the GPU's own free figure lacks, want c1's largest, 102\n%s", p.killed, p.log.String())
	}
	p.killed = nil
	f.used = 0
	f.samples[0].UsedBytes = 100 * gib
	p.now = p.now.Add(6 * time.Second) // the kill's hold has passed; 102 still listed in the fake
	writeNeed(t, c2shared, 5, 8<<10)
	for i := 0; i < 5; i++ {
		p.now = p.now.Add(100 * time.Millisecond)
		d.Round()
	}
	if len(p.killed) != 1 || p.killed[0] != 102 {
		t.Fatalf("killed %v, want c1's largest, 102\n%s", p.killed, p.log.String())
	}
	want := "killed pid 102 of c1 to take borrowed memory back on GPU 0 (" + uuid + "): c1 borrows 16 GiB above its request 16 GiB; c2 needs 8 GiB under its request 16 GiB"
	if !strings.Contains(p.log.String(), want) {
		t.Errorf("log does not say %q:\n%s", want, p.log.String())
	}
	evs, err := events.Read(h.state)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range evs {
		found = found || e.Reason == ReasonBorrow && e.PID == 102 && strings.Contains(e.Detail, "c2 needs 8 GiB")
	}
	if !found {
		t.Errorf("no borrow event for pid 102: %+v", evs)
	}
}

// Under the default rule a tenant that allocates around the library past
// its ceiling takes memory another tenant's request is owed: when that
// owner's allocation waits, the bypasser's largest process is killed, as
// under "free"; while nobody waits, nothing is.
func TestDaemonDefaultRuleTakesBackFromABypasser(t *testing.T) {
	const gib = uint64(1) << 30
	// 40 GiB left beside the outsider: 8 GiB are free beyond the two requests, split while neither holds its request
	p := newBorrowPair(t, false)
	d, f, h := p.d, p.f, p.host
	d.Round()
	if c := d.MemoryCeilings()["c1"][0]; c != 20*gib {
		t.Fatalf("c1's ceiling %d GiB, want 20", c/gib)
	}
	// c1 takes 32 around the library (within its limit, past its ceiling); c2 holds 4
	f.samples = append(f.samples[:1], nvmlfeed.Sample{HostPID: 101, GPU: uuid, UsedBytes: 12 * gib},
		nvmlfeed.Sample{HostPID: 102, GPU: uuid, UsedBytes: 20 * gib}, nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 4 * gib})
	p.now = p.now.Add(100 * time.Millisecond)
	d.Round()
	if len(p.killed) != 0 {
		t.Fatalf("killed %v while no owner waits", p.killed)
	}
	writeNeed(t, filepath.Join(h.state, "c2", "shared"), 5, 8<<10) // 4 free, 8 asked within its request
	p.now = p.now.Add(100 * time.Millisecond)
	d.Round()
	if len(p.killed) != 1 || p.killed[0] != 102 {
		t.Fatalf("killed %v, want the bypasser c1's largest, 102\n%s", p.killed, p.log.String())
	}
	if want := "c1 borrows 16 GiB above its request 16 GiB; c2 needs 8 GiB under its request 16 GiB"; !strings.Contains(p.log.String(), want) {
		t.Errorf("log does not say %q:\n%s", want, p.log.String())
	}
}
