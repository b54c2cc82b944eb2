// imagearchive ROOTFS.tar TAG OUT.tar: the root filesystem tarball as a
// one-layer amd64 image archive (docker save's format) that ctr images
// import, docker load and podman load take (make try, docs/try.md).
package main

import (
	"fmt"
	"os"

	"github.com/vgpu-dev/vgpu/internal/ociimage"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: imagearchive ROOTFS.tar TAG OUT.tar")
		os.Exit(2)
	}
	img, err := ociimage.FromRootfsTar(os.Args[1], ociimage.Config{Architecture: "amd64", OS: "linux", Env: []string{ociimage.DefaultPath}})
	if err == nil {
		err = ociimage.WriteArchive(os.Args[3], os.Args[2], img)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagearchive:", err)
		os.Exit(1)
	}
}
