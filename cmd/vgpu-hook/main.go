// vgpu-hook is the OCI hook form of vgpu-runtime, for podman hooks.d and CDI.
// Install its hooks.d entries with `vgpu setup podman`, or write a CDI spec
// that runs it with `vgpu cdi generate`.
// Usage (as the runtime calls it): vgpu-hook createContainer|poststop [--cdi], state on stdin.
package main

import (
	"fmt"
	"os"

	"github.com/vgpu-dev/vgpu/internal/hook"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--help" || os.Args[1] == "-h" || os.Args[1] == "help") {
		fmt.Print(hook.Usage)
		return
	}
	os.Exit(hook.Main(os.Args[1:], os.Stdin, os.Stderr))
}
