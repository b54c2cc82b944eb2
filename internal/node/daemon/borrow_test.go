package daemon

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// totalFeed is a feed that also lists the GPU's total.
type totalFeed struct {
	feed
	total uint64
}

func (f *totalFeed) GPUs() ([]nvmlfeed.GPU, error) {
	return []nvmlfeed.GPU{{UUID: uuid, MemoryTotal: f.total, Busy: -1}}, nil
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
	os.WriteFile(filepath.Join(h.state, "c1", "quota"), []byte(q), 0o644)
	gpath := filepath.Join(h.state, "c1", "host", "grant")
	os.MkdirAll(filepath.Dir(gpath), 0o755)
	g, _ := arbiter.Encode(make([]uint64, 1))
	os.WriteFile(gpath, g, 0o644)
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
