//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// create + start without --pid-file (as a caller that tracks the init
// itself runs them): start still records the init and its cgroup, which
// vgpu node holds the container to whatever its processes rename.
func TestRuntimeCreateWithoutPidFileRecordsInit(t *testing.T) {
	f := shared(t)
	need(t, "runc")
	e := newEnv(t, "create-nopid")
	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/sh", "-c", "sleep 3600"},
		[]string{"VGPU_MEMORY_LIMIT=1073741824", "VGPU_VISIBLE_DEVICES=0"}, nil)
	rt := e.runc(t)
	rt.create(b, "nopid")
	rt.start("nopid")
	info, data, err := readRecord(t, e.stateDir, "nopid")
	if err != nil || len(info.PIDs) != 1 || info.InitStart == 0 || info.Cgroup == "" {
		t.Fatalf("container.json after create + start without --pid-file: %s (%v); want the init's pid, start time and cgroup", data, err)
	}
}

// A create killed between making its state directory and renaming it into
// place leaves .tmp-<id>-<n> (with the shared tmpfs mounted on it): the
// runtime's delete --force of that id removes it, mount and all.
func TestRuntimeDeleteForceRemovesInterruptedCreate(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	e := newEnv(t, "create-killed")
	left := filepath.Join(e.stateDir, ".tmp-killed-123456")
	if err := os.MkdirAll(filepath.Join(left, "shared"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "container.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("vgpu-shared", filepath.Join(left, "shared"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	// Clean-up: the runtime's delete unmounted it already when it works.
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(left, "shared"), unix.MNT_DETACH) })
	other := filepath.Join(e.stateDir, ".tmp-killed-1-123") // another id's ("killed-1")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	// the runtime does not know the container: its delete fails (its
	// error is not what this test asks), ours cleans
	_, _ = e.runc(t).cmd(30*time.Second, "delete", "--force", "killed")
	if _, err := os.Lstat(left); !os.IsNotExist(err) {
		t.Errorf("%s after delete --force: %v, want it gone", left, err)
	}
	if _, err := os.Lstat(other); err != nil {
		t.Errorf("another id's leftover went too: %v", err)
	}
}
