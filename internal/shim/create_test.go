package shim

import (
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/pipeline"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

func TestPlanOfAlreadyEditedSpec(t *testing.T) {
	s, err := spec.Parse([]byte(`{"ociVersion":"1.0.2","process":{"env":["VGPU_MEMORY_LIMIT=1Gi","VGPU_VISIBLE_DEVICES=0"]},"annotations":{"vgpu.io/injected":"first"}}`))
	if err != nil {
		t.Fatal(err)
	}
	// The same container again (a retried create): nothing more to do.
	if done, err := pipeline.Edited(s, "first"); !done || err != nil {
		t.Errorf("same id: done %v, err %v; want nothing to do", done, err)
	}
	// Another container on a bundle edited for the first: its mounts are the first's.
	_, err = pipeline.Edited(s, "second")
	if err == nil || !strings.Contains(err.Error(), "already edited by vgpu for container first") {
		t.Errorf("other id: err %v, want a refusal naming the first container", err)
	}
}

func TestPlanNoRequest(t *testing.T) {
	s, err := spec.Parse([]byte(`{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if req, err := pipeline.FromSpec(s, config.Default()); req != nil || err != nil {
		t.Errorf("request %v, err %v; want nil, nil for a container that asks for nothing", req, err)
	}
}
