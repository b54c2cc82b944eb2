package shim

import (
	"fmt"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/inject"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

func loadConfig(path string) (*config.Config, error) {
	return config.Load(path)
}

func settingsOf(c *config.Config) settings {
	st := settings{runtimes: c.Runtimes, stateDir: c.StateDir}
	if len(st.runtimes) == 0 {
		st.runtimes = DefaultRuntimes
	}
	if st.stateDir == "" {
		st.stateDir = DefaultStateDir
	}
	return st
}

// Request parses the container's GPU request with the configured defaults
// (nil: it asks for nothing).
func Request(s *spec.Spec, cfg *config.Config) (*spec.Request, error) {
	req, err := spec.ParseRequestWithDefaults(s.Env(), s.Annotations(), cfg.RequestDefaults())
	if err != nil {
		return nil, fmt.Errorf("bad GPU request: %w", err)
	}
	return req, nil
}

// Edited says whether vgpu already edited s (for container id: nothing more
// to do); a spec edited for another container is an error.
func Edited(s *spec.Spec, id string) (bool, error) {
	if !spec.Injected(s.Annotations()) {
		return false, nil
	}
	if owner := s.Annotations()[spec.InjectedAnnotation]; owner != id {
		// Its mounts point at another container's state: running it would
		// share (or miss) that container's quota.
		return true, fmt.Errorf("container %s: config.json in %s was already edited by vgpu for container %s; give each container a fresh bundle", id, s.Bundle(), owner)
	}
	return true, nil
}

// Plan computes what container id of bundle s gets, or nil when it asks for
// no GPU or vgpu already edited its spec.
func Plan(s *spec.Spec, cfg *config.Config, id string) (*inject.Plan, error) {
	if done, err := Edited(s, id); done || err != nil {
		return nil, err
	}
	req, err := Request(s, cfg)
	if err != nil || req == nil {
		return nil, err
	}
	return PlanFor(req, s, cfg, id)
}

// PlanFor resolves an already parsed request against the host's GPUs.
func PlanFor(req *spec.Request, s *spec.Spec, cfg *config.Config, id string) (*inject.Plan, error) {
	host, err := inject.Discover(cfg)
	if err != nil {
		return nil, fmt.Errorf("container %s asks for a GPU: %w", id, err)
	}
	plan, err := inject.NewPlan(req, cfg, host, id)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	plan.Bundle = s.Bundle()
	plan.Name = containerName(s.Annotations())
	return plan, nil
}

// prepare edits the bundle of a create/run: nothing at all for a container
// that asks for no GPU; otherwise the state directory and the spec, both or
// neither. undo removes the state again (when the exec of runc fails).
func prepare(inv *Invocation, cfg *config.Config) (undo func(), err error) {
	nothing := func() {}
	s, err := spec.LoadBundle(inv.Bundle)
	if err != nil {
		return nil, err
	}
	plan, err := Plan(s, cfg, inv.ID)
	if err != nil || plan == nil {
		return nothing, err
	}
	plan.PIDFile = inv.PIDFile // the init pid is recorded from it at start (pids.go)
	if err := plan.Install(s); err != nil {
		return nil, fmt.Errorf("container %s: %w", inv.ID, err)
	}
	return func() { _ = inject.RemoveState(cfg.StateDir, inv.ID) }, nil
}
