package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/spec"
)

// docker's name comes from its config.v2.json beside the /etc/hostname it
// mounts; another container's directory, or none, gives no name.
func TestEngineNameDocker(t *testing.T) {
	root := t.TempDir()
	id := "3f4e5d6c7b8a93f4e5d6c7b8a93f4e5d6c7b8a93f4e5d6c7b8a93f4e5d6c7b8a"
	cdir := filepath.Join(root, "containers", id)
	os.MkdirAll(cdir, 0o755)
	os.WriteFile(filepath.Join(cdir, "hostname"), []byte("3f4e5d6c7b8a\n"), 0o644)
	os.WriteFile(filepath.Join(cdir, "config.v2.json"), []byte(`{"ID":"`+id+`","Name":"/web","Config":{"Labels":{}}}`), 0o644)
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
