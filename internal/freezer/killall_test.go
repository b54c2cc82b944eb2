//go:build integration

package freezer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// KillAll on the host's real cgroups (root): a container's process, frozen
// by us in a cgroup of its own, and its child in a cgroup below, are both
// killed, and the cgroup is left thawed and empty. v2 through cgroup.kill,
// v1 (or a kernel without cgroup.kill) by thawing and SIGKILL to each pid.
func TestKillAllRealCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes cgroups")
	}
	f := New("/sys/fs/cgroup")
	name := fmt.Sprintf("vgpu-killall-test-%d", os.Getpid())
	base := "/sys/fs/cgroup"
	if f.v1() {
		base = "/sys/fs/cgroup/freezer"
	}
	top := filepath.Join(base, name)
	below := filepath.Join(top, "below")
	if err := os.MkdirAll(below, 0o755); err != nil {
		t.Skipf("cannot make a cgroup here: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(below); _ = os.Remove(top) })
	var cmds []*exec.Cmd
	for _, dir := range []string{top, below} {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	if err := f.Freeze("/" + name); err != nil {
		t.Fatal(err)
	}
	if frozen, err := f.State("/" + name); err != nil || !frozen {
		t.Fatalf("not frozen before the kill: %v %v", frozen, err)
	}
	if _, err := f.KillAll("/" + name); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("process %d: ended %v, want killed by SIGKILL", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("process %d (pid %d) still alive 10 s after KillAll", i, cmd.Process.Pid)
		}
	}
	if frozen, err := f.State("/" + name); err != nil || frozen {
		t.Errorf("after KillAll the cgroup is frozen %v (%v), want thawed", frozen, err)
	}
	if f.Ours("/" + name) {
		t.Error("after KillAll the freezer still counts the cgroup as one it froze")
	}
}
