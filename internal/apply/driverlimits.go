package apply

import (
	"fmt"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/plan"
)

// DriverLimitsHook is vgpu-hook's createRuntime hook that sets a container's
// memory limits in the driver (internal/driverlimit). vgpu-runtime has no
// cgo and cannot call NVML: it decides, and where the driver can hold the
// limits the hook sets them once runc has made the container's cgroup and
// before anything of the container runs.
type DriverLimitsHook struct {
	Hook *specs.Hook // nil: Err says why there is none
	Err  error
	// StateDir remembers what the driver's NVML exports (driverlimit.Eligible).
	StateDir string
	// Why, after Check: why a plan with a memory limit got no hook (the
	// library and vgpu node hold its limits); nil otherwise.
	Why error
}

// decide returns the hook for p, or nil: p without a memory limit needs
// none; with one, Why says why the driver cannot hold it.
func (h *DriverLimitsHook) decide(p *plan.Plan) *specs.Hook {
	limited := false
	for _, d := range p.Devices {
		limited = limited || d.Memory > 0
	}
	if !limited {
		return nil
	}
	nvml := ""
	for _, m := range p.Mounts {
		if strings.HasPrefix(filepath.Base(m.Destination), "libnvidia-ml.so.") {
			nvml = m.Source
		}
	}
	switch {
	case nvml == "":
		h.Why = fmt.Errorf("no libnvidia-ml in the plan")
	case h.Hook == nil:
		h.Why = h.Err
	default:
		h.Why = driverlimit.Eligible(h.StateDir, nvml)
	}
	if h.Why != nil {
		return nil
	}
	return h.Hook
}
