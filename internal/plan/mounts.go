package plan

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// mounts are the container's bind mounts, in mount order: the driver's
// libraries, the stand-ins, the driver's tools, the container's state
// files, the driver's IPC paths, then a spatial GPU's MPS directories.
func mounts(host *discover.Host, cfg *config.Config, places tenant.Places, spatial *tenant.Device) ([]Mount, error) {
	if host.Library("libcuda") == nil || host.Library("libnvidia-ml") == nil {
		return nil, fmt.Errorf("driver %s: libcuda or libnvidia-ml missing", host.DriverVersion)
	}
	var out []Mount
	for _, l := range host.Libraries {
		out = append(out, Mount{Source: l.Path, Destination: ContainerDriverDir + "/" + l.Name, ReadOnly: true})
	}
	for _, l := range []string{LibCuda, LibNvml} {
		out = append(out, Mount{Source: filepath.Join(cfg.Library.Dir, l), Destination: ContainerLibDir + "/" + l, ReadOnly: true})
	}
	for _, b := range host.Binaries {
		out = append(out, Mount{Source: b.Path, Destination: ContainerBinDir + "/" + b.Name, ReadOnly: true})
	}
	out = append(out,
		Mount{Source: places.Quota(), Destination: contract.QuotaPath, ReadOnly: true},
		Mount{Source: places.Shared(), Destination: tenant.ContainerShared, Dir: true},
		Mount{Source: places.Host(), Destination: tenant.ContainerHost, ReadOnly: true, Dir: true},
		Mount{Source: places.Preload(), Destination: ContainerPreload, ReadOnly: true},
	)
	for _, ipc := range host.IPCPaths {
		dst := "/" + strings.TrimPrefix(filepath.ToSlash(ipc.Rel), "/")
		out = append(out, Mount{Source: cfg.DriverPath(ipc.Rel), Destination: dst, Dir: ipc.Dir})
	}
	if spatial != nil {
		dir := cfg.MPSDir(spatial.GPU.UUID)
		out = append(out,
			Mount{Source: filepath.Join(dir, config.MPSPipe), Destination: contract.MPSPipeDir, ReadOnly: true, Dir: true},
			Mount{Source: filepath.Join(dir, config.MPSShm), Destination: ContainerShm, Dir: true})
	}
	return out, nil
}

// mpsPipe is where a spatial device's MPS client finds its control
// daemon: the pipe directory's mount point in a container, its host path
// for a process on the host.
func mpsPipe(cfg *config.Config, spatial *tenant.Device, onHost bool) string {
	if onHost {
		return filepath.Join(cfg.MPSDir(spatial.GPU.UUID), config.MPSPipe)
	}
	return contract.MPSPipeDir
}
