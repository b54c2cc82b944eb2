//go:build integration

package hook

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

// A Kubernetes container that got a vgpu.io/gpu CDI device is held to the
// device plugin's grant, never to the limits it sets itself; without a grant
// (or with one for another GPU) it is refused.
func TestCDIRequestKubernetesGrantsOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("grants are trusted only when root owns them: run as root (make test does)")
	}
	host := cdiHost()
	gpus := host.GPUs[:1]
	cfg := config.Default()
	cfg.Kubernetes.GrantDir = filepath.Join(t.TempDir(), "grants")
	tmpl := `{"ociVersion":"1.2.0","process":{"env":["VGPU_MEMORY_LIMIT=100Gi"]},
	  "annotations":{"io.kubernetes.cri.container-type":"container","vgpu.io/memory-limit":"100Gi"%s}}`
	parse := func(extra string) *spec.Spec {
		s, err := spec.Parse([]byte(fmt.Sprintf(tmpl, extra)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if req, err := cdiRequestOf(parse(""), cfg, host, gpus); err == nil || !strings.Contains(err.Error(), "no vgpu device plugin grant") {
		t.Fatalf("CDI GPU, no grant: %+v, %v; want a refusal", req, err)
	}
	mine, _ := allocation.NewID()
	other, _ := allocation.NewID()
	for id, g := range map[string]string{mine: gpus[0].UUID, other: host.GPUs[1].UUID} {
		if err := allocation.Write(cfg.Kubernetes.GrantDir, &allocation.Record{ID: id, Resource: allocation.ResourceMemory, GPUUUID: g, Units: 3, MemoryBytes: 3 << 30}); err != nil {
			t.Fatal(err)
		}
	}
	req, err := cdiRequestOf(parse(`,"grant.vgpu.io/memory":"`+mine+`"`), cfg, host, gpus)
	if err != nil || req.Memory.For(0) != 3<<30 || len(req.Devices) != 1 || req.Devices[0].UUID != gpus[0].UUID {
		t.Fatalf("granted CDI container: %+v, %v; want 3 GiB on %s", req, err, gpus[0].UUID)
	}
	if req, err := cdiRequestOf(parse(`,"grant.vgpu.io/memory":"`+other+`"`), cfg, host, gpus); err == nil {
		t.Fatalf("grant for another GPU: %+v; want a refusal", req)
	}
	// grants_only = false: the container's own limits, as outside Kubernetes.
	cfg.Kubernetes.GrantsOnly = false
	if req, err := cdiRequestOf(parse(""), cfg, host, gpus); err != nil || req.Memory.For(0) != 100<<30 {
		t.Fatalf("grants_only=false: %+v, %v; want the annotation's 100Gi", req, err)
	}
}
