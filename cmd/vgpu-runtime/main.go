// vgpu-runtime is a runc-compatible runtime: docker, containerd and CRI-O call it
// in place of runc. For `create` and `run` of a container that asks for a GPU
// (VGPU_* environment or vgpu.io/* annotations) it edits the bundle's
// config.json (device nodes, libraries, quota file) and then executes the real
// runtime with the original arguments; every other command passes through.
//
// Configuration: /etc/vgpu/config.toml, or the file named by $VGPU_CONFIG.
package main

import (
	"os"

	"github.com/vgpu-dev/vgpu/internal/shim"
)

func main() {
	os.Exit(shim.Main(os.Args[1:], os.Stderr))
}
