package status

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// A memory request below its limit: without vgpu node status says the
// tenant is held to its request; with a fresh ceiling it shows what the
// tenant may hold now.
func TestStatusShowsMemoryCeiling(t *testing.T) {
	dir := t.TempDir()
	q := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared",
		Devices: []quota.Device{{Index: 0, UUID: "GPU-1", Compute: 100, Memory: 12 << 30, MemoryRequest: 4 << 30}}}
	if _, err := state.Create(dir, state.FromQuota("b", &q), nil); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	d := find(t, r, "b").Devices[0]
	if !d.MemoryHeldToRequest || d.MemoryCeiling != 4<<30 {
		t.Fatalf("without vgpu node: %+v", d)
	}
	var b bytes.Buffer
	r.WriteText(&b)
	if !strings.Contains(b.String(), "memory: device 0 requests 4.00 GiB of its 12.00 GiB limit and is held to its request (no vgpu node)") {
		t.Errorf("text:\n%s", b.String())
	}
	m, err := arbiter.Map(filepath.Join(dir, "b", config.StateHost, contract.GrantFile))
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
	r.WriteText(&b)
	if !strings.Contains(b.String(), "may hold 7.00 GiB now (vgpu node's ceiling)") {
		t.Errorf("text:\n%s", b.String())
	}
}
