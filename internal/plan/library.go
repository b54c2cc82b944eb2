package plan

import (
	"fmt"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// library is the quota file's header: the driver's libraries and the
// shared directory where the library finds them (the container's paths,
// or the host's for a process on the host), the config's log level and
// pacing period.
func library(host *discover.Host, cfg *config.Config, places tenant.Places, onHost bool) (tenant.Library, error) {
	cuda, nvml := host.Library("libcuda"), host.Library("libnvidia-ml")
	if cuda == nil || nvml == nil {
		return tenant.Library{}, fmt.Errorf("driver %s: libcuda or libnvidia-ml missing", host.DriverVersion)
	}
	lib := tenant.Library{
		DriverCuda: ContainerDriverDir + "/" + cuda.Name,
		DriverNvml: ContainerDriverDir + "/" + nvml.Name,
		SharedDir:  tenant.ContainerShared,
		LogLevel:   cfg.Library.LogLevel,
	}
	if onHost {
		lib.DriverCuda, lib.DriverNvml = cuda.Path, nvml.Path
		lib.SharedDir = places.Shared()
	}
	period, err := config.ParseComputePeriod(cfg.Library.ComputePeriod)
	if err != nil {
		return tenant.Library{}, fmt.Errorf("library.compute_period: %w", err)
	}
	lib.ComputePeriodMS = period
	return lib, nil
}
