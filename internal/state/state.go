// Package state is the host's store of running containers: one directory per
// container under state_dir (config.StateDir), created whole or not at all,
// and the lock that serializes creations with slot assignment
// (docs/design.md "State directory").
//
// The directory of container <id> holds config.StateInfo (container.json,
// Info: the container record), config.StateQuota (the quota file, rendered
// from the record for the library), config.StatePreload,
// config.StateShared/ (the library's shared region) and config.StateHost/
// (the grant file). Every reader takes the record from Read or List. It
// carries a format version; a container written by an older release stays
// readable (TestReadPreviousRelease).
//
// Create makes shared/ a plain directory; the shim or the hook then mounts a
// capped tmpfs on it (internal/apply), and Remove unmounts it first.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// ValidID checks that a container id is usable as the name of its
// directory (config.ValidID).
func ValidID(id string) error { return config.ValidID(id) }

// Create makes <stateDir>/<id>/ with container.json (the record), the
// quota file rendered from it, ld.so.preload (preload), shared/ and host/,
// all at once: in a transaction of the store (Transaction) it admits the
// record beside the live tenants (Admit, which also assigns the slots of
// its paced devices that have no phase), then writes the files into a temp
// directory next to it, syncs them and renames it into place (never
// replacing an existing directory), and last rewrites the admission words
// Admit narrowed in the others' share files. On error nothing is left
// behind. It returns the record as written.
func Create(stateDir string, info tenant.Record, preload []byte) (*tenant.Record, error) {
	if err := ValidID(info.ID); err != nil {
		return nil, err
	}
	info.Version = InfoVersion
	if info.Created.IsZero() {
		info.Created = time.Now().UTC()
	}
	info.Devices = append([]tenant.Device{}, info.Devices...)
	if err := os.MkdirAll(stateDir, 0o711); err != nil {
		return nil, err
	}
	err := Transaction(stateDir, func(tx *Tx) error {
		adm, err := Admit(tx.View, &info)
		if err != nil {
			return err
		}
		if err := write(stateDir, &info, adm.Static, preload); err != nil {
			return err
		}
		for _, n := range adm.Narrow {
			n.write(stateDir)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &info, syncPath(stateDir)
}

// priorityWords are the share file's priority words of info's devices, by
// device index.
func priorityWords(info *tenant.Record) []uint64 {
	w := make([]uint64, len(info.Devices))
	for _, d := range info.Devices {
		if d.Index >= 0 && d.Index < len(w) {
			w[d.Index] = d.Priority.ShareWord()
		}
	}
	return w
}

// write writes the directory of record info (its lock held).
func write(stateDir string, info *tenant.Record, static []uint64, preload []byte) error {
	id := info.ID
	grant, err := arbiter.EncodeOrder(static, priorityWords(info))
	if err != nil {
		return err
	}
	qdata, err := quota.Render(info).Marshal()
	if err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	idata, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(stateDir, id)
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("state directory %s already exists (container id in use?)", dir)
	}
	cleanLeftovers(stateDir, id)
	tmp, err := os.MkdirTemp(stateDir, ".tmp-"+id+"-")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	// Root only on the host: the container reaches its files through its
	// bind mounts, which do not pass this directory; a local user who could
	// would hang the container's new GPU processes on the lock file or
	// forge a slot in shared/.
	if err := os.Chmod(tmp, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{config.StateQuota, qdata}, {config.StatePreload, preload}, {config.StateInfo, append(idata, '\n')}} {
		if err := writeSynced(filepath.Join(tmp, f.name), f.data, 0o644); err != nil {
			return err
		}
	}
	shared := filepath.Join(tmp, config.StateShared)
	if err := os.Mkdir(shared, 0o777); err != nil {
		return err
	}
	// Any user of the container writes the accounting region; sticky like /tmp.
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		return err
	}
	// The host's files for the library (the pid map, internal/hostpids): a
	// directory, mounted read-only, so that the host's renames are seen.
	if err := os.Mkdir(filepath.Join(tmp, config.StateHost), 0o755); err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(tmp, config.StateHost, contract.ShareFile), grant, 0o644); err != nil {
		return err
	}
	if err := syncPath(tmp); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, dir, err)
	}
	ok = true
	return nil
}

