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

// A device-plugin container's priority is its pod's PriorityClass through
// the host's kubernetes.priority_classes: the pod's own VGPU_PRIORITY and
// vgpu.io/priority give nothing; a class the table does not list, a pod
// the device plugin did not list, or no table: defaults.priority; a pod
// classes file someone else than root could write: refused.
func TestKubernetesPriorityFromClass(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("grants are trusted only when root owns them: run as root (make test does)")
	}
	cfg := config.Default()
	cfg.Kubernetes.GrantDir = filepath.Join(t.TempDir(), "grants")
	cfg.Kubernetes.PriorityClasses = map[string]string{"online": "high", "batch": "low"}
	id, _ := allocation.NewID()
	if err := allocation.Write(cfg.Kubernetes.GrantDir, &allocation.Record{ID: id, Resource: allocation.ResourceCores, GPUUUID: "GPU-1", Units: 30, ComputePercent: 30}); err != nil {
		t.Fatal(err)
	}
	if err := allocation.WritePodClasses(cfg.Kubernetes.GrantDir, map[string]string{"uid-online": "online", "uid-batch": "batch", "uid-other": "other"}); err != nil {
		t.Fatal(err)
	}
	// The pod asks for high itself, in env and annotation.
	const pod = `{"ociVersion":"1.0.2","process":{"env":["VGPU_PRIORITY=high"]},
	  "annotations":{"io.kubernetes.cri.container-type":"container","vgpu.io/priority":"high","grant.vgpu.io/cores":"%s","io.kubernetes.cri.sandbox-uid":"%s"}}`
	prioOf := func(uid string) (string, error) {
		s, err := spec.Parse([]byte(fmt.Sprintf(pod, id, uid)))
		if err != nil {
			t.Fatal(err)
		}
		req, err := FromSpec(s, cfg)
		if err != nil {
			return "", err
		}
		return req.PriorityFor(0), nil
	}
	for _, tc := range []struct{ uid, want string }{
		{"uid-online", "high"},
		{"uid-batch", "low"},
		{"uid-other", ""},   // a class not in the table
		{"uid-unknown", ""}, // a pod the plugin did not list
		{"", ""},            // no pod UID
	} {
		if got, err := prioOf(tc.uid); err != nil || got != tc.want {
			t.Errorf("pod %q: priority %q, %v; want %q (\"\": defaults.priority)", tc.uid, got, err, tc.want)
		}
	}
	cfg.Kubernetes.PriorityClasses = nil
	if got, err := prioOf("uid-online"); err != nil || got != "" {
		t.Errorf("no table: priority %q, %v; want defaults.priority", got, err)
	}
	cfg.Kubernetes.PriorityClasses = map[string]string{"online": "high"}
	if err := os.Chown(filepath.Join(cfg.Kubernetes.GrantDir, allocation.PodClassesFile), 1000, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := prioOf("uid-online"); err == nil || !strings.Contains(err.Error(), "not root") {
		t.Errorf("pod classes written by uid 1000: %v, want refused", err)
	}
}
