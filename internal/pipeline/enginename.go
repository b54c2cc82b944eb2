package pipeline

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/spec"
)

// EngineName is the name the user gave the container, for vgpu status and
// top: the annotations' (ContainerName), else docker's. Docker passes no
// name to the runtime, but mounts /etc/hostname from its own directory for
// the container, <data-root>/containers/<id>/hostname, beside the
// config.v2.json that holds the name ("/web" for docker run --name web).
// "" when neither says.
func EngineName(s *spec.Spec, id string) string {
	if n := ContainerName(s.Annotations()); n != "" {
		return n
	}
	mounts, err := s.Mounts()
	if err != nil {
		return ""
	}
	for _, m := range mounts {
		if m.Destination != "/etc/hostname" || filepath.Base(m.Source) != "hostname" || filepath.Base(filepath.Dir(m.Source)) != id {
			continue
		}
		return dockerName(filepath.Join(filepath.Dir(m.Source), "config.v2.json"))
	}
	return ""
}

// dockerName reads Name from docker's config.v2.json (the engine's file,
// outside every container), without its leading slash.
func dockerName(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var c struct{ Name string }
	if err := json.NewDecoder(io.LimitReader(f, 4<<20)).Decode(&c); err != nil {
		return ""
	}
	name := strings.TrimPrefix(c.Name, "/")
	if len(name) > 128 || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return ""
	}
	return name
}
