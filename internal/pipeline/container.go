package pipeline

import (
	"fmt"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// What the OCI entry points (vgpu-runtime, vgpu-hook) read from a bundle's
// spec before Run.

// FromSpec parses the container's GPU request with the configured defaults
// (nil: it asks for nothing).
func FromSpec(s *spec.Spec, cfg *config.Config) (*request.Request, error) {
	req, err := request.ParseWithDefaults(s.Env(), s.Annotations(), cfg.RequestDefaults())
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
