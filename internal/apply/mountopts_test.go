package apply

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The spec's options (shim, CDI) and the hook's mount_setattr bits come
// from one definition and say the same for every kind of plan mount.
func TestMountFlagsOneDefinition(t *testing.T) {
	bit := map[string]uint64{"nosuid": unix.MOUNT_ATTR_NOSUID, "nodev": unix.MOUNT_ATTR_NODEV, "ro": unix.MOUNT_ATTR_RDONLY, "noexec": unix.MOUNT_ATTR_NOEXEC}
	for _, m := range []plan.Mount{
		{Source: "/s/quota", Destination: contract.QuotaPath, ReadOnly: true},
		{Source: "/s/shared", Destination: tenant.ContainerShared, Dir: true},
		{Source: "/d/libcuda.so.1", Destination: "/usr/lib/vgpu/driver/libcuda.so.1", ReadOnly: true},
		{Source: "/d/run/simgpu", Destination: "/run/simgpu", Dir: true},
	} {
		var fromOCI uint64
		for _, o := range m.Options() {
			fromOCI |= bit[o]
		}
		if got := setattrFlags(m.Flags()); got != fromOCI {
			t.Errorf("%s: mount_setattr %#x, OCI options %v = %#x", m.Destination, got, m.Options(), fromOCI)
		}
	}
	if f := setattrFlags(plan.Mount{Destination: tenant.ContainerShared, Dir: true}.Flags()); f&unix.MOUNT_ATTR_NOEXEC == 0 || f&unix.MOUNT_ATTR_NOSUID == 0 || f&unix.MOUNT_ATTR_NODEV == 0 {
		t.Errorf("the shared directory is not nosuid,nodev,noexec: %#x", f)
	}
}
