// Package mpsdir is where a spatial GPU's MPS control daemon lives on the
// host (config.MPSDir: <state_dir>/.mps/<uuid>/, docs/spatial.md): its pipe,
// log and shm directories and its pid file. vgpu node makes them and runs
// the daemon there (internal/node/mps); vgpu-runtime gives a spatial
// container the pipe and shm directories and refuses to start one whose
// GPU's daemon is not running.
package mpsdir

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/config"
)

// PIDFile is what the control daemon writes in its pipe directory (NVIDIA's
// MPS documentation): its pid.
const PIDFile = "nvidia-cuda-mps-control.pid"

// Dirs are one GPU's directories (config.MPSDir).
type Dirs struct{ Root, Pipe, Log, Shm string }

// Of returns the directories of GPU uuid.
func Of(cfg *config.Config, uuid string) Dirs {
	r := cfg.MPSDir(uuid)
	return Dirs{Root: r, Pipe: filepath.Join(r, config.MPSPipe), Log: filepath.Join(r, config.MPSLog), Shm: filepath.Join(r, config.MPSShm)}
}

// Prepare makes the directories: the root and log/ root only (0700), pipe/
// 0755 (the containers reach it through their read-only bind mount, never
// through the root), shm/ 1777 like /dev/shm. Modes are set on existing
// directories too.
func (d Dirs) Prepare() error {
	for _, x := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(d.Root), 0o700}, {d.Root, 0o700}, {d.Pipe, 0o755}, {d.Log, 0o700}, {d.Shm, 0o777 | os.ModeSticky}} {
		if err := os.MkdirAll(x.path, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(x.path, x.mode); err != nil {
			return err
		}
	}
	return nil
}

// Live says whether the pipe directory's control daemon runs: its pid file
// names a live process.
func (d Dirs) Live() (int, bool) {
	b, err := os.ReadFile(filepath.Join(d.Pipe, PIDFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, unix.Kill(pid, 0) == nil || errors.Is(unix.Kill(pid, 0), unix.EPERM)
}
