package apply

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/plan"
)

// The driver-limits hook goes only into a plan with a memory limit whose
// driver can hold it; otherwise Why says which of the reasons holds.
func TestDriverLimitsDecide(t *testing.T) {
	hook := &specs.Hook{Path: "/usr/bin/vgpu-hook", Args: []string{"vgpu-hook", "driver-limits"}}
	limited := func() *plan.Plan {
		p := testPlan()
		p.Devices[0].Memory = 1 << 30
		return p
	}

	h := &DriverLimitsHook{Hook: hook}
	if got := h.decide(testPlan()); got != nil || h.Why != nil {
		t.Errorf("no memory limit: hook %v, why %v; want neither", got, h.Why)
	}

	p := limited()
	p.Mounts = p.Mounts[1:] // no libnvidia-ml
	h = &DriverLimitsHook{Hook: hook}
	if got := h.decide(p); got != nil || h.Why == nil || !strings.Contains(h.Why.Error(), "no libnvidia-ml") {
		t.Errorf("no NVML in the plan: hook %v, why %v", got, h.Why)
	}

	noHook := errors.New("vgpu-hook not found next to vgpu-runtime")
	h = &DriverLimitsHook{Err: noHook}
	if got := h.decide(limited()); got != nil || !errors.Is(h.Why, noHook) {
		t.Errorf("no hook binary: hook %v, why %v; want Err", got, h.Why)
	}

	// The plan's libnvidia-ml is not there to read: not eligible.
	h = &DriverLimitsHook{Hook: hook, StateDir: t.TempDir()}
	if got := h.decide(limited()); got != nil || h.Why == nil {
		t.Errorf("unreadable driver: hook %v, why %v; want a reason", got, h.Why)
	}
}

// SpecEdit adds no createRuntime hook when the driver cannot hold the
// limits, and a refused spec is left as it was (nothing mounted: the plan
// is refused before the shared tmpfs).
func TestSpecEditRefusedLeavesSpec(t *testing.T) {
	doc := `{"annotations":{"vgpu.io/injected":"other"}}`
	s := parseSpec(t, doc)
	p := testPlan()
	p.Devices[0].Memory = 1 << 30
	p.StateDir = filepath.Join(t.TempDir(), "missing")
	err := (&SpecEdit{Spec: s, DriverLimits: &DriverLimitsHook{Err: errors.New("no hook")}}).Apply(p)
	if err == nil {
		t.Fatal("an already edited spec was accepted")
	}
	if len(p.Hooks) != 0 {
		t.Errorf("hooks %+v added though the driver cannot hold the limits", p.Hooks)
	}
	if string(s.Bytes()) != doc {
		t.Errorf("spec changed: %s", s.Bytes())
	}
}
