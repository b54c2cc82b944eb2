package apply

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// SpecEdit is vgpu-runtime's target of the pipeline (pipeline.Target): Check
// edits a copy of the spec, so that a refusal changes nothing; Apply saves it.
type SpecEdit struct {
	Spec *spec.Spec
	// DriverLimits: the createRuntime hook that sets the plan's memory
	// limits in the driver, where the driver can hold them (nil: none).
	DriverLimits *DriverLimitsHook
	edited       *spec.Spec
}

// Check edits a copy of the spec with the plan, and the driver-limits hook.
func (t *SpecEdit) Check(p *plan.Plan) error {
	if h := t.DriverLimits; h != nil {
		if hook := h.decide(p); hook != nil {
			p.Hooks = append(p.Hooks, plan.PlanHook{Stage: "createRuntime", Hook: *hook})
		}
	}
	c := t.Spec.Clone()
	if err := Spec(p, c); err != nil {
		return err
	}
	t.edited = c
	return nil
}

// Apply mounts the capped tmpfs on the state's shared/ (sharedfs.go) and
// saves the edited spec (atomically). On error the pipeline's state.Remove
// takes the tmpfs off again.
func (t *SpecEdit) Apply(p *plan.Plan) error {
	if err := mountSharedFS(p.StateDir); err != nil {
		return err
	}
	if err := t.edited.Save(); err != nil {
		return err
	}
	*t.Spec = *t.edited
	return nil
}

// RootfsEdit is vgpu-hook's target (pipeline.Target): Check refuses when the
// spec's device rules deny the plan's nodes (they would exist but not open)
// or when More fails; Apply mounts into the rootfs.
type RootfsEdit struct {
	Rootfs string
	Rules  []specs.LinuxDeviceCgroup
	// StateOnly: the engine already put the host parts into the spec (CDI);
	// only the per-container mounts are left (plan.StateOnly).
	StateOnly bool
	More      func(*plan.Plan) error
}

// Check: see RootfsEdit.
func (t *RootfsEdit) Check(p *plan.Plan) error {
	if err := CheckDeviceRules(p, t.Rules); err != nil {
		return err
	}
	if t.More != nil {
		return t.More(p)
	}
	return nil
}

// Apply: see RootfsEdit. The mount namespace is thrown away with a failed
// container; only the state directory is the pipeline's to take back.
func (t *RootfsEdit) Apply(p *plan.Plan) error {
	if t.StateOnly {
		p = p.StateOnly()
	}
	return Rootfs(p, t.Rootfs)
}
