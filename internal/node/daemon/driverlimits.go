package daemon

import (
	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/procmap"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// readDriverLimits reads, once per container, the limits the driver itself
// holds on its cgroup (nvmlDeviceGetMemoryLimits_v1, where vgpu set them at
// create: container.json's driverLimits), logs them and exports them as
// vgpu_driver_memory_limit_bytes. vgpu node keeps enforcing such a
// container's limit too: the driver's holds at allocation, the node's is the
// same limit read from the quota file.
func (d *Daemon) readDriverLimits(m *procmap.Map) {
	if d.o.NVMLPath == "" {
		return
	}
	live := map[string]bool{}
	for _, c := range m.Containers {
		live[c.ID] = true
		if d.driverSeen[c.ID] {
			continue
		}
		d.driverSeen[c.ID] = true
		info, err := state.Read(d.o.StateDir, c.ID)
		if err != nil || info.DriverLimits == nil || !info.DriverLimits.Set {
			continue
		}
		var uuids []string
		for _, l := range driverlimit.Limits(info) {
			uuids = append(uuids, l.UUID)
		}
		got, err := driverlimit.Get(d.o.NVMLPath, info.DriverLimits.Cgroup, uuids)
		if err != nil {
			d.logf("vgpu node: container %s: reading the driver's memory limits: %v", c.ID, err)
			continue
		}
		for _, g := range got {
			switch {
			case g.Err != "":
				d.logf("vgpu node: container %s GPU %s: the driver's memory limits on %s: %s", c.ID, g.UUID, info.DriverLimits.Cgroup, g.Err)
			case !g.Set:
				d.logf("vgpu node: container %s GPU %s: the driver holds no memory limit on %s (vgpu set one at create)", c.ID, g.UUID, info.DriverLimits.Cgroup)
			default:
				d.logf("vgpu node: container %s GPU %s: the driver holds its memory limit on %s: hard %s, soft %s, %s used", c.ID, g.UUID,
					info.DriverLimits.Cgroup, bytesText(g.Hard), bytesText(g.Soft), bytesText(g.CurrentUsed))
				d.m.driverLimit.WithLabelValues(c.ID, g.UUID).Set(float64(g.Hard))
			}
		}
	}
	for id := range d.driverSeen {
		if !live[id] {
			delete(d.driverSeen, id)
			d.m.driverLimit.DeletePartialMatch(map[string]string{"container": id})
		}
	}
}
