//go:build cgo && integration

package discover

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
)

// TestDiscoverSimulator runs the real NVML discovery against the simulated
// driver root ($VGPU_BUILD/simgpu/root, as `make` builds it).
func TestDiscoverSimulator(t *testing.T) {
	build := os.Getenv("VGPU_BUILD")
	if build == "" {
		build = "../../build"
	}
	root, _ := filepath.Abs(filepath.Join(build, "simgpu", "root"))
	if _, err := os.Stat(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")); err != nil {
		t.Fatalf("no simulated driver root at %s (run make c-build)", root)
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
	if lib := h.Library("libcuda"); lib == nil || lib.Name != "libcuda.so."+h.DriverVersion {
		t.Errorf("libcuda %+v", lib)
	}
}
