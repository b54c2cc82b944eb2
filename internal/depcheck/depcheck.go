// Package depcheck keeps heavy packages out of a binary whose start time
// matters: a test of the binary's main package names what it must not link.
package depcheck

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Forbid fails t for every package the main package in the current
// directory links (go list -deps, with cgo as the Makefile builds it) whose
// path starts with one of heavy; why says where such a package belongs.
func Forbid(t testing.TB, cgo bool, why string, heavy ...string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", ".")
	cgoEnv := "CGO_ENABLED=0"
	if cgo {
		cgoEnv = "CGO_ENABLED=1"
	}
	cmd.Env = append(os.Environ(), cgoEnv)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, h := range heavy {
			if strings.HasPrefix(dep, h) {
				t.Errorf("links %s (%s…): %s", dep, h, why)
			}
		}
	}
}
