package discover

import (
	"fmt"
	"strings"
)

// DeviceFlags is what an engine that takes device nodes by hand (podman with
// vgpu-hook) needs for GPU index gpu: one --device per control node, in
// ControlNodes' order, then the GPU's node. The hook refuses a container
// whose device rules deny a node it creates, so every page and message that
// lists the nodes takes them from here (make docs-check holds the docs to it).
func DeviceFlags(gpu int) string {
	var b strings.Builder
	for _, n := range ControlNodes {
		fmt.Fprintf(&b, "--device /dev/%s ", n.Name)
	}
	fmt.Fprintf(&b, "--device /dev/nvidia%d", gpu)
	return b.String()
}
