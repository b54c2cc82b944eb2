package dra

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

func readManifest(t *testing.T, name string, obj any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", "k8s", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("configs/k8s/%s: %v", name, err)
	}
}

// The example manifests decode into the API types without unknown fields
// and use the driver's names: the class selects this driver, the template
// asks for its capacities, the pod's containers name the template's claim.
func TestManifests(t *testing.T) {
	var class resourceapi.DeviceClass
	readManifest(t, "dra-deviceclass.yaml", &class)
	if class.Name != DriverName || len(class.Spec.Selectors) != 1 || class.Spec.Selectors[0].CEL == nil ||
		class.Spec.Selectors[0].CEL.Expression != `device.driver == "`+DriverName+`"` {
		t.Errorf("DeviceClass %+v: want %s selecting device.driver == %q", class, DriverName, DriverName)
	}
	var share resourceapi.DeviceClass
	readManifest(t, "dra-deviceclass-share.yaml", &share)
	if share.Spec.ExtendedResourceName == nil || *share.Spec.ExtendedResourceName != "vgpu.io/share" || len(share.Spec.Selectors) != 1 ||
		share.Spec.Selectors[0].CEL == nil || share.Spec.Selectors[0].CEL.Expression != class.Spec.Selectors[0].CEL.Expression {
		t.Errorf("DeviceClass %s: want extendedResourceName vgpu.io/share and the selector of %s", share.Name, class.Name)
	}
	var tmpl resourceapi.ResourceClaimTemplate
	readManifest(t, "dra-claimtemplate.yaml", &tmpl)
	reqs := tmpl.Spec.Spec.Devices.Requests
	if len(reqs) != 1 || reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != class.Name || reqs[0].Exactly.Capacity == nil {
		t.Fatalf("template requests %+v", reqs)
	}
	caps := reqs[0].Exactly.Capacity.Requests
	mem, cores := caps[CapacityMemory], caps[CapacityCores]
	if len(caps) != 2 || mem.Value() != 8<<30 || cores.Value() != 30 {
		t.Errorf("template capacity %v: want memory 8Gi, cores 30", caps)
	}
	var pod corev1.Pod
	readManifest(t, "dra-example-pod.yaml", &pod)
	if len(pod.Spec.ResourceClaims) != 1 || pod.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil || *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName != tmpl.Name {
		t.Errorf("pod claims %+v: want one from template %s", pod.Spec.ResourceClaims, tmpl.Name)
	}
	for _, c := range pod.Spec.Containers {
		if len(c.Resources.Claims) != 1 || c.Resources.Claims[0].Name != pod.Spec.ResourceClaims[0].Name {
			t.Errorf("container %s claims %+v", c.Name, c.Resources.Claims)
		}
	}
	b, _ := os.ReadFile(filepath.Join("..", "..", "configs", "k8s", "dra-node-daemonset.yaml"))
	if !strings.Contains(string(b), `"--dra"`) {
		t.Error("dra-node-daemonset.yaml does not run vgpu node --dra")
	}
}
