package setup

import (
	"fmt"
	"path"

	"github.com/vgpu-dev/vgpu/internal/grant"
)

// GrantPattern lets the device plugin's grant annotations (grant.vgpu.io/*),
// which the kubelet puts on the container's CRI config, through to
// vgpu-runtime. It must be in container_annotations and must match nothing in
// pod_annotations: containerd copies a pod's own annotations into the
// container's spec when pod_annotations matches them, and a pod could then
// name a grant that is not its own.
const GrantPattern = grant.AnnotationPrefix + "*"

// annotationSettings returns the runtime class's pod_annotations and
// container_annotations: vgpu.io/* in both (the annotations of Docker-style
// use; in Kubernetes mode vgpu-runtime ignores them), and with kubernetes
// also grant.vgpu.io/* in container_annotations, after checking that no
// pod_annotations pattern lets a pod's annotation of that name through.
func annotationSettings(d *tomlDoc, at func(...string) []string, kubernetes bool) ([]tomlSetting, error) {
	var out []tomlSetting
	if v, ok := withPattern(d, at("pod_annotations")); ok {
		out = append(out, tomlSetting{at("pod_annotations"), v})
	}
	if kubernetes {
		if v, ok := d.get(at("pod_annotations")...); ok {
			list, _ := v.([]any)
			for _, x := range list {
				p, _ := x.(string)
				if m, _ := path.Match(p, grant.AnnotationKey(grant.ResourceMemory)); m {
					return nil, fmt.Errorf("pod_annotations of the vgpu runtime class holds %q, which lets a pod's own %s annotation reach vgpu-runtime as if it were a grant; remove that pattern (vgpu needs only %q there)", p, GrantPattern, AnnotationPattern)
				}
			}
		}
	}
	list := []string{}
	if v, ok := d.get(at("container_annotations")...); ok {
		l, ok := v.([]any)
		if !ok {
			return out, nil // not a list: leave it to the user (containerd will complain)
		}
		for _, x := range l {
			s, ok := x.(string)
			if !ok {
				return out, nil
			}
			list = append(list, s)
		}
	}
	changed := false
	for _, want := range []string{AnnotationPattern, GrantPattern} {
		if want == GrantPattern && !kubernetes {
			continue
		}
		have := false
		for _, s := range list {
			if m, _ := path.Match(s, want); m || s == want {
				have = true
			}
		}
		if !have {
			list = append(list, want)
			changed = true
		}
	}
	if changed {
		out = append(out, tomlSetting{at("container_annotations"), list})
	}
	return out, nil
}
