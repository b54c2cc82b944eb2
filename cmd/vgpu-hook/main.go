// vgpu-hook is the OCI hook form of vgpu-runtime, for podman hooks.d and CDI.
// Install its hooks.d entries with `vgpu setup podman`, or write a CDI spec
// that runs it with `vgpu cdi generate`.
// Usage (as the runtime calls it): vgpu-hook createContainer|createRuntime|prestart|poststop [--cdi],
// state on stdin; vgpu-hook --help; vgpu-hook --version.
package main

import (
	"fmt"
	"os"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/hook"
	"github.com/vgpu-dev/vgpu/internal/shim"
	"github.com/vgpu-dev/vgpu/internal/version"
)

func main() {
	if len(os.Args) == 2 {
		switch os.Args[1] {
		case "--help", "-h", "help":
			fmt.Print(hook.Usage)
			return
		case "--version", "-v", "version":
			cfg, err := config.Load(shim.ConfigPath())
			fmt.Println(version.Line("vgpu-hook"))
			fmt.Println(version.Driver(cfg, err))
			return
		}
	}
	os.Exit(hook.Main(os.Args[1:], os.Stdin, os.Stderr))
}
