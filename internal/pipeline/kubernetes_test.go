//go:build integration

package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/allocation"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// In Kubernetes mode a CRI container's own annotations and env grant nothing;
// a grant the device plugin wrote grants exactly what it says.
func TestRequestKubernetesGrantsOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("grants are trusted only when root owns them: run as root (make test does)")
	}
	cfg := config.Default()
	cfg.Kubernetes.GrantDir = filepath.Join(t.TempDir(), "grants")
	forged := `{"ociVersion":"1.0.2","process":{"env":["NVIDIA_VISIBLE_DEVICES=all","VGPU_MEMORY_LIMIT=100Gi"]},
	  "annotations":{"io.kubernetes.cri.container-type":"container","vgpu.io/visible-devices":"all","vgpu.io/memory-limit":"100Gi"%s}}`
	s, err := spec.Parse([]byte(fmt.Sprintf(forged, "")))
	if err != nil {
		t.Fatal(err)
	}
	if req, err := FromSpec(s, cfg); req != nil || err != nil {
		t.Fatalf("CRI container with only its own annotations: %+v, %v; want no GPU", req, err)
	}
	id, _ := allocation.NewID()
	if err := allocation.Write(cfg.Kubernetes.GrantDir, &allocation.Record{ID: id, Resource: allocation.ResourceMemory, GPUUUID: "GPU-1", Units: 3, MemoryBytes: 3 << 30}); err != nil {
		t.Fatal(err)
	}
	s, err = spec.Parse([]byte(fmt.Sprintf(forged, `,"grant.vgpu.io/memory":"`+id+`"`)))
	if err != nil {
		t.Fatal(err)
	}
	req, err := FromSpec(s, cfg)
	if err != nil || req == nil || req.Memory.For(0) != 3<<30 || req.MemoryRequest.For(0) != 3<<30 || req.All || len(req.Devices) != 1 {
		t.Fatalf("granted container: %+v, %v; want 3 GiB on GPU-1 only, its request and its limit", req, err)
	}
	// vgpu.io/memory is the request; kubernetes.memory_limit sets the limit,
	// never the pod: none (the limit of any request-only tenant), a size
	// (at least the request), one that does not parse (refused, naming it).
	for _, tc := range []struct {
		policy     string
		limit, req uint64
		err        string
	}{{config.MemoryLimitNone, 0, 3 << 30, ""}, {"8Gi", 8 << 30, 3 << 30, ""}, {"1Gi", 3 << 30, 3 << 30, ""}, {"8 GiB", 0, 0, `"8 GiB"`}} {
		cfg.Kubernetes.MemoryLimit = tc.policy
		req, err := FromSpec(s, cfg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("memory_limit %q: %+v, %v; want an error naming it", tc.policy, req, err)
			}
			continue
		}
		if err != nil || req == nil || req.Memory.For(0) != tc.limit || req.MemoryRequest.For(0) != tc.req {
			t.Errorf("memory_limit %q: %+v, %v; want limit %d, request %d", tc.policy, req, err, tc.limit, tc.req)
		}
	}
	cfg.Kubernetes.MemoryLimit = config.MemoryLimitRequest
	// grants_only = false: the old annotation path.
	cfg.Kubernetes.GrantsOnly = false
	if req, err := FromSpec(s, cfg); err != nil || req == nil || req.Memory.For(0) != 100<<30 {
		t.Fatalf("grants_only=false: %+v, %v; want the annotation's 100Gi", req, err)
	}
}
