package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/spec"
)

// docker's name comes from its config.v2.json beside the /etc/hostname it
// mounts; another container's directory, or none, gives no name.
func TestEngineNameDocker(t *testing.T) {
	root := t.TempDir()
	id := "3f4e5d6c7b8a93f4e5d6c7b8a93f4e5d6c7b8a93f4e5d6c7b8a93f4e5d6c7b8a"
	cdir := filepath.Join(root, "containers", id)
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, "hostname"), []byte("3f4e5d6c7b8a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, "config.v2.json"), []byte(`{"ID":"`+id+`","Name":"/web","Config":{"Labels":{}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(t *testing.T, mounts string, ann string) *spec.Spec {
		t.Helper()
		b := t.TempDir()
		doc := fmt.Sprintf(`{"ociVersion":"1.0.2","process":{"env":[]},"root":{"path":"rootfs"},"mounts":%s,"annotations":{%s}}`, mounts, ann)
		if err := os.WriteFile(filepath.Join(b, "config.json"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := spec.LoadBundle(b)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hostname := fmt.Sprintf(`[{"destination":"/etc/hostname","source":%q,"type":"bind"}]`, filepath.Join(cdir, "hostname"))
	for _, tc := range []struct {
		name, mounts, ann, id, want string
	}{
		{"docker", hostname, "", id, "web"},
		{"another container's directory", hostname, "", "0123", ""},
		{"no hostname mount", "[]", "", id, ""},
		{"annotations first", hostname, `"nerdctl/name":"api"`, id, "api"},
	} {
		if got := EngineName(load(t, tc.mounts, tc.ann), tc.id); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// podman's name comes from containers/storage's containers.json two
// directories above its bundle <graphroot>/overlay-containers/<id>/userdata
// (what podman 4.3.1 passes), only for a container podman manages, only for
// its own id.
func TestEngineNamePodman(t *testing.T) {
	root := t.TempDir()
	id := "ff19f00ca3c20c2d6593acf4b513ef0309be64b6f78dceee03e37e6451086fe4"
	cdirs := filepath.Join(root, "overlay-containers")
	bundle := filepath.Join(cdirs, id, "userdata")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	list := `[{"id":"0123","names":["other"]},{"id":"` + id + `","names":["train"],"metadata":"{\"name\":\"train\"}"}]`
	if err := os.WriteFile(filepath.Join(cdirs, "containers.json"), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdirs, "volatile-containers.json"), []byte(`[{"id":"abcd","names":["quick"]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(t *testing.T, ann string) *spec.Spec {
		t.Helper()
		doc := fmt.Sprintf(`{"ociVersion":"1.0.2","process":{"env":[]},"root":{"path":"rootfs"},"annotations":{%s}}`, ann)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := spec.LoadBundle(bundle)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	libpod := `"io.container.manager":"libpod","io.podman.annotations.autoremove":"FALSE"`
	for _, tc := range []struct {
		name, ann, id, want string
	}{
		{"podman", libpod, id, "train"},
		{"not podman's", "", id, ""},
		{"another id", libpod, "0123", ""},
	} {
		if got := EngineName(load(t, tc.ann), tc.id); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if err := os.Rename(filepath.Join(cdirs, "containers.json"), filepath.Join(cdirs, "x")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdirs, "volatile-containers.json"), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := EngineName(load(t, libpod), id); got != "train" {
		t.Errorf("from volatile-containers.json: %q, want train", got)
	}
}

// containers.json is the engine's file, but its names are what users
// typed: whatever it holds, the name printed is short and has no control
// characters.
func FuzzPodmanName(f *testing.F) {
	f.Add([]byte(`[{"id":"c1","names":["train"]}]`))
	f.Add([]byte(`[{"id":"c1","names":["a\u001b[2Jb"]}]`))
	f.Add([]byte(`[{"id":"c1","names":[]},{"id":"c1"}]`))
	f.Add([]byte(`{"id":"c1"}`))
	f.Fuzz(func(t *testing.T, list []byte) {
		cdirs := t.TempDir()
		bundle := filepath.Join(cdirs, "c1", "userdata")
		if err := os.MkdirAll(bundle, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cdirs, "containers.json"), list, 0o644); err != nil {
			t.Fatal(err)
		}
		name := podmanName(bundle, "c1")
		if len(name) > 128 || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Errorf("name %q", name)
		}
	})
}
