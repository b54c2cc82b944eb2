package setup

import (
	"fmt"
	"path"

	"github.com/vgpu-dev/vgpu/internal/allocation"
)

// GrantPattern lets the device plugin's grant annotations (grant.vgpu.io/*),
// which the kubelet puts on the container's CRI config, through to
// vgpu-runtime. It must be in container_annotations and must match nothing in
// pod_annotations: containerd copies a pod's own annotations into the
// container's spec when pod_annotations matches them, and a pod could then
// name a grant that is not its own.
const GrantPattern = allocation.AnnotationPrefix + "*"

// annotations sets the runtime class's pod_annotations and
// container_annotations in rt: vgpu.io/* in both (the annotations of
// Docker-style use; in Kubernetes mode vgpu-runtime ignores them), and with
// kubernetes also grant.vgpu.io/* in container_annotations. A
// pod_annotations pattern in config.toml's own vgpu runtime class (doc, at
// rtPath) that would let a pod's annotation of that name through is refused.
func annotations(doc map[string]any, rtPath []string, rt map[string]any, kubernetes bool) error {
	if kubernetes {
		list, _ := lookup(doc, append(append([]string(nil), rtPath...), "pod_annotations")...).([]any)
		for _, x := range list {
			p, _ := x.(string)
			if m, _ := path.Match(p, allocation.AnnotationKey(allocation.ResourceMemory)); m {
				return fmt.Errorf("pod_annotations of the vgpu runtime class holds %q, which lets a pod's own %s annotation reach vgpu-runtime as if it were a grant; remove that pattern (vgpu needs only %q there)", p, GrantPattern, AnnotationPattern)
			}
		}
	}
	rt["pod_annotations"] = []string{AnnotationPattern}
	ca := []string{AnnotationPattern}
	if kubernetes {
		ca = append(ca, GrantPattern)
	}
	rt["container_annotations"] = ca
	return nil
}
