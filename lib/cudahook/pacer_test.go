//go:build integration

package cudahook_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The pacer decides from a clock value and measured spans passed in, so its
// behaviour (bucket, gate, slot, pooling, estimates, sampling, capture count)
// is checked exactly on an injected clock, whatever else the machine does:
// testdata/pacer_test.c, built by `make c-build` with src/pacer.c alone.
func TestPacer(t *testing.T) {
	bin := filepath.Join(buildDir(t), "cudahook", "pacer_test")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("pacer test not built (make c-build): %v", err)
	}
	out, err := exec.Command(bin).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
}
