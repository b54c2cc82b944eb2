// vgpu-runtime is a runc-compatible runtime: docker, containerd and CRI-O call it
// in place of runc. For `create` and `run` of a container that asks for a GPU
// (VGPU_* environment or vgpu.io/* annotations) it edits the bundle's
// config.json (device nodes, libraries, quota file) and then executes the real
// runtime with the original arguments; every other command passes through.
//
// Configuration: /etc/vgpu/config.toml, or the file named by $VGPU_CONFIG.
package main

import (
	"fmt"
	"os"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/shim"
	"github.com/vgpu-dev/vgpu/internal/version"
)

const usage = `vgpu-runtime: a runc-compatible runtime that gives containers a share of a GPU.

Engines call it in place of runc (register it with: vgpu setup docker, or
vgpu setup containerd). For create and run of a container that asks for GPUs it
edits the bundle's config.json (device nodes, driver and vgpu libraries, quota
file) and then runs the real runtime (runc, crun: "runtimes" in the config) with
the same arguments; every other command passes straight through.

A container asks with environment variables or annotations:
  VGPU_VISIBLE_DEVICES=0,1     vgpu.io/visible-devices   GPUs by host index or UUID, or all
  VGPU_MEMORY_LIMIT=4Gi        vgpu.io/memory-limit      device memory per GPU (or 0=4Gi,1=8Gi)
  VGPU_COMPUTE_LIMIT=50        vgpu.io/compute-limit     percent of each GPU's compute

Configuration: /etc/vgpu/config.toml, or the file named by $VGPU_CONFIG.

--version prints vgpu-runtime's version and commit and the driver's version,
then the runtime it hands over to prints its own.

The runtime it hands over to prints its own help below.

`

func main() {
	if len(os.Args) == 2 {
		switch os.Args[1] {
		case "--help", "-h":
			fmt.Print(usage)
			_ = os.Stdout.Sync() // a pipe cannot sync; nothing to report
		case "--version", "-v":
			// Ours first; then shim.Main passes --version through to runc,
			// which prints its own.
			cfg, err := config.Load(shim.ConfigPath())
			fmt.Println(version.Line("vgpu-runtime"))
			fmt.Println(version.Driver(cfg, err))
			_ = os.Stdout.Sync()
		}
	}
	os.Exit(shim.Main(os.Args[1:], os.Stderr))
}
