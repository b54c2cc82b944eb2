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
	if err := os.MkdirAll(filepath.Join(root, "freezer", cg), 0o755); err != nil {
		t.Fatal(err)
	}
	// as the kernel lays it out: the hierarchy's root cgroup has no freezer.state
	if err := os.WriteFile(filepath.Join(root, "freezer", cg, "freezer.state"), []byte(state+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func v2Root(t *testing.T, cg, v string) string {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, cg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, cg, "cgroup.freeze"), []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
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
	if err := f.Thaw("/system.slice/docker-c1.scope"); err != nil {
		t.Fatal(err)
	}
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

// A freeze asked for holds only once every task stopped: v1 FREEZING and v2
// "frozen 0" in cgroup.events do not hold.
func TestHolds(t *testing.T) {
	for _, tc := range []struct {
		name, root string
		events     string
		want       bool
	}{
		{"v1 FROZEN", v1Root(t, "/c", "FROZEN"), "", true},
		{"v1 FREEZING", v1Root(t, "/c", "FREEZING"), "", false},
		{"v1 THAWED", v1Root(t, "/c", "THAWED"), "", false},
		{"v2 frozen 1", v2Root(t, "/c", "1"), "populated 1\nfrozen 1\n", true},
		{"v2 frozen 0", v2Root(t, "/c", "1"), "populated 1\nfrozen 0\n", false},
	} {
		if tc.events != "" {
			if err := os.WriteFile(filepath.Join(tc.root, "c", "cgroup.events"), []byte(tc.events), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := New(tc.root).Holds("/c")
		if err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
	root := v2Root(t, "/c", "1")
	if err := os.WriteFile(filepath.Join(root, "c", "cgroup.events"), []byte("populated 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(root).Holds("/c"); err == nil {
		t.Error("cgroup.events without a frozen line: no error")
	}
}

// What a daemon froze is recorded before the freeze: one that dies with
// SIGKILL (no ThawAll) leaves the record, and the next one's Recover thaws
// the container and clears it.
func TestFrozenRecordedAndRecoveredAfterCrash(t *testing.T) {
	root := v2Root(t, "/k/c1", "0")
	rec := filepath.Join(t.TempDir(), "frozen.json")
	f := New(root)
	f.Record = rec
	if err := f.Freeze("/k/c1"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, rec); got != `["/k/c1"]` {
		t.Fatalf("record after freeze: %s", got)
	}
	// the daemon is gone without thawing; the next one starts
	g := New(root)
	g.Record = rec
	thawed, err := g.Recover()
	if err != nil || len(thawed) != 1 || thawed[0] != "/k/c1" {
		t.Fatalf("recover: %v %v", thawed, err)
	}
	if got := read(t, filepath.Join(root, "k/c1/cgroup.freeze")); got != "0" {
		t.Fatalf("after recover: cgroup.freeze %s", got)
	}
	if got := read(t, rec); got != `[]` {
		t.Fatalf("record after recover: %s", got)
	}
	// a thaw of ours clears it too
	if err := g.Freeze("/k/c1"); err != nil {
		t.Fatal(err)
	}
	if err := g.Thaw("/k/c1"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, rec); got != `[]` {
		t.Fatalf("record after thaw: %s", got)
	}
}

// A tenant's own frozen cgroups below its container's are thawed before a
// kill; the container's own cgroup (ours, or paused) is left as it is.
func TestThawBelow(t *testing.T) {
	root := v2Root(t, "/k/c1", "1")
	for _, d := range []string{"k/c1/a", "k/c1/a/b", "k/c1/c"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "k/c1/a/cgroup.freeze"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "k/c1/a/b/cgroup.freeze"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "k/c1/c/cgroup.freeze"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	thawed, err := New(root).ThawBelow("/k/c1")
	if err != nil || strings.Join(thawed, " ") != "/k/c1/a/b /k/c1/c" {
		t.Fatalf("thawed %v %v", thawed, err)
	}
	for p, want := range map[string]string{"k/c1": "1", "k/c1/a": "0", "k/c1/a/b": "0", "k/c1/c": "0"} {
		if got := read(t, filepath.Join(root, p, "cgroup.freeze")); got != want {
			t.Errorf("%s: cgroup.freeze %s, want %s", p, got, want)
		}
	}
}
