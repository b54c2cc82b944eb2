//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/events"
)

// A tenant owns its shared directory (/run/vgpu/shared) and may put
// anything in its region's place. vgpu node reads every tenant's region
// each round; a FIFO there, or a symlink to a FIFO of the host, hung the
// node for good: no kill of a neighbour's bypass, no SIGTERM. Now the
// node leaves such a region out, reports it once, keeps enforcing, and
// stops promptly when told to.
func TestNodeIgnoresHostileRegion(t *testing.T) {
	for _, tc := range []struct {
		name, plant string
	}{
		{"fifo", "rm -f /run/vgpu/shared/vgpu.region && mkfifo /run/vgpu/shared/vgpu.region"},
		// a FIFO of the host, named by an absolute path the host resolves
		{"symlink", "rm -f /run/vgpu/shared/vgpu.region && ln -s %s /run/vgpu/shared/vgpu.region"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := shared(t)
			need(t, "runc", "gcc")
			addAttacker(t, f)
			e := newEnv(t, "hostile-"+tc.name)
			mkStateDir(t, e)
			hostFIFO := filepath.Join(e.dir, "host-fifo")
			if err := unix.Mkfifo(hostFIFO, 0o600); err != nil {
				t.Fatal(err)
			}
			plant := tc.plant
			if strings.Contains(plant, "%s") {
				plant = fmt.Sprintf(plant, hostFIFO)
			}
			cli := vgpuCLI(t)
			rt := e.runc(t)
			node, logPath := startNodeProcess(t, e)
			start := func(id string, args, env []string) {
				t.Helper()
				b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, args, append([]string{"VGPU_VISIBLE_DEVICES=0"}, env...), nil)
				rt.detach(b, id)
			}
			// paced (compute limit) and borrowing (request below the limit):
			// the node reads its region for both
			start("hostile", []string{"/bin/sh", "-c", plant + " && sleep 3600"},
				[]string{"VGPU_COMPUTE_LIMIT=50", "VGPU_MEMORY_REQUEST=1Gi", "VGPU_MEMORY_LIMIT=2Gi"})
			planted := filepath.Join(e.stateDir, "hostile", "shared", "vgpu.region")
			eventually(t, 60*time.Second, "the tenant's plant at "+planted, func() error {
				fi, err := os.Lstat(planted)
				if err != nil {
					return err
				}
				return holds(!fi.Mode().IsRegular(), "still a regular file")
			})
			start("bypass", []string{"/bin/sh", "-c", "sleep 3600 | vgpu-attack driver 4096"}, []string{"VGPU_MEMORY_LIMIT=1073741824"})
			pid := waitMemoryKill(t, cli, e.stateDir, "bypass", 90*time.Second)
			waitDead(t, pid, 30*time.Second)
			waitLog(t, logPath, "hostile: its shared region is not as vgpu writes it", 60*time.Second)
			if c := container(vgpuStatus(t, cli, e.stateDir), "hostile"); c == nil {
				t.Error("vgpu status does not list the hostile container")
			} else if !hasEvent(c.Enforcement, "region-ignored") {
				t.Errorf("the hostile container's events have no region-ignored: %+v", c.Enforcement)
			}
			if n := strings.Count(fileText(t, logPath), "hostile: its shared region is not as vgpu writes it"); n != 1 {
				t.Errorf("the hostile region was reported %d times, want once", n)
			}
			if err := node.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- node.Wait() }()
			select {
			case err := <-done:
				// SIGTERM is the node's clean stop: it exits 0
				if err != nil {
					t.Errorf("vgpu node after SIGTERM: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("vgpu node still running 20 s after SIGTERM:\n%s", fileText(t, logPath))
			}
			if !strings.Contains(fileText(t, logPath), "vgpu node: stopped") {
				t.Errorf("vgpu node did not stop cleanly:\n%s", fileText(t, logPath))
			}
		})
	}
}

// startNodeProcess runs vgpu-node on the env's state directory and returns
// it running (killed at the end of the test if still there).
func startNodeProcess(t *testing.T, e *env) (*exec.Cmd, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logPath := filepath.Join(e.dir, "node.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(vgpuNode(t), "--state-dir", e.stateDir, "--listen", addr)
	cmd.Env = append(os.Environ(), e.vars()...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		lf.Close()
	})
	if err := poll(30*time.Second, func() error {
		return holds(vgpuStatus(t, vgpuCLI(t), e.stateDir).HostEnforcement.On, "vgpu status does not show host enforcement on")
	}); err != nil {
		t.Fatalf("%v; vgpu node log:\n%s", err, fileText(t, logPath))
	}
	return cmd, logPath
}

func waitLog(t *testing.T, path, want string, timeout time.Duration) {
	t.Helper()
	if err := pollAt(timeout, 200*time.Millisecond, func() error {
		return holds(strings.Contains(fileText(t, path), want), "no %q in %s", want, path)
	}); err != nil {
		t.Fatalf("%v:\n%s", err, fileText(t, path))
	}
}

func fileText(t *testing.T, path string) string {
	t.Helper()
	b, _ := os.ReadFile(path)
	return string(b)
}

func hasEvent(evs []events.Event, kind string) bool {
	for _, e := range evs {
		if e.Kind == kind {
			return true
		}
	}
	return false
}
