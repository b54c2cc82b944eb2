// Package ociimage makes container images without a daemon or a registry:
// a root filesystem tarball becomes a one-layer image, written as the
// archive docker save writes (manifest.json, the config, the layer), which
// ctr images import, docker load and podman load all take. Built on
// go-containerregistry, so that the image format is the library's, not
// JSON assembled by hand. The same input gives the same bytes.
package ociimage

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DefaultPath is the PATH of an image that sets none: the one docker and
// containerd give a container.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Config is what the image says beyond its layer.
type Config struct {
	// Architecture and OS as in an image config ("amd64", "linux"); an
	// engine refuses an image whose platform is not its own.
	Architecture string
	OS           string
	Env          []string
	Cmd          []string
}

// FromRootfsTar is the image of one layer, the uncompressed tarball at
// rootfsTar (paths relative to the container's /), with c as its config.
// Nothing in it depends on the time or the host: no creation date.
func FromRootfsTar(rootfsTar string, c Config) (v1.Image, error) {
	if c.Architecture == "" || c.OS == "" {
		return nil, fmt.Errorf("image config: architecture %q and os %q must both be set (e.g. amd64, linux)", c.Architecture, c.OS)
	}
	layer, err := tarball.LayerFromFile(rootfsTar)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", rootfsTar, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = c.Architecture, c.OS
	cf.Config.Env = c.Env
	cf.Config.Cmd = c.Cmd
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img tagged tag (e.g. "vgpu-try:latest", which engines
// read as docker.io/library/vgpu-try:latest) to path as a docker save
// archive: into a temporary file beside it, renamed over path when
// complete, so that an interrupted run leaves no half archive.
func WriteArchive(path, tag string, img v1.Image) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("image tag %q: %w", tag, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename; a leftover only on failure
	if err := tarball.Write(ref, img, tmp); err != nil {
		tmp.Close() //nolint:errcheck // the write error is the one to report
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close() //nolint:errcheck // the chmod error is the one to report
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
