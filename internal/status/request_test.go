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

// vgpu status shows request, limit and grant: without vgpu node the tenant
// is held to its request and status says so; with a fresh arbitration the
// grant is the arbitration's.
func TestStatusShowsRequestAndGrant(t *testing.T) {
	dir := t.TempDir()
	r30 := 30
	q := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared",
		Devices: []quota.Device{{Index: 0, UUID: "GPU-1", Compute: 100, ComputeRequest: &r30, MemoryRequest: 1 << 30}}}
	if _, err := state.Create(dir, state.Entry{Info: state.Info{ID: "req"}, Quota: q}); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	d := find(t, r, "req").Devices[0]
	if d.ComputeRequest != 30 || d.ComputeLimit != 100 || d.MemoryRequest != 1<<30 || d.ComputeGrant == nil || *d.ComputeGrant != 30 || d.GrantSource != arbiter.FromAdmission {
		t.Fatalf("device %+v", d)
	}
	var b bytes.Buffer
	r.WriteText(&b)
	if !strings.Contains(b.String(), "30.0% (held to its request: no arbitration)") {
		t.Errorf("text:\n%s", b.String())
	}
	m, err := arbiter.Map(filepath.Join(dir, "req", config.StateHost, contract.GrantFile))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetLive(0, arbiter.Word(10000, 0))
	m.Stamp(monoNow(), 500)
	d = find(t, Collect(Options{StateDir: dir, ProcRoot: t.TempDir()}), "req").Devices[0]
	if d.ComputeGrant == nil || *d.ComputeGrant != 100 || d.GrantSource != arbiter.FromArbitration {
		t.Fatalf("with an arbitration: %+v", d)
	}
	m.Stamp(monoNow()-2e9, 500) // vgpu node stopped two seconds ago
	d = find(t, Collect(Options{StateDir: dir, ProcRoot: t.TempDir()}), "req").Devices[0]
	if *d.ComputeGrant != 30 || d.GrantSource != arbiter.FromAdmission {
		t.Fatalf("a stale arbitration: %+v", d)
	}
}
