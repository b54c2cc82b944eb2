package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// vgpu (exec, status, setup, cdi) starts as fast as a small Go program: the
// package initialisers of Kubernetes, gRPC and Prometheus, and an HTTP
// server, belong to vgpu-node, which `vgpu node` execs.
func TestNoHeavyDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{"k8s.io/", "sigs.k8s.io/", "google.golang.org/grpc", "google.golang.org/protobuf", "github.com/prometheus/", "net/http", "github.com/vgpu-dev/vgpu/internal/nodeapp", "github.com/vgpu-dev/vgpu/internal/node/daemon"} {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("vgpu links %s (%s…): it belongs to vgpu-node", dep, heavy)
			}
		}
	}
}
