package plan

import "github.com/vgpu-dev/vgpu/internal/tenant"

// The one definition of how a plan mount is attached, whichever path
// attaches it: the OCI options the shim writes into config.json and the CDI
// spec lists (OCIOptions), and the attributes the createContainer hook sets
// with mount_setattr (internal/apply translates the same MountFlags). Issue
// 19 case 6: the hook mounted /run/vgpu/shared without the noexec the shim
// gave it.
//
// Every mount is nosuid and nodev; a read-only one is ro; the container's
// read-write shared directory is noexec too: the tenant writes there, and
// nothing is run from there. (Driver IPC paths, also read-write, are the
// driver's own sockets and directories, left as they were.)

// MountFlags are the attributes of one mount beyond nosuid and nodev, which
// every mount has.
type MountFlags struct {
	ReadOnly bool
	NoExec   bool
}

// Flags returns m's attributes.
func (m Mount) Flags() MountFlags {
	return MountFlags{ReadOnly: m.ReadOnly, NoExec: m.Dir && !m.ReadOnly && m.Destination == tenant.ContainerShared}
}

// OCIOptions are the bind-mount options of a spec's mounts entry.
func (f MountFlags) OCIOptions() []string {
	opts := []string{"rbind", "nosuid", "nodev"}
	if f.ReadOnly {
		opts = append(opts, "ro")
	} else {
		opts = append(opts, "rw")
	}
	if f.NoExec {
		opts = append(opts, "noexec")
	}
	return append(opts, "rprivate")
}
