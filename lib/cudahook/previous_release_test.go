//go:build integration

package cudahook_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// previousRelease is the source the previous release's library is built
// from: VGPU_PREVIOUS_RELEASE (a git ref), else the last commit whose share
// file the library read at fixed offsets (before vgpu_share.h).
const previousRelease = "ac59709"

// previousLibrary builds the stand-ins of the previous release into a
// temporary directory (git archive of its source, then its own make) and
// returns that build directory; VGPU_PREVIOUS_BUILD names one built before.
func previousLibrary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("VGPU_PREVIOUS_BUILD"); b != "" {
		return b
	}
	ref := previousRelease
	if r := os.Getenv("VGPU_PREVIOUS_RELEASE"); r != "" {
		ref = r
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v (the test builds the previous release from this repository's history)", err)
	}
	src, build := t.TempDir(), t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", strings.TrimSpace(string(top)), ref, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s(a shallow clone: fetch the history, or set VGPU_PREVIOUS_BUILD)", ref, err, out)
	}
	lib := filepath.Join(build, "lib")
	mk := exec.Command("make", "-C", src, "BUILD="+build, filepath.Join(lib, "libvgpu-cuda.so"), filepath.Join(lib, "libvgpu-nvml.so"))
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("building the library of %s: %v\n%s", ref, err, out)
	}
	return build
}

// A container whose library is the previous release's (it reads the share
// file at that release's fixed offsets) beside this vgpu node: the node's
// arbitration gives its tenant with request 30 and limit 100 the idle GPU,
// and that library applies the share: the device is busy at least 60 % of
// 5 s, where the request alone (the share file unread) holds it to about
// 30 % (TestComputeRequestUsesIdleGPU's bounds).
func TestPreviousReleaseLibrary(t *testing.T) {
	prev := filepath.Join(previousLibrary(t), "lib")
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	r30 := 30
	c := tenantIn(t, root, stateDir, "t", 100, &r30)
	for i, v := range c.vars {
		if strings.HasPrefix(v, "LD_PRELOAD=") {
			c.vars[i] = "LD_PRELOAD=" + filepath.Join(prev, "libvgpu-cuda.so") + ":" + filepath.Join(prev, "libvgpu-nvml.so")
		}
	}
	startNode(t, stateDir, noNVML{}, nil)
	r := c.start(t, "kernel")
	measure(t, 1500*time.Millisecond, 5*time.Second, r)
	res := r.wait(t)
	occ := 100 * float64(res.u(t, "busy0_ns")) / float64(res.u(t, "window_ns"))
	t.Logf("previous release's library, request 30 limit 100, this vgpu node: device busy %.1f%% of 5 s", occ)
	if occ < 60 {
		t.Errorf("the previous release's library beside this vgpu node: the device was busy %.1f%% of 5 s, want at least 60%% (the node's share applied)", occ)
	}
}
