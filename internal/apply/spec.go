// Package apply puts a plan into effect: into an OCI spec (vgpu-runtime,
// Spec) or into a rootfs from a createContainer hook (vgpu-hook, Rootfs). The
// per-container files are the state store's (internal/state); the pipeline
// (internal/pipeline) orders the steps. Both targets also give the state's
// shared/ a size-capped tmpfs in the host's mount namespace (sharedfs.go):
// SpecEdit.Apply mounts it directly, Rootfs from the runtime's mount
// namespace (sharedfs_hook.go); state.Remove unmounts it.
package apply

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// SpecMounts returns the plan's mounts as OCI mounts.
func SpecMounts(p *plan.Plan) []specs.Mount {
	out := make([]specs.Mount, 0, len(p.Mounts))
	for _, m := range p.Mounts {
		out = append(out, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: m.Options()})
	}
	return out
}

// Spec edits s: linux.devices (skipping nodes the spec already has at
// the same path with the same numbers), the matching allow rules "rwm" in
// linux.resources.devices, the bind mounts, env, and the injected marker.
// It is all or nothing: on error s is unchanged. Save s afterwards.
func Spec(p *plan.Plan, s *spec.Spec) error {
	if spec.Injected(s.Annotations()) {
		return fmt.Errorf("spec already edited by vgpu (annotation %s=%q)", spec.InjectedAnnotation, s.Annotations()[spec.InjectedAnnotation])
	}
	c := s.Clone()
	existing, err := c.Devices()
	if err != nil {
		return err
	}
	have := map[string]specs.LinuxDevice{}
	for _, d := range existing {
		have[d.Path] = d
	}
	var devs []specs.LinuxDevice
	var rules []specs.LinuxDeviceCgroup
	for _, n := range p.Nodes {
		if d, ok := have[n.Path]; ok {
			if d.Type != n.Type || d.Major != n.Major || d.Minor != n.Minor {
				return fmt.Errorf("spec already has %s as %s %d:%d, the host's is %s %d:%d", n.Path, d.Type, d.Major, d.Minor, n.Type, n.Major, n.Minor)
			}
		} else {
			mode, uid, gid := n.FileMode, n.UID, n.GID
			devs = append(devs, specs.LinuxDevice{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor, FileMode: &mode, UID: &uid, GID: &gid})
		}
		major, minor := n.Major, n.Minor
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: n.Type, Major: &major, Minor: &minor, Access: "rwm"})
	}
	for _, step := range []func() error{
		func() error { return c.AddDevices(devs...) },
		func() error { return c.AddDeviceRules(rules...) },
		func() error { return c.AddMounts(SpecMounts(p)...) },
		func() error {
			for _, e := range p.Env {
				k, v, _ := cut(e)
				if err := c.SetEnv(k, v); err != nil {
					return err
				}
			}
			return nil
		},
		func() error {
			for _, h := range p.Hooks {
				if err := c.AddHook(h.Stage, h.Hook); err != nil {
					return err
				}
			}
			return nil
		},
		func() error { return c.SetAnnotation(spec.InjectedAnnotation, p.ContainerID) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	*s = *c
	return nil
}

func cut(e string) (string, string, bool) {
	for i := 0; i < len(e); i++ {
		if e[i] == '=' {
			return e[:i], e[i+1:], true
		}
	}
	return e, "", false
}
