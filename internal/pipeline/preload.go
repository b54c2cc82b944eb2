package pipeline

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/plan"
)

// The image's own /etc/ld.so.preload is an input of the container, read
// beside its request: the container's ld.so.preload (the state's) keeps its
// lines before the stand-ins.

// maxPreload bounds how much of the image's /etc/ld.so.preload is read.
const maxPreload = 64 << 10

// ImagePreload returns the lines of <rootfs>/etc/ld.so.preload, resolved
// inside the rootfs (a symlink in the image cannot make us read a host file),
// without comments, blanks and our own libraries. A missing file gives nil.
func ImagePreload(rootfs string) ([]string, error) {
	if rootfs == "" {
		return nil, nil
	}
	p, err := securejoin.SecureJoin(rootfs, plan.ContainerPreload)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image's %s: %w", plan.ContainerPreload, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("image's %s is not a regular file", plan.ContainerPreload)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPreload+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPreload {
		return nil, fmt.Errorf("image's %s is larger than %d bytes", plan.ContainerPreload, maxPreload)
	}
	ours := map[string]bool{plan.ContainerLibDir + "/" + plan.LibCuda: true, plan.ContainerLibDir + "/" + plan.LibNvml: true}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxPreload+1)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// ld.so.preload separates names by white space or colons.
		for _, w := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ':' }) {
			if !ours[w] {
				out = append(out, w)
			}
		}
	}
	return out, sc.Err()
}
