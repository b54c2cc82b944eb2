// Package setup registers vgpu with a container engine on this host
// (`vgpu setup docker|containerd|podman`).
//
// Every engine goes the same way: read the engine's configuration, compute the
// new text with a pure function (Docker, Containerd, PodmanHooks), and hand
// back a Change per file. The CLI prints a Change as a unified diff
// (--dry-run, go-udiff) or applies it atomically (atomicfile), keeping mode
// and owner, with the previous content saved next to it as <file>.vgpu.bak.
// What vgpu does not change stays as the user wrote it:
//
//   - docker: /etc/docker/daemon.json gets runtimes.vgpu = {"path": …}
//     (and default-runtime with --default), edited as a syntax tree
//     (tailscale/hujson) so that the rest is kept byte for byte. A file
//     that is not JSON is reported with its line.
//   - containerd: the runtime class vgpu (runtime_type io.containerd.runc.v2,
//     options.BinaryName = vgpu-runtime) in a drop-in, conf.d/99-vgpu.toml,
//     and one imports entry in config.toml, as the NVIDIA container toolkit
//     does. containerd 1.x (config version 2) takes an imported plugin
//     section whole, so there the drop-in carries config.toml's whole CRI
//     section. Missing file: it starts from `containerd config default`.
//   - podman: hooks.d files (createContainer, poststop) for vgpu-hook.
//
// Applying twice changes nothing the second time. Remove undoes Add, byte for
// byte when vgpu's edit was the only change.
package setup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vgpu-dev/vgpu/internal/atomicfile"
)

// RuntimeName is the name under which vgpu-runtime is registered.
const RuntimeName = "vgpu"

// BackupSuffix is appended to a file's name for the copy of its previous content.
const BackupSuffix = ".vgpu.bak"

// Change is the new content of one file.
type Change struct {
	Path   string
	Before []byte // nil: the file does not exist
	After  []byte // nil: the file is to be removed
	Mode   os.FileMode
}

// Changed reports whether applying c would change anything.
func (c Change) Changed() bool {
	if (c.Before == nil) != (c.After == nil) {
		return true
	}
	return !bytes.Equal(c.Before, c.After)
}

// Diff is c as a unified diff ("" when nothing changes).
func (c Change) Diff() string {
	if !c.Changed() {
		return ""
	}
	from, to := c.Path, c.Path
	if c.Before == nil {
		from = "/dev/null"
	}
	if c.After == nil {
		to = "/dev/null"
	}
	return UnifiedDiff(from, to, c.Before, c.After, 3)
}

// Apply writes c. When the file existed and changes, its previous content is
// first saved as Path+BackupSuffix (returned; "" when none was written).
func (c Change) Apply() (backup string, err error) {
	if !c.Changed() {
		return "", nil
	}
	if c.Before != nil {
		backup = c.Path + BackupSuffix
		if err := atomicfile.Write(backup, c.Before, 0o600); err != nil {
			return "", fmt.Errorf("backup of %s: %w", c.Path, err)
		}
	}
	if c.After == nil {
		if err := os.Remove(c.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return backup, err
		}
		return backup, nil
	}
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o755); err != nil {
		return backup, err
	}
	mode := c.Mode
	if mode == 0 {
		mode = 0o644
	}
	return backup, atomicfile.Replace(c.Path, c.After, mode)
}

// readOptional reads path; a missing file gives nil, nil.
func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}
