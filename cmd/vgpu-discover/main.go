// vgpu-discover lists the host's GPUs through the driver's own NVML library
// and prints them as a JSON array (discover.GPU). vgpu-runtime, built without
// cgo so that a container that asks for no GPU starts fast, runs it only for a
// container that asks for one (discover.HelperLister). Not for users.
//
//	vgpu-discover <path of libnvidia-ml.so.<version>>
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/version"
)

const usage = `vgpu-discover: lists the GPUs through the driver's NVML, as JSON.

vgpu-runtime runs it (from its own directory) for a container that asks for a
GPU; vgpu-runtime itself is built without cgo and links no NVML.

usage: vgpu-discover <path of the driver's libnvidia-ml.so.<version>>
`

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "--help", "-h":
		fmt.Print(usage)
		return
	case "--version", "-v":
		cfg, err := config.Load(config.Path())
		fmt.Println(version.Line("vgpu-discover"))
		fmt.Println(version.Driver(cfg, err))
		return
	}
	gpus, err := discover.ListGPUsNVML(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "vgpu-discover: "+err.Error())
		os.Exit(1)
	}
	out, err := json.Marshal(gpus)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vgpu-discover: "+err.Error())
		os.Exit(1)
	}
	_, _ = os.Stdout.Write(append(out, '\n')) // a closed stdout: the caller sees no list
}
