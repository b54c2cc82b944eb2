//go:build cgo

package discover

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-dev/vgpu/internal/config"
)

// nvmlLister lists in this process: a binary built with cgo links go-nvml.
type nvmlLister struct{}

// defaultLister of a binary built with cgo lists in the process, every time
// (vgpu-hook, vgpu, the device plugin: only vgpu-runtime remembers the list,
// nvml_nocgo.go).
func defaultLister(*config.Config) Lister { return nvmlLister{} }

// ListGPUsNVML lists the GPUs in this process through go-nvml. It exists only
// in cgo builds: vgpu-discover, the helper every cgo-less binary runs
// (nvml_nocgo.go), cannot be built without it.
func ListGPUsNVML(nvmlPath string) ([]GPU, error) { return nvmlLister{}.ListGPUs(nvmlPath) }

func int8String(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// ListGPUs loads nvmlPath (the driver's own libnvidia-ml.so.<version>, not
// whatever the loader would find) and lists every GPU.
func (nvmlLister) ListGPUs(nvmlPath string) ([]GPU, error) {
	lib := nvml.New(nvml.WithLibraryPath(nvmlPath))
	if r := lib.Init(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML init with %s: %v", nvmlPath, lib.ErrorString(r))
	}
	defer func() { _ = lib.Shutdown() }() // the figures are read; a failed shutdown changes none
	n, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("nvmlDeviceGetCount: %v", lib.ErrorString(r))
	}
	gpus := make([]GPU, 0, n)
	for i := 0; i < n; i++ {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("nvmlDeviceGetHandleByIndex(%d): %v", i, lib.ErrorString(r))
		}
		g := GPU{Index: i}
		var err error
		check := func(what string, r nvml.Return) {
			if r != nvml.SUCCESS && err == nil {
				err = fmt.Errorf("GPU %d: %s: %v", i, what, lib.ErrorString(r))
			}
		}
		g.UUID, r = d.GetUUID()
		check("nvmlDeviceGetUUID", r)
		g.Name, r = d.GetName()
		check("nvmlDeviceGetName", r)
		g.Minor, r = d.GetMinorNumber()
		check("nvmlDeviceGetMinorNumber", r)
		mem, r := d.GetMemoryInfo()
		check("nvmlDeviceGetMemoryInfo", r)
		g.MemoryBytes = mem.Total
		if pci, r := d.GetPciInfo(); r == nvml.SUCCESS {
			g.PCIBusID = int8String(pci.BusId[:])
		}
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}
