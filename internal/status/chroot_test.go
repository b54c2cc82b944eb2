//go:build integration

package status

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The same with a real chrooted process under the real /proc: a child of
// this test binary chroots into a directory whose run/vgpu/quota is an
// absolute symlink to a container's quota, and stays there.
func TestChrootedSymlinkNotListed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (chroot); make test runs as root")
	}
	f := newFixture(t)
	live := f.container("live", &tenant.Record{ID: "live"}, quotaOf(gib))
	jail := t.TempDir()
	write(t, filepath.Join(jail, "run", "vgpu", ".keep"), nil)
	if err := os.Symlink(filepath.Join(live, config.StateQuota), filepath.Join(jail, "run", "vgpu", "quota")); err != nil {
		t.Fatal(err)
	}
	// Resolved on the host, the link does name the quota file: the test
	// would show nothing if it did not.
	if a, _ := procinfo.StatID(filepath.Join(jail, "run", "vgpu", "quota")); a != func() procinfo.FileID { q, _ := procinfo.StatID(filepath.Join(live, config.StateQuota)); return q }() {
		t.Fatal("fixture: the link does not reach the quota file")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), chrootChildEnv+"="+jail)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make([]byte, 5)
	if _, err := io.ReadFull(stdout, ready); err != nil || string(ready) != "ready" {
		t.Fatalf("chrooted child: %q %v", ready, err)
	}
	// Its root is the jail: the host view through /proc shows the link.
	if target, err := os.Readlink(fmt.Sprintf("/proc/%d/root/run/vgpu/quota", cmd.Process.Pid)); err != nil || target != filepath.Join(live, config.StateQuota) {
		t.Fatalf("child's root: %q %v", target, err)
	}
	c := find(t, Collect(Options{StateDir: f.state, ProcRoot: "/proc"}), "live")
	if c.HostProcesses != 0 {
		t.Errorf("the chrooted process (pid %d) is listed: %d host processes, want 0", cmd.Process.Pid, c.HostProcesses)
	}
}
