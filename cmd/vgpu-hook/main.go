// vgpu-hook is the OCI hook form of vgpu-runtime, for podman hooks.d and CDI.
// Install hooks.d/*.json (in this directory) into /etc/containers/oci/hooks.d.
// Usage (as the runtime calls it): vgpu-hook createContainer|poststop, state on stdin.
package main

import (
	"os"

	"github.com/vgpu-dev/vgpu/internal/hook"
)

func main() {
	os.Exit(hook.Main(os.Args[1:], os.Stdin, os.Stderr))
}
