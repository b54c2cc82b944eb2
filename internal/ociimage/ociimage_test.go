package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func rootfsTar(t *testing.T, dir string) (string, string) {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range []struct{ name, body string }{{"bin/hello", "#!/bin/sh\necho hi\n"}, {"etc/passwd", "root:x:0:0:root:/:/bin/sh\n"}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o755, Size: int64(len(f.body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "rootfs.tar")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b.Bytes())
	return p, "sha256:" + hex.EncodeToString(sum[:])
}

var testConfig = Config{Architecture: "amd64", OS: "linux", Env: []string{DefaultPath}}

// What an engine reads back: one tag, the layer as given (its diff ID the
// input's digest), the platform and the environment; the same bytes twice.
func TestWriteArchive(t *testing.T) {
	dir := t.TempDir()
	in, diffID := rootfsTar(t, dir)
	img, err := FromRootfsTar(in, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	if err := WriteArchive(out, "vgpu-try:latest", img); err != nil {
		t.Fatal(err)
	}
	// docker load and ctr import find the image through manifest.json.
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(member(t, out, "manifest.json"), &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"vgpu-try:latest"}) || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest.json = %+v, want one image tagged vgpu-try:latest with one layer", manifest)
	}
	tag, _ := name.NewTag("vgpu-try:latest")
	back, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.RootFS.DiffIDs; len(got) != 1 || got[0].String() != diffID {
		t.Errorf("diff IDs %v, want [%s] (the root filesystem unchanged)", got, diffID)
	}
	if cf.Architecture != "amd64" || cf.OS != "linux" || !slices.Equal(cf.Config.Env, []string{DefaultPath}) {
		t.Errorf("config: %s/%s env %v", cf.OS, cf.Architecture, cf.Config.Env)
	}
	if !cf.Created.IsZero() {
		t.Errorf("created %v: an image of the same input must not depend on the time", cf.Created)
	}
	// The layer is stored gzipped, as engines expect; it holds the root
	// filesystem tarball byte for byte.
	zr, err := gzip.NewReader(bytes.NewReader(member(t, out, manifest[0].Layers[0])))
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	if layer, err := io.ReadAll(zr); err != nil || !bytes.Equal(layer, mustRead(t, in)) {
		t.Errorf("the archive's layer is not the root filesystem tarball (%v)", err)
	}
	first := mustRead(t, out)
	if err := WriteArchive(out, "vgpu-try:latest", img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, mustRead(t, out)) {
		t.Error("a second write of the same image gave other bytes")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".image.tar.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// Bad input is one error naming it, and no archive.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	in, _ := rootfsTar(t, dir)
	if _, err := FromRootfsTar(in, Config{OS: "linux"}); err == nil || !strings.Contains(err.Error(), "architecture") {
		t.Errorf("no architecture: %v", err)
	}
	if _, err := FromRootfsTar(filepath.Join(dir, "missing.tar"), testConfig); err == nil || !strings.Contains(err.Error(), "missing.tar") {
		t.Errorf("missing input: %v", err)
	}
	img, err := FromRootfsTar(in, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	if err := WriteArchive(out, "Bad Tag", img); err == nil || !strings.Contains(err.Error(), `"Bad Tag"`) {
		t.Errorf("bad tag: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused write left %s (%v)", out, err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// member is the content of the file called name in the tar archive at p.
func member(t *testing.T, p, name string) []byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() //nolint:errcheck // read only
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s has no %s", p, name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
