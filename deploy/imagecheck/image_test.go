//go:build integration

// Package imagecheck checks the image `make image` builds (deploy/image) the
// way a user's tools read it, with the standard library only: the tar's
// index.json and manifest.json, the manifest, the config's labels and
// entrypoint, and every file of the layer against the build's. Two builds
// of the same files give the same digest.
package imagecheck

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(wd))
}

func buildDir(t *testing.T) string {
	t.Helper()
	b := os.Getenv("VGPU_BUILD")
	if b == "" {
		t.Fatal("VGPU_BUILD is not set: run make build, then VGPU_BUILD=$PWD/build go test -tags integration ./deploy/imagecheck/")
	}
	return b
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// buildImage runs deploy/image as make image does, into out.
func buildImage(t *testing.T, tool, installer, out string) {
	t.Helper()
	root, b := repoRoot(t), buildDir(t)
	run(t, root, nil, tool, "-bin", filepath.Join(b, "bin"), "-lib", filepath.Join(b, "lib"),
		"-config", filepath.Join(root, "configs/config.toml"), "-installer", installer,
		"-out", out, "-version", "9.9.9-test", "-commit", "0123456789ab")
}

type archive map[string][]byte

func readTar(t *testing.T, r io.Reader) (archive, map[string]*tar.Header) {
	t.Helper()
	files, hdrs := archive{}, map[string]*tar.Header{}
	tr := tar.NewReader(r)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], hdrs[h.Name] = b, h
		names = append(names, h.Name)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("tar entries are not sorted (a reproducible build needs a fixed order): %v", names)
	}
	return files, hdrs
}

func (a archive) json(t *testing.T, name string, v any) {
	t.Helper()
	b, ok := a[name]
	if !ok {
		t.Fatalf("the image tar has no %s", name)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func blob(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

func TestImage(t *testing.T) {
	root, b := repoRoot(t), buildDir(t)
	tmp := t.TempDir()
	tool := filepath.Join(tmp, "image-tool")
	run(t, filepath.Join(root, "deploy/image"), nil, "go", "build", "-o", tool, ".")
	installer := filepath.Join(tmp, "vgpu-install")
	run(t, root, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", installer, "./cmd/vgpu-install")
	out1, out2 := filepath.Join(tmp, "one"), filepath.Join(tmp, "two")
	buildImage(t, tool, installer, out1)
	buildImage(t, tool, installer, out2)

	tar1, err := os.ReadFile(filepath.Join(out1, "vgpu-9.9.9-test.tar"))
	if err != nil {
		t.Fatal(err)
	}
	tar2, _ := os.ReadFile(filepath.Join(out2, "vgpu-9.9.9-test.tar"))
	d1, _ := os.ReadFile(filepath.Join(out1, "digest"))
	d2, _ := os.ReadFile(filepath.Join(out2, "digest"))
	if !bytes.Equal(tar1, tar2) || string(d1) != string(d2) {
		t.Errorf("two builds of the same files differ: digests %q and %q, tars equal: %v", d1, d2, bytes.Equal(tar1, tar2))
	}

	files, hdrs := readTar(t, bytes.NewReader(tar1))
	for name, h := range hdrs {
		if h.ModTime.Unix() != 0 || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mtime %v, owner %d:%d; want 1970 and root", name, h.ModTime, h.Uid, h.Gid)
		}
	}
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	files.json(t, "oci-layout", &layout)
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	files.json(t, "index.json", &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests; want 1", len(index.Manifests))
	}
	m := index.Manifests[0]
	wantRef := "ghcr.io/vgpu-dev/vgpu:9.9.9-test"
	if m.Annotations["io.containerd.image.name"] != wantRef || m.Annotations["org.opencontainers.image.ref.name"] != wantRef {
		t.Errorf("index.json names %v; want %s (ctr images import takes the name from it)", m.Annotations, wantRef)
	}
	if strings.TrimSpace(string(d1)) != m.Digest {
		t.Errorf("the digest file says %s, index.json %s", d1, m.Digest)
	}
	// Every blob is what its name says.
	for name, data := range files {
		if strings.HasPrefix(name, "blobs/sha256/") && !strings.HasSuffix(name, "/") {
			h := sha256.Sum256(data)
			if hex.EncodeToString(h[:]) != strings.TrimPrefix(name, "blobs/sha256/") {
				t.Errorf("%s does not hash to its name", name)
			}
		}
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	files.json(t, blob(m.Digest), &manifest)
	if len(manifest.Layers) != 1 {
		t.Fatalf("%d layers; want 1", len(manifest.Layers))
	}
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	files.json(t, "manifest.json", &docker)
	if len(docker) != 1 || docker[0].Config != blob(manifest.Config.Digest) || len(docker[0].Layers) != 1 ||
		docker[0].Layers[0] != blob(manifest.Layers[0].Digest) || len(docker[0].RepoTags) != 1 || docker[0].RepoTags[0] != wantRef {
		t.Errorf("manifest.json (docker load, podman load) = %+v; want the OCI manifest's config and layer, tagged %s", docker, wantRef)
	}
	var config struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			Entrypoint []string          `json:"Entrypoint"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
	}
	files.json(t, blob(manifest.Config.Digest), &config)
	if config.Architecture != runtime.GOARCH || config.OS != "linux" {
		t.Errorf("platform %s/%s; want linux/%s", config.OS, config.Architecture, runtime.GOARCH)
	}
	if got := config.Config.Labels; got["org.opencontainers.image.version"] != "9.9.9-test" || got["org.opencontainers.image.revision"] != "0123456789ab" {
		t.Errorf("labels %v; want the version and the commit", got)
	}
	if strings.Join(config.Config.Entrypoint, " ") != "/vgpu-install" {
		t.Errorf("entrypoint %v; want /vgpu-install", config.Config.Entrypoint)
	}

	// The layer: exactly these files, each the build's.
	zr, err := gzip.NewReader(bytes.NewReader(files[blob(manifest.Layers[0].Digest)]))
	if err != nil {
		t.Fatal(err)
	}
	layer, lhdrs := readTar(t, zr)
	want := map[string]string{
		"vgpu-install":        installer,
		"payload/config.toml": filepath.Join(root, "configs/config.toml"),
	}
	for _, bin := range []string{"vgpu-runtime", "vgpu-hook", "vgpu", "vgpu-node", "vgpu-discover"} {
		want["payload/bin/"+bin] = filepath.Join(b, "bin", bin)
	}
	for _, lib := range []string{"libvgpu-cuda.so", "libvgpu-nvml.so"} {
		want["payload/lib/"+lib] = filepath.Join(b, "lib", lib)
	}
	for name, src := range want {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(layer[name], data) {
			t.Errorf("the image's %s is not %s", name, src)
		}
		if exe := name != "payload/config.toml"; exe != (lhdrs[name].FileInfo().Mode()&0o111 != 0) {
			t.Errorf("%s: mode %v", name, lhdrs[name].FileInfo().Mode())
		}
	}
	for name, h := range lhdrs {
		if _, ok := want[name]; !ok && h.Typeflag != tar.TypeDir {
			t.Errorf("the image holds %s, which nothing asked for", name)
		}
	}
	// The installer runs from the image on any node: static, no interpreter.
	f, err := elf.NewFile(bytes.NewReader(layer["vgpu-install"]))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("vgpu-install in the image is dynamically linked; it must be static (CGO_ENABLED=0)")
		}
	}
}
