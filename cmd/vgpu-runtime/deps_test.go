package main

import (
	"testing"

	"github.com/vgpu-dev/vgpu/internal/depcheck"
)

// vgpu-runtime starts for every container of a host where it is the default
// runtime: what it links costs every container its package init and page
// faults. Heavy dependencies of the other binaries stay out of it; it is
// built without cgo (Makefile), as go list sees it here.
func TestNoHeavyDependencies(t *testing.T) {
	depcheck.Forbid(t, false, "keep it out of the runtime's start",
		"k8s.io/", "google.golang.org/grpc", "google.golang.org/protobuf", "github.com/urfave/cli", "github.com/prometheus/",
		"tags.cncf.io/container-device-interface", "go.yaml.in/yaml", "net/http", "github.com/NVIDIA/go-nvml", "runtime/cgo", "crypto/", "regexp")
}