// Lock takes the state directory's lock file, config.StateLock (flock, released when
// the process dies too).
func Lock(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, config.StateLock), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("state lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

func writeSynced(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Remove removes <stateDir>/<id>; a missing directory is not an error.
func Remove(stateDir, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	dir := filepath.Join(stateDir, id)
	if err := unmountShared(dir); err != nil { // the capped tmpfs (apply/sharedfs.go)
		return fmt.Errorf("unmount %s: %w", filepath.Join(dir, config.StateShared), err)
	}
	// Rename first so that a half-removed directory is never seen under the id.
	gone := filepath.Join(stateDir, fmt.Sprintf(".rm-%s-%d", id, time.Now().UnixNano()))
	if err := os.Rename(dir, gone); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			cleanLeftovers(stateDir, id)
			return nil
		}
		return err
	}
	cleanLeftovers(stateDir, id)
	return removeRenamed(gone)
}

// removeAll is os.RemoveAll, replaced in tests.
var removeAll = os.RemoveAll

// removeRenamed removes dir, a record Remove renamed out of the way. A
// writer that resolved a path inside it before the rename (vgpu node's
// pid map, a record update) can still add a file while RemoveAll runs,
// which then fails (ENOTEMPTY); no path reaches it after the rename, so
// another try removes what such a writer left.
func removeRenamed(dir string) error {
	var err error
	for range 3 {
		if err = removeAll(dir); err == nil {
			return nil
		}
	}
	return err
}

// cleanLeftovers removes what an interrupted Create of id left behind (a
// .tmp-<id>-* directory: the creator was killed between MkdirTemp and the
// rename). Create holds the state directory's lock, so none of them is
// being written now; a Remove of id runs once its container is gone.
func cleanLeftovers(stateDir, id string) {
	for _, dir := range leftovers(stateDir, id) {
		_ = unmountShared(dir) // the capped tmpfs, if the create got that far
		_ = os.RemoveAll(dir)
	}
}

// HasLeftovers says whether an interrupted Create of id left a directory
// behind (Remove removes it).
func HasLeftovers(stateDir, id string) bool {
	return ValidID(id) == nil && len(leftovers(stateDir, id)) > 0
}

func leftovers(stateDir, id string) []string {
	ents, _ := os.ReadDir(stateDir)
	prefix := ".tmp-" + id + "-"
	var out []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		// MkdirTemp's suffix is digits only: ".tmp-a-1" is not a leftover of "a-1"
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		out = append(out, filepath.Join(stateDir, e.Name()))
	}
	return out
}

// SetPIDs records host pids in container.json (atomically).
func SetPIDs(stateDir, id string, pids []int) error {
	return update(stateDir, id, func(info *tenant.Record) { info.PIDs = pids })
}

// SetInit records the container's init (host pid and start time) and its
// cgroup in container.json (atomically). A cgroup recorded already is kept:
// it was read before the container's own code ran, and a later look could
// see the init moved into a cgroup the tenant made below it.
func SetInit(stateDir, id string, pid int, start uint64, cgroup string) error {
	return update(stateDir, id, func(info *tenant.Record) {
		info.PIDs, info.InitStart = []int{pid}, start
		if info.Cgroup == "" {
			info.Cgroup = cgroup
		}
	})
}

// SetDriverLimits records what holds the container's memory limits.
func SetDriverLimits(stateDir, id string, d *tenant.DriverLimits) error {
	return update(stateDir, id, func(info *tenant.Record) { info.DriverLimits = d })
}

// update edits container.json as it is on disk: a record of an older
// version keeps its version and members.
func update(stateDir, id string, edit func(*tenant.Record)) error {
	if err := ValidID(id); err != nil {
		return err
	}
	info, err := readInfo(filepath.Join(stateDir, id))
	if err != nil {
		return err
	}
	edit(info)
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(stateDir, id)
	tmp, err := os.CreateTemp(dir, ".container.json-")
	if err != nil {
		return err
	}
	name := tmp.Name()
	tmp.Close()
	os.Remove(name)
	if err := writeSynced(name, append(data, '\n'), 0o644); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Rename(name, filepath.Join(dir, config.StateInfo)); err != nil {
		os.Remove(name)
		return err
	}
	return syncPath(dir)
}

// unmountShared takes the capped tmpfs the shim or the hook mounted
// (internal/apply) off <dir>/shared, if one is there.
func unmountShared(dir string) error {
	shared := filepath.Join(dir, config.StateShared)
	var d, sh unix.Stat_t
	if unix.Lstat(dir, &d) != nil || unix.Lstat(shared, &sh) != nil || d.Dev == sh.Dev {
		return nil // no mount point there: nothing to ask the kernel (which refuses a non-root caller)
	}
	err := unix.Unmount(shared, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // not a mount point (vgpu exec, a state of an older release, or never mounted)
	}
	return err
}
