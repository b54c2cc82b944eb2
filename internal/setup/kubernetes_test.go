package setup

import (
	"strings"
	"testing"
)

func TestContainerdKubernetes(t *testing.T) {
	before := []byte("version = 3\n")
	out, err := Containerd(before, ContainerdOptions{RuntimePath: "/usr/bin/vgpu-runtime", Kubernetes: true})
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseTOML(out)
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := ContainerdRuntimePath(3)
	get := func(k ...string) any { v, _ := d.get(append(append([]string(nil), rt...), k...)...); return v }
	if v := get("options", "BinaryName"); v != "/usr/bin/vgpu-runtime" {
		t.Errorf("BinaryName = %v", v)
	}
	ca, _ := get("container_annotations").([]any)
	if len(ca) != 2 || ca[0] != AnnotationPattern || ca[1] != GrantPattern {
		t.Errorf("container_annotations = %v, want [%s %s]\n%s", ca, AnnotationPattern, GrantPattern, out)
	}
	for _, p := range get("pod_annotations").([]any) {
		if strings.HasPrefix(p.(string), "grant.") {
			t.Errorf("pod_annotations holds %v: a pod could forge a grant", p)
		}
	}
	// Idempotent.
	again, err := Containerd(out, ContainerdOptions{RuntimePath: "/usr/bin/vgpu-runtime", Kubernetes: true})
	if err != nil || string(again) != string(out) {
		t.Errorf("second run changed the file (%v):\n%s", err, again)
	}
	// A pod_annotations pattern that lets a pod's grant.vgpu.io/* through is refused.
	bad := string(out) + ""
	bad = strings.Replace(bad, `pod_annotations = ["vgpu.io/*"]`, `pod_annotations = ["vgpu.io/*", "grant.vgpu.io/*"]`, 1)
	if bad == string(out) {
		t.Fatalf("test setup: no pod_annotations line in\n%s", out)
	}
	if _, err := Containerd([]byte(bad), ContainerdOptions{RuntimePath: "/usr/bin/vgpu-runtime", Kubernetes: true}); err == nil || !strings.Contains(err.Error(), "grant.vgpu.io/*") {
		t.Errorf("pod_annotations with grant.vgpu.io/*: err %v, want one naming the pattern", err)
	}
}
