//go:build cgo && integration

package discover

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// vgpu-runtime (built without cgo) lists GPUs through vgpu-discover: the
// list must be the one the in-process NVML gives, and its failures must say
// what failed.
func TestHelperListsWhatNVMLLists(t *testing.T) {
	build := os.Getenv("VGPU_BUILD")
	if build == "" {
		t.Fatal("VGPU_BUILD is not set (make test sets it; run make build first)")
	}
	helper := filepath.Join(build, "bin", HelperName)
	nvml, _ := filepath.Abs(filepath.Join(build, "simgpu", "root", "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"))
	t.Setenv("SIMGPU_DIR", filepath.Join(build, "simgpu", "root", "run/simgpu"))
	want, err := ListGPUsNVML(nvml)
	if err != nil {
		t.Fatal(err)
	}
	got, err := HelperLister{Path: helper}.ListGPUs(nvml)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("helper listed %+v, NVML in process %+v", got, want)
	}

	// A library that is not NVML: the helper's message, without its prefix.
	_, err = HelperLister{Path: helper}.ListGPUs(filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))
	if err == nil || !strings.HasPrefix(err.Error(), "NVML init with ") {
		t.Errorf("bad library: %v", err)
	}
	// No helper: say which file is missing and what puts it there.
	missing := filepath.Join(t.TempDir(), HelperName)
	_, err = HelperLister{Path: missing}.ListGPUs(nvml)
	if err == nil || !strings.Contains(err.Error(), missing+" is missing") || !strings.Contains(err.Error(), "make install") {
		t.Errorf("missing helper: %v", err)
	}
}
