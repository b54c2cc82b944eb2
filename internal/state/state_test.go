package state

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

func testQuota() *quota.File {
	return &quota.File{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s", Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: "GPU-0"}, Memory: 1 << 30, Compute: 100}}}
}

// A container's state directory is root's alone on the host: its shared/
// (the accounting region, world-writable for the container's users) and
// its lock file are reached by the container through its bind mounts
// only, never by a local user through <state_dir>/<id>.
func TestContainerStateIsRootOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := Create(dir, FromQuota("c1", testQuota()), nil); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("%s is %v, want no access for group or others", filepath.Join(dir, "c1"), perm)
	}
}

// What a create killed between its temp directory and the rename left
// behind (.tmp-<id>-<digits>) is removed by the next create or delete of
// that id; another id's leftovers are not touched.
func TestInterruptedCreateLeftoversCleaned(t *testing.T) {
	dir := t.TempDir()
	left := []string{".tmp-c1-123456", ".tmp-c1-9"}
	for _, l := range left {
		if err := os.MkdirAll(filepath.Join(dir, l, config.StateShared), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, l, config.StateQuota), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".tmp-c1-9-123"), 0o700); err != nil { // of container "c1-9"
		t.Fatal(err)
	}
	if _, err := Create(dir, FromQuota("c1", testQuota()), nil); err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		if _, err := os.Lstat(filepath.Join(dir, l)); !os.IsNotExist(err) {
			t.Errorf("%s left after the next create: %v", l, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, ".tmp-c1-9-123")); err != nil {
		t.Errorf("another container's temp directory removed: %v", err)
	}
	// a leftover of an id that is never created again: its delete removes it
	if err := os.Mkdir(filepath.Join(dir, ".tmp-c2-77"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Remove(dir, "c2"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".tmp-c2-77")); !os.IsNotExist(err) {
		t.Errorf(".tmp-c2-77 left after delete: %v", err)
	}
}

// A writer that reached into a record before Remove renamed it (vgpu
// node's pid map) can add a file while the renamed directory is being
// removed, so that one pass fails: Remove tries again and leaves nothing.
// One that keeps failing is Remove's error, not dropped.
func TestRemoveOutlastsALateWriter(t *testing.T) {
	dir := t.TempDir()
	if _, err := Create(dir, FromQuota("c1", testQuota()), nil); err != nil {
		t.Fatal(err)
	}
	tries := 0
	removeAll = func(path string) error {
		tries++
		if tries == 1 {
			// the late writer's file, and the pass that missed it
			if err := os.WriteFile(filepath.Join(path, config.StateHost, ".pids-late"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return &os.PathError{Op: "unlinkat", Path: path, Err: syscall.ENOTEMPTY}
		}
		return os.RemoveAll(path)
	}
	t.Cleanup(func() { removeAll = os.RemoveAll })
	if err := Remove(dir, "c1"); err != nil {
		t.Fatalf("Remove beside a late writer: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != config.StateLock {
			t.Errorf("left in the state directory after Remove: %s", e.Name())
		}
	}

	if _, err := Create(dir, FromQuota("c2", testQuota()), nil); err != nil {
		t.Fatal(err)
	}
	removeAll = func(path string) error { return &os.PathError{Op: "unlinkat", Path: path, Err: syscall.EBUSY} }
	if err := Remove(dir, "c2"); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("Remove whose removal keeps failing = %v, want EBUSY", err)
	}
}
