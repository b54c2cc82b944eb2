package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/google/renameio/v2"
	"github.com/vgpu-dev/vgpu/internal/config"
)

// PodsFile is <state_dir>/.node/pods.json: which Kubernetes pod each
// container of the state directory belongs to, as the kubelet's
// PodResources API named it (vgpu node writes it, internal/node/podres;
// `vgpu status` and the metrics read it). A JSON object from container id to
// Pod, rewritten whole (atomically) whenever it changes; containers that left
// the state directory are dropped from it.
const PodsFile = "pods.json"

// MaxPodField bounds each name (Kubernetes allows 253 bytes for a pod name,
// 63 for a namespace or container name); longer ones are cut.
const MaxPodField = 253

// maxPodsBytes bounds what a reader takes in.
const maxPodsBytes = 8 << 20

// Pod names the Kubernetes container a vgpu container is.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"pod"`
	Container string `json:"container"`
}

// Clean returns p with every field valid UTF-8 and at most MaxPodField
// bytes: the names come from the tenant's pod spec (through the kubelet).
func (p Pod) Clean() Pod {
	return Pod{Namespace: clip(p.Namespace), Name: clip(p.Name), Container: clip(p.Container)}
}

func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxPodField {
		return s
	}
	s = s[:MaxPodField]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// WritePods replaces pods.json with pods (mode 0644, temp file and rename).
func WritePods(stateDir string, pods map[string]Pod) error {
	dir := filepath.Join(stateDir, config.StateNode)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	clean := make(map[string]Pod, len(pods))
	for id, p := range pods {
		clean[id] = p.Clean()
	}
	b, err := json.MarshalIndent(clean, "", "  ")
	if err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(dir, PodsFile), append(b, '\n'), privateMode)
}

// ReadPods reads pods.json: an empty map when there is none.
func ReadPods(stateDir string) (map[string]Pod, error) {
	path := filepath.Join(stateDir, config.StateNode, PodsFile)
	b, err := readLimited(path, maxPodsBytes+1)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]Pod{}, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) > maxPodsBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxPodsBytes)
	}
	pods := map[string]Pod{}
	if err := json.Unmarshal(b, &pods); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for id, p := range pods {
		pods[id] = p.Clean()
	}
	return pods, nil
}
