package apply

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The container's writable share (<state_dir>/<id>/shared, /run/vgpu/shared
// inside) gets a size-capped tmpfs of its own, mounted on the host at
// create (by the shim: SpecEdit.Apply; by the hook: sharedfs_hook.go) and
// unmounted at delete or poststop (state.Remove): a tenant writing or
// ftruncate-ing files there fills that tmpfs, never the host filesystem
// under state_dir (by default /run, shared with systemd, containerd and
// docker). The mount is in the host's mount namespace, so `vgpu status` and
// `vgpu node` read the region at the same path as before.
//
// SharedFSSize holds the accounting region (4096 + 1024*256 bytes, layout 2)
// with room to grow; SharedFSInodes the region, its lock file and a few
// more. The options are those of every other path (plan.Mount.Flags):
// nosuid, nodev, noexec.
const (
	SharedFSSize   = 4 << 20
	SharedFSInodes = 64
)

// sharedFSData is the tmpfs mount data.
func sharedFSData() string {
	return fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777", SharedFSSize, SharedFSInodes)
}

// mountSharedFS mounts the capped tmpfs on <stateDir>/shared.
func mountSharedFS(stateDir string) error {
	target := filepath.Join(stateDir, config.StateShared)
	f := plan.Mount{Destination: tenant.ContainerShared, Dir: true}.Flags()
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if f.ReadOnly {
		flags |= unix.MS_RDONLY
	}
	if f.NoExec {
		flags |= unix.MS_NOEXEC
	}
	if err := unix.Mount("vgpu-shared", target, "tmpfs", flags, sharedFSData()); err != nil {
		return fmt.Errorf("mount a %d-byte tmpfs on %s: %w", SharedFSSize, target, err)
	}
	return nil
}

// MountSharedFS mounts the capped tmpfs on the state directory's shared/:
// for a caller that hands the plan to the engine some other way (the DRA
// driver's per-claim CDI spec) and so has no SpecEdit or RootfsEdit.
func MountSharedFS(stateDir string) error { return mountSharedFS(stateDir) }
