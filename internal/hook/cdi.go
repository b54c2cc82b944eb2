package hook

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/apply"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/pipeline"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// createCDI is createContainer for a container that got vgpu.io/gpu devices
// through CDI. The engine already put the host parts of the plan into the
// spec (device nodes with their cgroup rules, driver libraries, stand-ins,
// tools, IPC paths, env); what is left is per container: the state directory
// and the mounts of its quota file, shared directory and ld.so.preload. The
// container's GPUs are the host GPUs whose device nodes are in the spec; its
// limits come from the same request parser as everywhere else.
func createCDI(st *specs.State) error {
	s, cfg, rules, done, err := load(st)
	if err != nil || done {
		return err
	}
	if err := apply.CheckControlRules(cfg, rules); err != nil {
		return fmt.Errorf("container %s: %w", st.ID, err)
	}
	host, err := discover.Discover(cfg)
	if err != nil {
		return fmt.Errorf("container %s asks for a GPU (CDI): %w", st.ID, err)
	}
	devs, err := s.Devices()
	if err != nil {
		return err
	}
	gpus := GPUsInSpec(host, devs)
	if len(gpus) == 0 {
		return fmt.Errorf("container %s: the vgpu.io/gpu CDI spec ran this hook, but the container has none of this host's GPU device nodes (is the spec out of date? run vgpu cdi generate)", st.ID)
	}
	req, err := cdiRequestOf(s, cfg, host, gpus)
	if err != nil {
		return fmt.Errorf("container %s: %w", st.ID, err)
	}
	_, err = pipeline.Run(pipeline.Input{
		Config: cfg, ContainerID: st.ID, Request: req, Host: host,
		Name: pipeline.EngineName(s, st.ID), Bundle: s.Bundle(), Rootfs: s.RootfsPath(), UID: pipeline.HostUID(s),
		Target: &apply.RootfsEdit{Rootfs: s.RootfsPath(), Rules: rules, StateOnly: true,
			More: func(p *plan.Plan) error { return checkHostMounts(s, p) }},
	})
	if err == nil {
		recordInit(cfg.StateDir, st.ID, os.Stderr)
		ownLimits(cfg, st.ID, os.Stderr)
	}
	return err
}

