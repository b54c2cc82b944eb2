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
// top: the annotations' (ContainerName), else podman's or docker's. Docker
// passes no name to the runtime, but mounts /etc/hostname from its own
// directory for the container, <data-root>/containers/<id>/hostname, beside
// the config.v2.json that holds the name ("/web" for docker run --name web).
// Podman passes none either (its annotations name only the manager,
// "io.container.manager": "libpod"); see podmanName. "" when none says.
func EngineName(s *spec.Spec, id string) string {
	ann := s.Annotations()
	if n := ContainerName(ann); n != "" {
		return n
	}
	if ann["io.container.manager"] == "libpod" {
		return podmanName(s.Bundle(), id)
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
	return cleanName(strings.TrimPrefix(c.Name, "/"))
}

// podmanName reads podman's name for container id from containers/storage's
// list of containers: podman's bundle is <graphroot>/<driver>-containers/
// <id>/userdata, and that list (containers.json, or volatile-containers.json
// for a --rm container of a newer storage library) sits two directories up,
// each entry an id and its names.
func podmanName(bundle, id string) string {
	if filepath.Base(bundle) != "userdata" || filepath.Base(filepath.Dir(bundle)) != id {
		return ""
	}
	dir := filepath.Dir(filepath.Dir(bundle))
	for _, list := range []string{"containers.json", "volatile-containers.json"} {
		f, err := os.Open(filepath.Join(dir, list))
		if err != nil {
			continue
		}
		var cs []struct {
			ID    string   `json:"id"`
			Names []string `json:"names"`
		}
		err = json.NewDecoder(io.LimitReader(f, 64<<20)).Decode(&cs)
		f.Close()
		if err != nil {
			continue
		}
		for _, c := range cs {
			if c.ID == id && len(c.Names) > 0 {
				return cleanName(c.Names[0])
			}
		}
	}
	return ""
}

// cleanName: an engine's name as status prints it, or "" when it is too
// long or holds control characters (it goes to a terminal).
func cleanName(name string) string {
	if len(name) > 128 || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return ""
	}
	return name
}
