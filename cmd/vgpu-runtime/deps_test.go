package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
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

// The vgpu-runtime that make builds is static: no dynamic loader runs (and
// no libc, no go-nvml) before it passes a container that asks for no GPU on
// to runc. GPUs are listed by vgpu-discover, beside it.
func TestBuiltStatic(t *testing.T) {
	build := os.Getenv("VGPU_BUILD")
	if build == "" {
		t.Fatal("VGPU_BUILD is not set (make test sets it; run make build first)")
	}
	bin := filepath.Join(build, "bin", "vgpu-runtime")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %v program header: it is linked dynamically (build it with CGO_ENABLED=0)", bin, p.Type)
		}
	}
	if _, err := os.Stat(filepath.Join(build, "bin", "vgpu-discover")); err != nil {
		t.Errorf("no vgpu-discover beside vgpu-runtime: %v", err)
	}
}
