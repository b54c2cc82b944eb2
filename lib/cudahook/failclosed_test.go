//go:build integration

package cudahook_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A quota the library cannot read (a directory in its place, a file that is
// not there) refuses the GPU with one clear line, as a corrupt one does: the
// library never runs unlimited for want of its limits.
func TestFailClosedOnUnreadableQuota(t *testing.T) {
	dir := clients(t)
	e := newEnv(t, []uint64{GiB})
	asDir := filepath.Join(t.TempDir(), "quota-dir")
	if err := os.Mkdir(asDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{asDir, filepath.Join(t.TempDir(), "missing")} {
		vars := append(append([]string(nil), e.vars...), "VGPU_QUOTA_FILE="+path)
		saved := e.vars
		e.vars = vars
		r := e.run(filepath.Join(dir, "client-link"), "closed")
		e.vars = saved
		for _, k := range []string{"init", "count", "alloc", "meminfo", "sync"} {
			if r.kv[k] != "3" {
				t.Errorf("quota %s: %s returned %s, want CUDA_ERROR_NOT_INITIALIZED (3)", path, k, r.kv[k])
			}
		}
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "vgpu: cannot read quota file "+path) || !strings.Contains(lines[0], "refusing GPU access") {
			t.Errorf("quota %s: stderr %q, want one line saying the quota cannot be read and the GPU is refused", path, r.stderr)
		}
	}
}
