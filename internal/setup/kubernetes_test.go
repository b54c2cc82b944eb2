package setup

import (
	"slices"
	"strings"
	"testing"
)

func TestContainerdKubernetes(t *testing.T) {
	before := []byte("version = 3\n")
	o := ContainerdOptions{RuntimePath: "/usr/bin/vgpu-runtime", Kubernetes: true}
	out, dropIn, err := Containerd(before, testDropIn, o)
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseTOMLDoc(dropIn)
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := ContainerdRuntimePath(3)
	get := func(k ...string) any { return lookup(d, append(append([]string(nil), rt...), k...)...) }
	if v := get("options", "BinaryName"); v != "/usr/bin/vgpu-runtime" {
		t.Errorf("BinaryName = %v", v)
	}
	ca, _ := get("container_annotations").([]any)
	if len(ca) != 2 || ca[0] != AnnotationPattern || ca[1] != GrantPattern {
		t.Errorf("container_annotations = %v, want [%s %s]\n%s", ca, AnnotationPattern, GrantPattern, dropIn)
	}
	for _, p := range get("pod_annotations").([]any) {
		if strings.HasPrefix(p.(string), "grant.") {
			t.Errorf("pod_annotations holds %v: a pod could forge a grant", p)
		}
	}
	// Idempotent.
	again, again2, err := Containerd(out, testDropIn, o)
	if err != nil || string(again) != string(out) || string(again2) != string(dropIn) {
		t.Errorf("second run changed the files (%v):\n%s\n%s", err, again, again2)
	}
	// A pod_annotations pattern of config.toml's own vgpu runtime class that
	// lets a pod's grant.vgpu.io/* through is refused (containerd 2.x merges
	// it with the drop-in's).
	bad := string(out) + "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.vgpu]\npod_annotations = [\"vgpu.io/*\", \"grant.vgpu.io/*\"]\n"
	if _, _, err := Containerd([]byte(bad), testDropIn, o); err == nil || !strings.Contains(err.Error(), "grant.vgpu.io/*") {
		t.Errorf("pod_annotations with grant.vgpu.io/*: err %v, want one naming the pattern", err)
	}
	if list, _, _, _, _ := importsOf(out); !slices.Contains(list, testDropIn) {
		t.Errorf("imports %v", list)
	}
}
