package status

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/state/statetest"
)

// `vgpu status` lists a container that the previous release (0.1.0) started,
// from the state directory, quota file and shared region it wrote.
func TestStatusOfPreviousRelease(t *testing.T) {
	dir := statetest.PreviousRelease(t, "../state/testdata/release-0.1.0")
	if err := os.WriteFile(filepath.Join(dir, "old-release", config.StateShared, contract.RegionLockFile), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	c := find(t, r, "old-release")
	if len(c.Errors) != 0 {
		t.Errorf("errors: %v", c.Errors)
	}
	if c.Name != "web" || c.RegionVersion != 2 || c.DeadSlots != 1 || len(c.Devices) != 2 {
		t.Errorf("container %+v", c)
	}
	d0, d1 := c.Devices[0], c.Devices[1]
	if d0.MemoryLimit != 1<<30 || d0.ComputeLimit != 30 || d0.ComputePhase == nil || *d0.ComputePhase != 0 || d1.MemoryLimit != 0 || d1.ComputeLimit != 100 {
		t.Errorf("devices %+v %+v", d0, d1)
	}
}

// `vgpu status` lists a container of the release before compute requests
// (region layout 3, quota format 1, no grant file): its request is its limit,
// no grant shown.
func TestStatusOfReleaseBeforeRequests(t *testing.T) {
	dir := statetest.PreviousRelease(t, "../state/testdata/release-7429073")
	if err := os.WriteFile(filepath.Join(dir, "prev-release", config.StateShared, contract.RegionLockFile), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	c := find(t, r, "prev-release")
	if len(c.Errors) != 0 {
		t.Errorf("errors: %v", c.Errors)
	}
	if c.Name != "web" || c.RegionVersion != 3 || c.DeadSlots != 1 || len(c.Devices) != 2 {
		t.Errorf("container %+v", c)
	}
	d0 := c.Devices[0]
	if d0.ComputeLimit != 30 || d0.ComputeRequest != 30 || d0.ComputeGrant != nil || d0.BusyNs == nil || d0.MemoryLimit != 1<<30 {
		t.Errorf("device %+v", d0)
	}
}