// GPUsInSpec returns the host's GPUs (in host index order) whose device node
// is in devs, matched by type and numbers.
func GPUsInSpec(host *discover.Host, devs []specs.LinuxDevice) []discover.GPU {
	var out []discover.GPU
	for _, g := range host.GPUs {
		var node *discover.DeviceNode
		for i := range host.Nodes {
			if host.Nodes[i].Path == fmt.Sprintf("/dev/nvidia%d", g.Minor) {
				node = &host.Nodes[i]
			}
		}
		if node == nil {
			continue
		}
		for _, d := range devs {
			if d.Type == node.Type && d.Major == node.Major && d.Minor == node.Minor {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// cdiRequestOf is the request of a container whose GPUs came from CDI. A
// Kubernetes container (pipeline.GrantsOnly) takes its limits from the
// device plugin's grants, which must name exactly its CDI GPUs; its own env
// and annotations are the pod's and grant nothing, so without a grant it is
// refused rather than run with limits it chose itself.
func cdiRequestOf(s *spec.Spec, cfg *config.Config, host *discover.Host, gpus []discover.GPU) (*request.Request, error) {
	if !pipeline.GrantsOnly(s, cfg) {
		return CDIRequest(s.Env(), s.Annotations(), host, gpus)
	}
	var uuids []string
	for _, g := range gpus {
		uuids = append(uuids, g.UUID)
	}
	req, err := pipeline.FromSpec(s, cfg)
	if err != nil {
		return nil, err
	}
	if req == nil {
		return nil, fmt.Errorf("the container got GPU(s) %s through CDI (vgpu.io/gpu=…) but carries no vgpu device plugin grant (grant.vgpu.io/*): with kubernetes.grants_only a Kubernetes container's limits come only from grants; request vgpu.io/memory and vgpu.io/cores instead", strings.Join(uuids, ","))
	}
	var granted []string
	for _, d := range req.Devices {
		granted = append(granted, d.UUID)
	}
	a, b := slices.Clone(granted), slices.Clone(uuids)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		return nil, fmt.Errorf("the container got GPU(s) %s through CDI (vgpu.io/gpu=…) but its grants (%s) are for %s; give the GPUs one way", strings.Join(uuids, ","), req.DeviceSource, strings.Join(granted, ","))
	}
	return req, nil
}

// CDIRequest is the request of a container whose GPUs (gpus) came from CDI:
// the devices are those, the limits are the container's own
// (request.ParseLimits). A device selection the container also makes
// (vgpu.io/visible-devices, VGPU_VISIBLE_DEVICES) must name the same GPUs.
func CDIRequest(env []string, ann map[string]string, host *discover.Host, gpus []discover.GPU) (*request.Request, error) {
	var uuids []string
	for _, g := range gpus {
		uuids = append(uuids, g.UUID)
	}
	var own *string
	what := ""
	if v, ok := ann[request.AnnotationVisibleDevices]; ok {
		own, what = &v, request.AnnotationVisibleDevices
	} else {
		for _, e := range env {
			if k, v, _ := strings.Cut(e, "="); k == request.EnvVisibleDevices {
				v := v
				own, what = &v, request.EnvVisibleDevices
			}
		}
	}
	if own != nil && strings.TrimSpace(*own) != "" {
		sel, err := request.Parse([]string{request.EnvVisibleDevices + "=" + *own}, nil)
		if err != nil {
			return nil, err
		}
		var named []string
		if sel != nil {
			sel.DeviceSource = fmt.Sprintf("%s=%q", what, *own)
			gs, err := plan.Select(sel, host.GPUs)
			if err != nil {
				return nil, err
			}
			for _, g := range gs {
				named = append(named, g.UUID)
			}
		}
		a, b := slices.Clone(named), slices.Clone(uuids)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			return nil, fmt.Errorf("the container got GPU(s) %s through CDI (vgpu.io/gpu=…) but %s=%q names %s; give the GPUs one way", strings.Join(uuids, ","), what, *own, describe(named))
		}
	}
	lim, err := request.ParseAll(env, ann)
	if err != nil {
		return nil, fmt.Errorf("bad GPU request: %w", err)
	}
	req := &request.Request{DeviceSource: "CDI devices vgpu.io/gpu (" + strings.Join(uuids, ",") + ")", Memory: lim.Memory, Compute: lim.Compute,
		ComputeRequest: lim.ComputeRequest, MemoryRequest: lim.MemoryRequest, Priority: lim.Priority}
	for _, u := range uuids {
		req.Devices = append(req.Devices, request.DeviceRef{Index: -1, UUID: u})
	}
	for _, l := range []request.Limit{lim.Memory, lim.Compute, lim.ComputeRequest, lim.MemoryRequest, lim.Priority} {
		if m := l.MaxIndex(); m >= len(uuids) {
			return nil, fmt.Errorf("%s: device index %d is out of range: the container has %d device(s) from CDI, indices 0..%d", l.Source, m, len(uuids), len(uuids)-1)
		}
	}
	return req, nil
}

func describe(uuids []string) string {
	if len(uuids) == 0 {
		return "none"
	}
	return strings.Join(uuids, ",")
}

// checkHostMounts makes sure the spec has the host mounts of the plan (the
// CDI spec put them there): a spec generated for another driver version
// would give the container libraries the quota file does not name.
func checkHostMounts(s *spec.Spec, p *plan.Plan) error {
	var doc struct {
		Mounts []specs.Mount `json:"mounts"`
	}
	if err := json.Unmarshal(s.Bytes(), &doc); err != nil {
		return err
	}
	for _, m := range p.HostMounts() {
		found := false
		for _, sm := range doc.Mounts {
			if filepath.Clean(sm.Destination) == m.Destination && filepath.Clean(sm.Source) == filepath.Clean(m.Source) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("the container has no mount of %s at %s: the vgpu.io/gpu CDI spec is out of date (driver or configuration changed); run vgpu cdi generate again", m.Source, m.Destination)
		}
	}
	return nil
}

// hasCDIHook reports whether the spec runs vgpu-hook from the CDI spec at
// createContainer; a hooks.d entry then leaves the container to it.
func hasCDIHook(s *spec.Spec) bool {
	var doc struct {
		Hooks *specs.Hooks `json:"hooks"`
	}
	if json.Unmarshal(s.Bytes(), &doc) != nil || doc.Hooks == nil {
		return false
	}
	for _, h := range doc.Hooks.CreateContainer {
		if filepath.Base(h.Path) == "vgpu-hook" && slices.Contains(h.Args, config.HookCDIFlag) {
			return true
		}
	}
	return false
}
