//go:build integration

package main

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

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
