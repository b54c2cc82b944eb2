//go:build integration

package cudahook_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The spatial mode's decisions (which pipe directory and share a process
// must run with, what a tenant's own settings become, the execution affinity
// of its contexts) are pure: testdata/spatial_test.c checks them exactly
// against quota files as the host writes them.
func TestSpatialDecisions(t *testing.T) {
	bin := filepath.Join(buildDir(t), "cudahook", "spatial_test")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("spatial test not built (make c-build): %v", err)
	}
	out, err := exec.Command(bin).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
}
