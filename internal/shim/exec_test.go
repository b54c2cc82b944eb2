package shim

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestFindRuntime(t *testing.T) {
	if _, err := FindRuntime([]string{"/nonexistent/runc", "no-such-runtime-xyz"}); err == nil {
		t.Error("found a missing runtime")
	}
	p, err := FindRuntime([]string{"no-such-runtime-xyz", "/bin/sh"})
	if err != nil || p != "/bin/sh" {
		t.Errorf("%q %v", p, err)
	}
}

// podman runs `delete --force` with no PATH at all: a bare runtime name is
// still found, in the system's directories, and not found when it is in
// none of them.
func TestFindRuntimeWithoutPATH(t *testing.T) {
	t.Setenv("PATH", "")
	p, err := FindRuntime([]string{"sh"})
	if err != nil || !filepath.IsAbs(p) {
		t.Errorf("sh without PATH: %q %v", p, err)
	}
	if _, err := FindRuntime([]string{"no-such-runtime-xyz"}); err == nil || !strings.Contains(err.Error(), "tried no-such-runtime-xyz on PATH /usr/local/sbin:") {
		t.Errorf("a missing runtime without PATH: %v", err)
	}
}
