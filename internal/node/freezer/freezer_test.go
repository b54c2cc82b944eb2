package freezer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fake cgroupfs trees (files only; the kernel's own freezer is exercised by
// the end-to-end tests with runc on this host)
func v1Root(t *testing.T, cg, state string) string {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "freezer", cg), 0o755)
	// as the kernel lays it out: the hierarchy's root cgroup has no freezer.state
	os.WriteFile(filepath.Join(root, "freezer", cg, "freezer.state"), []byte(state+"\n"), 0o644)
	return root
}

func v2Root(t *testing.T, cg, v string) string {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, cg), 0o755)
	os.WriteFile(filepath.Join(root, cg, "cgroup.freeze"), []byte(v+"\n"), 0o644)
	return root
}

func read(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestV1FreezeThaw(t *testing.T) {
	root := v1Root(t, "/runc/c1", "THAWED")
	f := New(root)
	if err := f.Freeze("/runc/c1"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "freezer/runc/c1/freezer.state")); got != "FROZEN" || !f.Ours("/runc/c1") {
		t.Fatalf("after freeze: %s", got)
	}
	if err := f.Thaw("/runc/c1"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "freezer/runc/c1/freezer.state")); got != "THAWED" || f.Ours("/runc/c1") {
		t.Fatalf("after thaw: %s", got)
	}
}

func TestV2FreezeThaw(t *testing.T) {
	root := v2Root(t, "/system.slice/docker-c1.scope", "0")
	f := New(root)
	if err := f.Freeze("/system.slice/docker-c1.scope"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "system.slice/docker-c1.scope/cgroup.freeze")); got != "1" {
		t.Fatalf("after freeze: %s", got)
	}
	f.Thaw("/system.slice/docker-c1.scope")
	if got := read(t, filepath.Join(root, "system.slice/docker-c1.scope/cgroup.freeze")); got != "0" {
		t.Fatalf("after thaw: %s", got)
	}
}

func TestNeverThawsWhatItDidNotFreeze(t *testing.T) {
	for name, root := range map[string]string{"v1": v1Root(t, "/c", "FROZEN"), "v2": v2Root(t, "/c", "1")} {
		f := New(root)
		if err := f.Freeze("/c"); !errors.Is(err, ErrForeign) {
			t.Errorf("%s: freeze of a paused cgroup: %v", name, err)
		}
		if err := f.Thaw("/c"); !errors.Is(err, ErrForeign) {
			t.Errorf("%s: thaw of a paused cgroup: %v", name, err)
		}
		f.ThawAll()
		if frozen, _ := f.State("/c"); !frozen {
			t.Errorf("%s: someone else's pause was undone", name)
		}
	}
}

func TestBadCgroupPaths(t *testing.T) {
	f := New(t.TempDir())
	for _, cg := range []string{"", "/", "relative", "/a/../b", "/a//b"} {
		if err := f.Freeze(cg); err == nil {
			t.Errorf("freeze %q: no error", cg)
		}
	}
}
