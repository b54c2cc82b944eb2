package plan

import (
	"github.com/vgpu-dev/vgpu/internal/discover"
	"path/filepath"
	"strings"
)

// A plan has two kinds of parts: those that are the same for every container
// given the same GPUs (device nodes, driver libraries, stand-ins, tools, IPC
// paths), and those that belong to one container (the state directory's
// quota, shared/ and ld.so.preload). A static description such as a CDI spec
// (vgpu cdi generate) can carry only the first kind; the second must be made
// at create time by the runtime (vgpu-runtime) or the createContainer hook
// (vgpu-hook). These accessors split one Plan that way, so that there is
// still a single description of what a container gets.

// HostMounts returns the mounts of host files: everything but StateMounts,
// in plan order.
func (p *Plan) HostMounts() []Mount {
	var out []Mount
	for _, m := range p.Mounts {
		if !p.isStateMount(m) {
			out = append(out, m)
		}
	}
	return out
}

// StateMounts returns the mounts from the container's state directory
// (quota, shared/, host/, ld.so.preload), in plan order.
func (p *Plan) StateMounts() []Mount {
	var out []Mount
	for _, m := range p.Mounts {
		if p.isStateMount(m) {
			out = append(out, m)
		}
	}
	return out
}

func (p *Plan) isStateMount(m Mount) bool {
	dir := filepath.Clean(p.StateDir)
	return p.StateDir != "" && strings.HasPrefix(filepath.Clean(m.Source), dir+string(filepath.Separator))
}

// CommonNodes returns the control nodes every GPU container gets
// (nvidiactl, nvidia-uvm, …); GPUNodes the nodes of the plan's GPUs, in
// device order.
func (p *Plan) CommonNodes() []discover.DeviceNode {
	n := len(p.Nodes) - len(p.Devices)
	if n < 0 {
		n = 0
	}
	return append([]discover.DeviceNode(nil), p.Nodes[:n]...)
}

// GPUNodes: see CommonNodes.
func (p *Plan) GPUNodes() []discover.DeviceNode {
	n := len(p.Nodes) - len(p.Devices)
	if n < 0 {
		n = 0
	}
	return append([]discover.DeviceNode(nil), p.Nodes[n:]...)
}

// Options returns the OCI mount options the plan uses for m (bind mounts:
// rbind, nosuid, nodev, ro or rw, …; mountopts.go).
func (m Mount) Options() []string { return m.Flags().OCIOptions() }

// StateOnly returns a copy of the plan that creates nothing but the
// per-container mounts: what the createContainer hook still has to do when
// the engine already put the host parts into the spec (CDI).
func (p *Plan) StateOnly() *Plan {
	c := *p
	c.Nodes = nil
	c.Mounts = p.StateMounts()
	return &c
}
