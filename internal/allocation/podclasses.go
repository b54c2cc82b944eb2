package allocation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vgpu-dev/vgpu/internal/atomicfile"
)

// A container's priority in Kubernetes comes from its pod's PriorityClass
// (spec.priorityClassName as the API server holds it), which neither
// Allocate nor the OCI spec carries. The device plugin, at each Allocate,
// lists the pods bound to its node from the API server and writes their
// classes to PodClassesFile, by pod UID, beside the records (only root
// writes there). vgpu-runtime then looks up the pod UID containerd's CRI
// put on the container (SandboxUIDAnnotation; the kubelet's pod UID, which
// the API server chose, not the pod's author) and maps the class through
// the host's kubernetes.priority_classes. The pod's own annotations and
// environment are never read for it.

// PodClassesFile holds pod UID -> PriorityClass name, in the records'
// directory.
const PodClassesFile = "pod-classes.json"

// SandboxUIDAnnotation is the pod UID containerd's CRI puts on every
// container of a pod.
const SandboxUIDAnnotation = "io.kubernetes.cri.sandbox-uid"

// maxPodClassesBytes bounds what the runtime reads (a node's pods, each a
// 36-byte UID and a class name of at most 253 bytes).
const maxPodClassesBytes = 4 << 20

// WritePodClasses replaces dir's pod classes with classes (pod UID ->
// PriorityClass name; pods without a class left out), atomically, 0600.
func WritePodClasses(dir string, classes map[string]string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(classes)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, PodClassesFile), append(data, '\n'), 0o600)
}

// PodClass is the PriorityClass of pod uid as dir's pod classes give it;
// ok is false when the file or the pod is not there. A file not written
// by root is an error.
func PodClass(dir, uid string) (class string, ok bool, err error) {
	if uid == "" {
		return "", false, nil
	}
	p := filepath.Join(dir, PodClassesFile)
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", false, err
	}
	if !fi.Mode().IsRegular() {
		return "", false, fmt.Errorf("%s is not a regular file", p)
	}
	if err := trusted(p, fi); err != nil {
		return "", false, err
	}
	dfi, err := os.Stat(dir)
	if err != nil {
		return "", false, err
	}
	if err := trusted(dir, dfi); err != nil {
		return "", false, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxPodClassesBytes+1))
	if err != nil {
		return "", false, err
	}
	if len(b) > maxPodClassesBytes {
		return "", false, fmt.Errorf("%s: larger than %d bytes", p, maxPodClassesBytes)
	}
	var classes map[string]string
	if err := json.Unmarshal(b, &classes); err != nil {
		return "", false, fmt.Errorf("%s: %w", p, err)
	}
	class, ok = classes[uid]
	return class, ok, nil
}
