//go:build cgo

package inject

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// TestDiscoverSimulator runs the real NVML discovery against the simulated
// driver root ($VGPU_BUILD/simgpu/root, as `make` builds it). Skipped until
// the simulator is built. (Switch to simroot.Create once test/simgpu/simroot exists.)
func TestDiscoverSimulator(t *testing.T) {
	build := os.Getenv("VGPU_BUILD")
	if build == "" {
		build = "../../build"
	}
	root, _ := filepath.Abs(filepath.Join(build, "simgpu", "root"))
	if _, err := os.Stat(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")); err != nil {
		t.Skipf("no simulated driver root at %s (run make c-build)", root)
	}
	cfg := config.Default()
	cfg.Driver.Root, cfg.Driver.DevRoot = root, root
	cfg.Driver.IPCPaths = []string{"run/simgpu"}
	cfg.StateDir = t.TempDir()
	t.Setenv("SIMGPU_DIR", filepath.Join(root, "run/simgpu"))
	h, err := Discover(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.GPUs) == 0 || !strings.HasPrefix(h.GPUs[0].UUID, "GPU-") || h.GPUs[0].MemoryBytes == 0 {
		t.Fatalf("%+v", h.GPUs)
	}
	req, err := spec.ParseRequest([]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=1Gi"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(req, cfg, h, "sim")
	if err != nil {
		t.Fatal(err)
	}
	if p.Quota.Devices[0].UUID != h.GPUs[0].UUID || p.Quota.DriverCuda != ContainerDriverDir+"/libcuda.so."+h.DriverVersion {
		t.Errorf("%+v", p.Quota)
	}
}
