//go:build integration

package allocation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir string, r *Record) {
	t.Helper()
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
}

func TestForContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("grants are trusted only when root owns them: run as root (make test does)")
	}
	dir := filepath.Join(t.TempDir(), "grants")
	m, _ := NewID()
	c, _ := NewID()
	write(t, dir, &Record{ID: m, Resource: ResourceMemory, GPUUUID: "GPU-1", Units: 3, MemoryBytes: 3 << 30})
	write(t, dir, &Record{ID: c, Resource: ResourceCores, GPUUUID: "GPU-1", Units: 30, ComputePercent: 30})

	req, err := ForContainer(dir, map[string]string{AnnotationKey(ResourceMemory): m, AnnotationKey(ResourceCores): c, "vgpu.io/memory-limit": "100Gi"})
	if err != nil {
		t.Fatal(err)
	}
	if req.MemoryBytes != 3<<30 || req.ComputePercent != 30 || req.UUID != "GPU-1" {
		t.Fatalf("request %+v", req)
	}
	if req, err := ForContainer(dir, map[string]string{"vgpu.io/memory-limit": "100Gi", "vgpu.io/visible-devices": "all"}); req != nil || err != nil {
		t.Fatalf("no grant annotation: %+v, %v; want no GPU", req, err)
	}
	bad := map[string]string{
		"unknown ID":       strings.Repeat("a", 32),
		"not an ID":        "../../etc/passwd",
		"other resource's": c, // a cores grant named as memory
	}
	for what, id := range bad {
		if req, err := ForContainer(dir, map[string]string{AnnotationKey(ResourceMemory): id}); err == nil {
			t.Errorf("%s grant %q: %+v, want an error", what, id, req)
		}
	}
	// A record root did not write (group-writable, or owned by someone else) is refused.
	p := filepath.Join(dir, m+".json")
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := ForContainer(dir, map[string]string{AnnotationKey(ResourceMemory): m}); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Errorf("world-writable grant: %v", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := ForContainer(dir, map[string]string{AnnotationKey(ResourceMemory): m}); err == nil || !strings.Contains(err.Error(), "owned by uid 1000") {
		t.Errorf("grant owned by uid 1000: %v", err)
	}
}

// FuzzForContainer: annotations are the pod's side of the channel; whatever they
// hold, ForContainer never grants anything without a record in the directory.
func FuzzForContainer(f *testing.F) {
	f.Add("grant.vgpu.io/memory", strings.Repeat("0", 32))
	f.Add("grant.vgpu.io/cores", "../x")
	f.Add("vgpu.io/memory-limit", "100Gi")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, k, v string) {
		req, err := ForContainer(dir, map[string]string{k: v})
		if req != nil {
			t.Fatalf("%s=%q granted %+v from an empty grant directory", k, v, req)
		}
		_ = err
	})
}
