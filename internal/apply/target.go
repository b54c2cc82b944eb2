package apply

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// SpecEdit is vgpu-runtime's target of the pipeline (pipeline.Target).
type SpecEdit struct {
	Spec *spec.Spec
	// DriverLimits: the createRuntime hook that sets the plan's memory
	// limits in the driver, where the driver can hold them (nil: none).
	DriverLimits *DriverLimitsHook
}

// Apply edits a copy of the spec with the plan (and the driver-limits
// hook), mounts the capped tmpfs on the state's shared/ (sharedfs.go) and
// saves the edited spec (atomically). On error the spec is as it was and
// the pipeline's state.Remove takes the tmpfs off again.
func (t *SpecEdit) Apply(p *plan.Plan) error {
	if h := t.DriverLimits; h != nil {
		if hook := h.decide(p); hook != nil {
			p.Hooks = append(p.Hooks, plan.PlanHook{Stage: "createRuntime", Hook: *hook})
		}
	}
	edited := t.Spec.Clone()
	if err := Spec(p, edited); err != nil {
		return err
	}
	if err := mountSharedFS(p.StateDir); err != nil {
		return err
	}
	if err := edited.Save(); err != nil {
		return err
	}
	*t.Spec = *edited
	return nil
}

// RootfsEdit is vgpu-hook's target (pipeline.Target): it refuses when the
// spec's device rules deny the plan's nodes (they would exist but not open)
// or when More fails, and otherwise mounts into the rootfs.
type RootfsEdit struct {
	Rootfs string
	Rules  []specs.LinuxDeviceCgroup
	// StateOnly: the engine already put the host parts into the spec (CDI);
	// only the per-container mounts are left (plan.StateOnly).
	StateOnly bool
	More      func(*plan.Plan) error
}

// Apply: see RootfsEdit. The mount namespace is thrown away with a failed
// container; only the state directory is the pipeline's to take back.
func (t *RootfsEdit) Apply(p *plan.Plan) error {
	if err := CheckDeviceRules(p, t.Rules); err != nil {
		return err
	}
	if t.More != nil {
		if err := t.More(p); err != nil {
			return err
		}
	}
	if t.StateOnly {
		p = p.StateOnly()
	}
	return Rootfs(p, t.Rootfs)
}
