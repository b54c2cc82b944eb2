package status

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// A memory request below its limit: without vgpu node status says the
// tenant is held to its request; with a fresh ceiling it shows what the
// tenant may hold now.
func TestStatusShowsMemoryCeiling(t *testing.T) {
	dir := t.TempDir()
	q := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared",
		Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: "GPU-1"}, Compute: 100, Memory: 12 << 30, MemoryRequest: 4 << 30}}}
	if _, err := state.Create(dir, state.FromQuota("b", &q), nil); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	d := find(t, r, "b").Devices[0]
	if !d.MemoryHeldToRequest || d.MemoryCeiling != 4<<30 {
		t.Fatalf("without vgpu node: %+v", d)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "memory: device 0 requests 4.00 GiB of its 12.00 GiB limit and is held to its request (no vgpu node)") {
		t.Errorf("text:\n%s", b.String())
	}
	m, err := arbiter.Map(filepath.Join(dir, "b", config.StateHost, contract.ShareFile))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetCeiling(0, 7<<30)
	m.StampMemory(monoNow() + 2e9)
	r = Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	d = find(t, r, "b").Devices[0]
	if d.MemoryHeldToRequest || d.MemoryCeiling != 7<<30 {
		t.Fatalf("with a ceiling: %+v", d)
	}
	b.Reset()
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "memory: device 0 holds 0 B (request 4.00 GiB, limit 12.00 GiB); may take 7.00 GiB more now (vgpu node's ceiling 7.00 GiB); nothing above its request") {
		t.Errorf("text:\n%s", b.String())
	}
}

// What a borrower holds, may still take and would lose to an owner, from
// both sides of its ceiling: a ceiling below what it holds (the GPU filled
// since) reads as nothing more to take, never as a smaller "may hold".
func TestStatusBorrowerLine(t *testing.T) {
	const G = 1 << 30
	for _, tc := range []struct {
		d    Device
		want string
	}{
		{Device{MemoryUsed: 117 * G, MemoryRequest: 20 * G, MemoryLimit: 128 * G, MemoryCeiling: 23 * G},
			"holds 117.00 GiB (request 20.00 GiB, limit 128.00 GiB); may take nothing more now (vgpu node's ceiling 23.00 GiB); 97.00 GiB above its request, which vgpu node takes back (suspending or killing its processes) when an owner needs it"},
		{Device{MemoryUsed: 30 * G, MemoryRequest: 20 * G, MemoryLimit: 128 * G, MemoryCeiling: 50 * G},
			"holds 30.00 GiB (request 20.00 GiB, limit 128.00 GiB); may take 20.00 GiB more now (vgpu node's ceiling 50.00 GiB); 10.00 GiB above its request, which vgpu node takes back (suspending or killing its processes) when an owner needs it"},
		{Device{MemoryUsed: 20 * G, MemoryRequest: 20 * G, MemoryLimit: 128 * G, MemoryCeiling: 20 * G},
			"holds 20.00 GiB (request 20.00 GiB, limit 128.00 GiB); may take nothing more now (vgpu node's ceiling 20.00 GiB); nothing above its request, so nothing is taken back from it"},
	} {
		if got := borrowLine(tc.d); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.d, got, tc.want)
		}
	}
}

// A process vgpu node holds suspended shows under its device: since when
// and how much host memory it holds; one of another container does not.
func TestStatusShowsSuspended(t *testing.T) {
	dir := t.TempDir()
	q := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared",
		Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: "GPU-1"}, Compute: 100, Memory: 12 << 30, MemoryRequest: 4 << 30}}}
	if _, err := state.Create(dir, state.FromQuota("b", &q), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, config.StateNode), 0o700); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-90 * time.Second)
	if err := events.WriteSuspended(dir, []events.Suspended{{Container: "b", PID: 4242, GPU: "GPU-1", Bytes: 6 << 30, Since: since},
		{Container: "other", PID: 4343, GPU: "GPU-1", Bytes: 1 << 30, Since: since}}); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	d := find(t, r, "b").Devices[0]
	if len(d.Suspended) != 1 || d.Suspended[0].PID != 4242 {
		t.Fatalf("suspended %+v, want pid 4242 only", d.Suspended)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if want := "suspended: device 0 pid 4242: suspended since " + since.Local().Format("15:04:05") + " (1m30s), 6.00 GiB held in host memory"; !strings.Contains(b.String(), want) {
		t.Errorf("text lacks %q:\n%s", want, b.String())
	}
}
