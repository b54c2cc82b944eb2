package version

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
)

func TestLineUnset(t *testing.T) {
	// A plain go build (go test) sets neither: both say so.
	got := Line("vgpu")
	if want := "vgpu unknown (commit unknown, " + runtime.Version() + ")"; got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
}

func TestDriver(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Driver.Root = root
	if got := Driver(cfg, nil); !strings.HasPrefix(got, "driver: none found (no libcuda.so.<version> under driver root "+root) {
		t.Errorf("no driver: %q", got)
	}
	for _, f := range []string{"libcuda.so.590.1.2", "libnvidia-ml.so.590.1.2"} {
		if err := os.WriteFile(filepath.Join(lib, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := Driver(cfg, nil), "driver: 590.1.2 (libcuda.so.590.1.2 under driver root "+root+")"; got != want {
		t.Errorf("Driver = %q, want %q", got, want)
	}
}

func TestRuntime(t *testing.T) {
	rt, err := exec.LookPath("runc") // installed on every test machine (.ci/run)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Runtime(rt, nil), "runtime: "+rt+": runc version "; !strings.HasPrefix(got, want) {
		t.Errorf("Runtime = %q, want %q…", got, want)
	}
	if got := Runtime("", errors.New("no low-level runtime found (tried runc)")); got != "runtime: none (no low-level runtime found (tried runc))" {
		t.Errorf("no runtime: %q", got)
	}
}
