package plan

import (
	"fmt"

	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// nodes are the device nodes the container gets, of those discovery found
// on the host: the control nodes, then one per device's GPU, in device
// order (CommonNodes and GPUNodes split them there).
func nodes(found []discover.DeviceNode, devs []tenant.Device) ([]discover.DeviceNode, error) {
	byPath := map[string]discover.DeviceNode{}
	for _, nd := range found {
		byPath[nd.Path] = nd
	}
	var out []discover.DeviceNode
	for _, c := range discover.ControlNodes {
		if nd, ok := byPath["/dev/"+c.Name]; ok {
			out = append(out, nd)
		} else if c.Required {
			return nil, fmt.Errorf("host has no /dev/%s", c.Name)
		}
	}
	for _, d := range devs {
		g := d.GPU
		nd, ok := byPath[fmt.Sprintf("/dev/nvidia%d", g.Minor)]
		if !ok {
			return nil, fmt.Errorf("GPU %d (%s): no device node /dev/nvidia%d", g.Index, g.UUID, g.Minor)
		}
		out = append(out, nd)
	}
	return out, nil
}
