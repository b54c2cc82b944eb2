package daemon

import (
	"github.com/vgpu-dev/vgpu/internal/procmap"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// priorityOf is the priority of container id's device on GPU uuid as an
// event names it: "" for normal, or when the record is not in m.
func priorityOf(m *procmap.Map, id, uuid string) string {
	if m == nil {
		return ""
	}
	for _, c := range m.Containers {
		if c.ID != id || c.Record == nil {
			continue
		}
		for _, d := range c.Record.Devices {
			if d.GPU.UUID == uuid && d.Priority != tenant.Normal {
				return d.Priority.String()
			}
		}
	}
	return ""
}
