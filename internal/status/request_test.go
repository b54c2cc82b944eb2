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
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// vgpu status shows request, limit and grant: without vgpu node the tenant
// is held to its request and status says so; with a fresh arbitration the
// grant is the arbitration's.
func TestStatusShowsRequestAndGrant(t *testing.T) {
	dir := t.TempDir()
	r30 := 30
	q := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared",
		Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: "GPU-1"}, Compute: 100, ComputeRequest: &r30, MemoryRequest: 1 << 30}}}
	if _, err := state.Create(dir, state.FromQuota("req", &q), nil); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	d := find(t, r, "req").Devices[0]
	if d.ComputeRequest != 30 || d.ComputeLimit != 100 || d.MemoryRequest != 1<<30 || d.ComputeGrant == nil || *d.ComputeGrant != 30 || d.GrantSource != arbiter.FromAdmission {
		t.Fatalf("device %+v", d)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "30.0% (held to its request: no arbitration)") {
		t.Errorf("text:\n%s", b.String())
	}
	m, err := arbiter.Map(filepath.Join(dir, "req", config.StateHost, contract.ShareFile))
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

// A tenant created before any request on its GPU has no request and no
// limit: nothing paces it. Once another tenant there holds a request,
// vgpu status flags it and warns that the requests are not guaranteed
// beside it; on a GPU without requests it is not flagged.
func TestStatusWarnsUnpacedBesideRequests(t *testing.T) {
	dir := t.TempDir()
	base := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared"}
	old := base
	old.Devices = []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: "GPU-1"}, Compute: 100}, {Index: 1, GPU: tenant.GPU{UUID: "GPU-2"}, Compute: 100}}
	if _, err := state.Create(dir, state.FromQuota("old", &old), nil); err != nil {
		t.Fatal(err)
	}
	d := find(t, Collect(Options{StateDir: dir, ProcRoot: t.TempDir()}), "old").Devices
	if d[0].UnpacedBesideRequests || d[1].UnpacedBesideRequests {
		t.Fatalf("alone, flagged: %+v", d)
	}
	r30 := 30
	req := base
	req.Devices = []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: "GPU-1"}, Compute: 100, ComputeRequest: &r30}}
	if _, err := state.Create(dir, state.FromQuota("req", &req), nil); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	d = find(t, r, "old").Devices
	if !d[0].UnpacedBesideRequests || d[1].UnpacedBesideRequests || find(t, r, "req").Devices[0].UnpacedBesideRequests {
		t.Fatalf("beside a request: old %+v, req %+v", d, find(t, r, "req").Devices)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "UNPACED beside requests") || !strings.Contains(b.String(), "warning: device 0 (GPU-1) has no compute request or limit") ||
		strings.Contains(b.String(), "device 1 (GPU-2) has no compute") {
		t.Errorf("text:\n%s", b.String())
	}
}
