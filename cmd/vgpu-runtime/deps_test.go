package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// vgpu-runtime starts for every container of a host where it is the default
// runtime: what it links costs every container its package init and page
// faults. Heavy dependencies of the other binaries stay out of it; it is
// built without cgo (Makefile), as go list sees it here.
func TestNoHeavyDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{"k8s.io/", "google.golang.org/grpc", "google.golang.org/protobuf", "github.com/urfave/cli", "github.com/prometheus/", "tags.cncf.io/container-device-interface", "go.yaml.in/yaml", "net/http", "github.com/NVIDIA/go-nvml", "runtime/cgo", "crypto/", "regexp"} {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("vgpu-runtime links %s (%s…): keep it out of the runtime's start", dep, heavy)
			}
		}
	}
}
