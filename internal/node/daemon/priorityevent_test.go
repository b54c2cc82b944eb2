package daemon

import (
	"testing"

	"github.com/vgpu-dev/vgpu/internal/procmap"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Events take a device's priority from its record: the name when high or
// low, nothing for normal or a container the map does not hold.
func TestPriorityOf(t *testing.T) {
	rec := &tenant.Record{ID: "c1", Devices: []tenant.Device{
		{Index: 0, GPU: tenant.GPU{UUID: "GPU-a"}, Priority: tenant.High},
		{Index: 1, GPU: tenant.GPU{UUID: "GPU-b"}}}}
	m := &procmap.Map{Containers: []*procmap.Container{{ID: "c1", Record: rec}}}
	for _, tc := range []struct{ id, uuid, want string }{
		{"c1", "GPU-a", "high"}, {"c1", "GPU-b", ""}, {"c2", "GPU-a", ""},
	} {
		if got := priorityOf(m, tc.id, tc.uuid); got != tc.want {
			t.Errorf("%s on %s: %q, want %q", tc.id, tc.uuid, got, tc.want)
		}
	}
	if got := priorityOf(nil, "c1", "GPU-a"); got != "" {
		t.Errorf("no map: %q", got)
	}
}
