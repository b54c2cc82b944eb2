package pipeline

import (
	"fmt"

	"github.com/vgpu-dev/vgpu/internal/allocation"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// What the OCI entry points (vgpu-runtime, vgpu-hook) read from a bundle's
// spec before Run.

// FromSpec parses the container's GPU request with the configured defaults
// (nil: it asks for nothing). In Kubernetes mode (kubernetes.grants_only) a
// container that containerd's CRI created gets only what the device plugin
// granted it: its env and annotations are the pod's and grant nothing.
func FromSpec(s *spec.Spec, cfg *config.Config) (*request.Request, error) {
	if GrantsOnly(s, cfg) {
		return fromGrants(cfg, s.Annotations())
	}
	req, err := request.ParseWithDefaults(s.Env(), s.Annotations(), cfg.RequestDefaults())
	if err != nil {
		return nil, fmt.Errorf("bad GPU request: %w", err)
	}
	return req, nil
}

// HostUID is the host user id of s's process, nil when the spec does not
// say (pipeline.Input.UID).
func HostUID(s *spec.Spec) *uint32 {
	if u, ok := s.HostUID(); ok {
		return &u
	}
	return nil
}

// GrantsOnly says whether s is a container that containerd's CRI created
// while kubernetes.grants_only is on: it gets a GPU only through the device
// plugin's grants, never through its own env or annotations.
func GrantsOnly(s *spec.Spec, cfg *config.Config) bool {
	return cfg.Kubernetes.GrantsOnly && s.Annotations()[allocation.CRIContainerTypeAnnotation] != ""
}

// fromGrants is a CRI container's request: the device plugin's records
// named by its grant.vgpu.io/* annotations (nil: it was granted nothing),
// with the priority of its pod's PriorityClass (grantPriority).
func fromGrants(cfg *config.Config, ann map[string]string) (*request.Request, error) {
	dir, coresLimit, memoryLimit := cfg.Kubernetes.GrantDir, cfg.Kubernetes.CoresLimit, cfg.Kubernetes.MemoryLimit
	a, err := allocation.ForContainer(dir, ann)
	if err != nil {
		return nil, fmt.Errorf("bad Kubernetes grant: %w", err)
	}
	if a == nil {
		return nil, nil
	}
	g := Allocation{UUIDs: []string{a.UUID}, Memory: []uint64{a.MemoryBytes}, Compute: []int{a.ComputePercent}, Source: a.Source}
	if g.Priority, err = grantPriority(cfg, ann); err != nil {
		return nil, fmt.Errorf("bad Kubernetes grant: %w", err)
	}
	if a.ComputePercent > 0 {
		g.CoresAsRequests(coresLimit) // vgpu.io/cores is the request
	}
	if a.MemoryBytes > 0 { // vgpu.io/memory is the request
		if err := g.MemoryAsRequests(memoryLimit); err != nil {
			return nil, fmt.Errorf("bad Kubernetes grant: %w", err)
		}
	}
	req, err := g.Request()
	if err != nil {
		return nil, fmt.Errorf("bad Kubernetes grant: %w", err)
	}
	return req, nil
}

// grantPriority is the priority kubernetes.priority_classes gives the
// PriorityClass of the container's pod, found by the pod UID containerd's
// CRI set (allocation.PodClass); "" (defaults.priority) when the table is
// empty or does not list the class, or the pod is not found.
func grantPriority(cfg *config.Config, ann map[string]string) (string, error) {
	if len(cfg.Kubernetes.PriorityClasses) == 0 {
		return "", nil
	}
	class, found, err := allocation.PodClass(cfg.Kubernetes.GrantDir, ann[allocation.SandboxUIDAnnotation])
	if err != nil || !found {
		return "", err
	}
	if p, listed := cfg.ClassPriority(class); listed {
		return p.String(), nil
	}
	return "", nil
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

// ContainerName is the engine's name of the container, when its annotations
// carry one (for vgpu status): Kubernetes (CRI: pod/container), nerdctl.
// Docker and podman pass none to the runtime.
func ContainerName(ann map[string]string) string {
	if c := ann["io.kubernetes.cri.container-name"]; c != "" {
		if p := ann["io.kubernetes.cri.sandbox-name"]; p != "" {
			return p + "/" + c
		}
		return c
	}
	if c := ann["io.kubernetes.container.name"]; c != "" {
		if p := ann["io.kubernetes.pod.name"]; p != "" {
			return p + "/" + c
		}
		return c
	}
	return ann["nerdctl/name"]
}
