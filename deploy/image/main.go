// Command image builds the vgpu image (make image): one OCI image holding
// what a node needs, written as an OCI layout directory and as one tar that
// is both an OCI layout and a `docker save` archive (index.json and
// manifest.json), which `ctr images import`, `docker load` and `podman load`
// all take. No network and no container daemon: go-containerregistry
// assembles it from the build's files.
//
// Reproducible: the layer's entries are sorted, owned by root, dated
// -epoch (SOURCE_DATE_EPOCH, else 0), and so are the config and the tar; the
// same build gives the same digest.
//
// Contents (docs/kubernetes.md, "The image"):
//
//	/vgpu-install            the installer (static), the entrypoint
//	/payload/bin/…           vgpu-runtime, vgpu-hook, vgpu, vgpu-node, vgpu-discover
//	/payload/lib/…           libvgpu-cuda.so, libvgpu-nvml.so
//	/payload/config.toml     the default configuration
//
// A module of its own so that go-containerregistry never enters the vgpu
// module's build graph.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Binaries is what goes into /payload/bin, from -bin.
var Binaries = []string{"vgpu-runtime", "vgpu-hook", "vgpu", "vgpu-node", "vgpu-discover"}

// Libraries is what goes into /payload/lib, from -lib.
var Libraries = []string{"libvgpu-cuda.so", "libvgpu-nvml.so"}

type entry struct {
	name string // in the image, without the leading /
	mode int64
	data []byte // nil: a directory
}

func main() {
	bin := flag.String("bin", "build/bin", "directory of the built binaries")
	lib := flag.String("lib", "build/lib", "directory of the built libraries")
	config := flag.String("config", "configs/config.toml", "the default configuration")
	installer := flag.String("installer", "build/bin/vgpu-install", "the static installer")
	out := flag.String("out", "build/image", "output directory: oci/ (layout) and vgpu-<version>.tar")
	repo := flag.String("repository", "ghcr.io/vgpu-dev/vgpu", "the image's name, without the tag")
	version := flag.String("version", "", "version: the tag and the org.opencontainers.image.version label")
	commit := flag.String("commit", "", "git commit: the org.opencontainers.image.revision label")
	arch := flag.String("arch", runtime.GOARCH, "architecture the binaries were built for")
	flag.Parse()
	if *version == "" || *commit == "" {
		fatal(errors.New("-version and -commit are required (make image sets them)"))
	}
	epoch := int64(0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fatal(fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", s))
		}
		epoch = n
	}
	created := time.Unix(epoch, 0).UTC()

	entries := []entry{{name: "payload/", mode: 0o755}, {name: "payload/bin/", mode: 0o755}, {name: "payload/lib/", mode: 0o755}}
	add := func(src, name string, mode int64) {
		data, err := os.ReadFile(src)
		if err != nil {
			fatal(fmt.Errorf("%w (run make build first)", err))
		}
		entries = append(entries, entry{name: name, mode: mode, data: data})
	}
	add(*installer, "vgpu-install", 0o755)
	for _, b := range Binaries {
		add(filepath.Join(*bin, b), "payload/bin/"+b, 0o755)
	}
	for _, l := range Libraries {
		add(filepath.Join(*lib, l), "payload/lib/"+l, 0o755)
	}
	add(*config, "payload/config.toml", 0o644)
	layerTar, err := tarOf(entries, created)
	if err != nil {
		fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		fatal(err)
	}

	labels := map[string]string{
		"org.opencontainers.image.title":       "vgpu",
		"org.opencontainers.image.description": "vgpu node files and installer (deploy/helm/vgpu)",
		"org.opencontainers.image.version":     *version,
		"org.opencontainers.image.revision":    *commit,
		"org.opencontainers.image.source":      "https://github.com/vgpu-dev/vgpu",
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: *arch, OS: "linux",
		Config: v1.Config{Entrypoint: []string{"/vgpu-install"}, Labels: labels, WorkingDir: "/"},
	})
	if err != nil {
		fatal(err)
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "make image", Comment: "vgpu " + *version}})
	if err != nil {
		fatal(err)
	}
	if img, err = mutate.CreatedAt(img, v1.Time{Time: created}); err != nil {
		fatal(err)
	}

	ref := *repo + ":" + *version
	ociDir := filepath.Join(*out, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		fatal(err)
	}
	p, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
		"io.containerd.image.name":          ref,
	})); err != nil {
		fatal(err)
	}
	// manifest.json: what docker load (before 25) and podman load read.
	cfgName, err := img.ConfigName()
	if err != nil {
		fatal(err)
	}
	ld, err := layer.Digest()
	if err != nil {
		fatal(err)
	}
	dm, err := json.Marshal([]map[string]any{{
		"Config":   "blobs/sha256/" + cfgName.Hex,
		"RepoTags": []string{ref},
		"Layers":   []string{"blobs/sha256/" + ld.Hex},
	}})
	if err != nil {
		fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ociDir, "manifest.json"), dm, 0o644); err != nil {
		fatal(err)
	}
	archive, err := tarDir(ociDir, created)
	if err != nil {
		fatal(err)
	}
	tarPath := filepath.Join(*out, "vgpu-"+*version+".tar")
	if err := os.WriteFile(tarPath, archive, 0o644); err != nil {
		fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "digest"), []byte(digest.String()+"\n"), 0o644); err != nil {
		fatal(err)
	}
	fmt.Printf("image %s@%s\n  %s (ctr -n k8s.io images import, docker load, podman load)\n  %s (OCI layout)\n", ref, digest, tarPath, ociDir)
}

// tarOf is the layer: entries sorted by name, parents first, root-owned,
// dated created.
func tarOf(entries []entry, created time.Time) ([]byte, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: created, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if e.data == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// tarDir archives dir the same way: sorted, root-owned, dated created.
func tarDir(dir string, created time.Time) ([]byte, error) {
	var entries []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			entries = append(entries, entry{name: rel + "/", mode: 0o755})
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		entries = append(entries, entry{name: rel, mode: 0o644, data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return tarOf(entries, created)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "image: "+strings.TrimSpace(err.Error()))
	os.Exit(1)
}
