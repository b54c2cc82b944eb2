package main

import (
	"testing"

	"github.com/vgpu-dev/vgpu/internal/depcheck"
)

// vgpu (exec, status, setup, cdi) starts as fast as a small Go program: the
// package initialisers of Kubernetes, gRPC and Prometheus, and an HTTP
// server, belong to vgpu-node, which `vgpu node` execs.
func TestNoHeavyDependencies(t *testing.T) {
	depcheck.Forbid(t, true, "it belongs to vgpu-node",
		"k8s.io/", "sigs.k8s.io/", "google.golang.org/grpc", "google.golang.org/protobuf", "github.com/prometheus/", "net/http",
		"github.com/vgpu-dev/vgpu/internal/nodeapp", "github.com/vgpu-dev/vgpu/internal/node/daemon")
}
