package inject

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// ContainerInfo is container.json.
type ContainerInfo struct {
	ID      string       `json:"id"`
	Name    string       `json:"name,omitempty"`
	Bundle  string       `json:"bundle,omitempty"`
	Created time.Time    `json:"created"`
	PIDs    []int        `json:"pids,omitempty"`    // host pids, when known
	PIDFile string       `json:"pidFile,omitempty"` // where the runtime writes the init pid (create --pid-file)
	Devices []PlanDevice `json:"devices"`
}

// maxPreload bounds how much of the image's /etc/ld.so.preload is read.
const maxPreload = 64 << 10

// ImagePreload returns the lines of <rootfs>/etc/ld.so.preload, resolved
// inside the rootfs (a symlink in the image cannot make us read a host file),
// without comments, blanks and our own libraries. A missing file gives nil.
func ImagePreload(rootfs string) ([]string, error) {
	if rootfs == "" {
		return nil, nil
	}
	p, err := securejoin.SecureJoin(rootfs, ContainerPreload)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image's %s: %w", ContainerPreload, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("image's %s is not a regular file", ContainerPreload)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPreload+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPreload {
		return nil, fmt.Errorf("image's %s is larger than %d bytes", ContainerPreload, maxPreload)
	}
	ours := map[string]bool{ContainerLibDir + "/" + LibCuda: true, ContainerLibDir + "/" + LibNvml: true}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxPreload+1)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// ld.so.preload separates names by white space or colons.
		for _, w := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ':' }) {
			if !ours[w] {
				out = append(out, w)
			}
		}
	}
	return out, sc.Err()
}

// PreloadContent is the container's /etc/ld.so.preload: the image's entries, then ours.
func PreloadContent(image []string) []byte {
	var b bytes.Buffer
	for _, l := range image {
		b.WriteString(l + "\n")
	}
	b.WriteString(ContainerLibDir + "/" + LibCuda + "\n")
	b.WriteString(ContainerLibDir + "/" + LibNvml + "\n")
	return b.Bytes()
}

// WriteState creates <state_dir>/<id>/ with quota, ld.so.preload, shared/
// and container.json, all at once: the files are written into a temp
// directory next to it, synced, and renamed into place (never replacing an
// existing directory). rootfs is read for the image's own ld.so.preload
// ("" = none). On error nothing is left behind.
func (p *Plan) WriteState(rootfs string) error {
	image, err := ImagePreload(rootfs)
	if err != nil {
		return err
	}
	info, err := json.MarshalIndent(ContainerInfo{ID: p.ContainerID, Name: p.Name, Bundle: p.Bundle, PIDFile: p.PIDFile, Created: time.Now().UTC(), Devices: p.Devices}, "", "  ")
	if err != nil {
		return err
	}
	parent := filepath.Dir(p.StateDir)
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return err
	}
	// Phases are chosen from the other containers' quota files and written
	// with ours under one lock, so that two containers created at once never
	// take the same slot.
	unlock, err := lockStateDir(parent)
	if err != nil {
		return err
	}
	defer unlock()
	assignPhases(parent, &p.Quota)
	quota, err := p.Quota.Marshal()
	if err != nil {
		return err
	}
	if _, err := os.Lstat(p.StateDir); err == nil {
		return fmt.Errorf("state directory %s already exists (container id in use?)", p.StateDir)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-"+p.ContainerID+"-")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{StateQuota, quota}, {StatePreload, PreloadContent(image)}, {StateContainer, append(info, '\n')}} {
		if err := writeSynced(filepath.Join(tmp, f.name), f.data, 0o644); err != nil {
			return err
		}
	}
	shared := filepath.Join(tmp, StateShared)
	if err := os.Mkdir(shared, 0o777); err != nil {
		return err
	}
	// Any user of the container writes the accounting region; sticky like /tmp.
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		return err
	}
	if err := syncPath(tmp); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, p.StateDir, unix.RENAME_NOREPLACE); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, p.StateDir, err)
	}
	ok = true
	return syncPath(parent)
}

// lockStateDir takes the state directory's lock file (flock, released when
// the process dies too).
func lockStateDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, stateLockName), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
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

// RemoveState removes <stateDir>/<id>; a missing directory is not an error.
func RemoveState(stateDir, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	dir := filepath.Join(stateDir, id)
	// Rename first so that a half-removed directory is never seen under the id.
	gone := filepath.Join(stateDir, fmt.Sprintf(".rm-%s-%d", id, time.Now().UnixNano()))
	if err := os.Rename(dir, gone); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.RemoveAll(gone)
}

// ReadState reads container.json and the quota file of one container.
func ReadState(stateDir, id string) (*ContainerInfo, *Quota, error) {
	if err := ValidID(id); err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(stateDir, id)
	data, err := os.ReadFile(filepath.Join(dir, StateContainer))
	if err != nil {
		return nil, nil, err
	}
	var info ContainerInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, StateContainer), err)
	}
	qd, err := os.ReadFile(filepath.Join(dir, StateQuota))
	if err != nil {
		return nil, nil, err
	}
	q, err := ParseQuota(qd)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, StateQuota), err)
	}
	return &info, q, nil
}

// SetPIDs records host pids in container.json (atomically).
func SetPIDs(stateDir, id string, pids []int) error {
	info, _, err := ReadState(stateDir, id)
	if err != nil {
		return err
	}
	info.PIDs = pids
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
	if err := os.Rename(name, filepath.Join(dir, StateContainer)); err != nil {
		os.Remove(name)
		return err
	}
	return syncPath(dir)
}

func removeDir(dir string) error {
	return RemoveState(filepath.Dir(dir), filepath.Base(dir))
}
