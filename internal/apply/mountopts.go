package apply

import (
	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/plan"
)

// setattrFlags are a mount's plan.MountFlags as MOUNT_ATTR_* bits for
// mount_setattr: the hook path's form of the options the shim writes
// (plan.MountFlags.OCIOptions). TestMountFlagsOneDefinition checks that
// both say the same.
func setattrFlags(f plan.MountFlags) uint64 {
	a := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if f.ReadOnly {
		a |= unix.MOUNT_ATTR_RDONLY
	}
	if f.NoExec {
		a |= unix.MOUNT_ATTR_NOEXEC
	}
	return a
}
