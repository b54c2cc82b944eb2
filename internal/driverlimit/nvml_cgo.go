//go:build cgo

package driverlimit

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// open loads the driver's NVML at nvmlPath and checks that it has the calls
// (go-nvml binds every function lazily: calling a missing one would crash).
func open(nvmlPath string) (nvml.Interface, error) {
	lib := nvml.New(nvml.WithLibraryPath(nvmlPath))
	if r := lib.Init(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML init with %s: %v", nvmlPath, lib.ErrorString(r))
	}
	for _, s := range []string{SetSymbol, GetSymbol} {
		if err := lib.Extensions().LookupSymbol(s); err != nil {
			_ = lib.Shutdown() // the Init error is the one to report
			return nil, fmt.Errorf("driver %s has no %s", nvmlPath, s)
		}
	}
	return lib, nil
}

func device(lib nvml.Interface, uuid string) (nvml.Device, error) {
	d, r := lib.DeviceGetHandleByUUID(uuid)
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: %v", uuid, lib.ErrorString(r))
	}
	return d, nil
}

// Set sets each limit on cgroup dir cg (its full sysfs path). All or
// nothing: on an error the limits it already set are cleared again.
func Set(nvmlPath, cg string, ls []Limit) error {
	lib, err := open(nvmlPath)
	if err != nil {
		return err
	}
	defer func() { _ = lib.Shutdown() }()
	for i, l := range ls {
		d, err := device(lib, l.UUID)
		if err == nil {
			if r := d.SetMemoryLimits_v1(cg, l.Soft, l.Hard); r != nvml.SUCCESS {
				err = fmt.Errorf("%s(%s, soft %d, hard %d) on GPU %s: %v", SetSymbol, cg, l.Soft, l.Hard, l.UUID, lib.ErrorString(r))
			}
		}
		if err != nil {
			for _, done := range ls[:i] {
				if d, derr := device(lib, done.UUID); derr == nil {
					_ = d.SetMemoryLimits_v1( // rolling back: best effort
						cg, 0, nvml.DEVICE_MEMORY_LIMIT_MAX)
				}
			}
			return err
		}
	}
	return nil
}

// Clear lifts the limits of cgroup cg on each GPU (soft 0, hard
// NVML_DEVICE_MEMORY_LIMIT_MAX); it tries them all and returns the first error.
func Clear(nvmlPath, cg string, uuids []string) error {
	lib, err := open(nvmlPath)
	if err != nil {
		return err
	}
	defer func() { _ = lib.Shutdown() }()
	var first error
	for _, u := range uuids {
		d, err := device(lib, u)
		if err == nil {
			if r := d.SetMemoryLimits_v1(cg, 0, nvml.DEVICE_MEMORY_LIMIT_MAX); r != nvml.SUCCESS {
				err = fmt.Errorf("clearing the limits of %s on GPU %s: %v", cg, u, lib.ErrorString(r))
			}
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Got is what the driver holds for one GPU of a cgroup.
type Got struct {
	UUID                    string
	Soft, Hard, CurrentUsed uint64
	Set                     bool   // false: the driver has no limit for it
	Err                     string // the call failed
}

// Get reads the driver's limits of cgroup cg on each GPU.
func Get(nvmlPath, cg string, uuids []string) ([]Got, error) {
	lib, err := open(nvmlPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = lib.Shutdown() }()
	var out []Got
	for _, u := range uuids {
		g := Got{UUID: u}
		d, err := device(lib, u)
		if err != nil {
			g.Err = err.Error()
		} else {
			l, r := d.GetMemoryLimits_v1(cg)
			switch r {
			case nvml.SUCCESS:
				g.Soft, g.Hard, g.CurrentUsed, g.Set = l.SoftLimit, l.HardLimit, l.CurrentUsed, l.HardLimit != nvml.DEVICE_MEMORY_LIMIT_MAX
			case nvml.ERROR_NOT_FOUND:
			default:
				g.Err = lib.ErrorString(r)
			}
		}
		out = append(out, g)
	}
	return out, nil
}
