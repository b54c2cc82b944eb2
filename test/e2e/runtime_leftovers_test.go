//go:build e2e

package e2e

import (
	"encoding/json"
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
	root := filepath.Join(e.dir, "runc")
	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/sh", "-c", "sleep 3600"},
		[]string{"VGPU_MEMORY_LIMIT=1073741824", "VGPU_VISIBLE_DEVICES=0"}, nil)
	if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "create", "--bundle", b, "nopid"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	t.Cleanup(func() { run(t, 10*time.Second, nil, "runc", "--root", root, "delete", "--force", "nopid") })
	if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "start", "nopid"); err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	var info struct {
		PIDs      []int  `json:"pids"`
		InitStart uint64 `json:"initStart"`
		Cgroup    string `json:"cgroup"`
	}
	data, _ := os.ReadFile(filepath.Join(e.stateDir, "nopid", "container.json"))
	if err := json.Unmarshal(data, &info); err != nil || len(info.PIDs) != 1 || info.InitStart == 0 || info.Cgroup == "" {
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
	root := filepath.Join(e.dir, "runc")
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
	t.Cleanup(func() { unix.Unmount(filepath.Join(left, "shared"), unix.MNT_DETACH) })
	other := filepath.Join(e.stateDir, ".tmp-killed-1-123") // another id's ("killed-1")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	// the runtime does not know the container: its delete fails, ours cleans
	run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "delete", "--force", "killed")
	if _, err := os.Lstat(left); !os.IsNotExist(err) {
		t.Errorf("%s after delete --force: %v, want it gone", left, err)
	}
	if _, err := os.Lstat(other); err != nil {
		t.Errorf("another id's leftover went too: %v", err)
	}
}
