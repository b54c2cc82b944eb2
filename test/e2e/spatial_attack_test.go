//go:build e2e

package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// A root tenant of a spatial GPU sends the control daemon `quit` in a loop
// (the simulated daemon, as the real one's privileged socket, takes
// commands from root) while a worker reaching the GPU around MPS (1 GiB
// through the driver by its path, without the pipe directory) is respawned
// after every kill: the node restarts the daemon after 500 ms at every
// quit, never a longer wait; the worker is killed (reason mps) though the
// daemon is down most of the time; and at the third round of kills the
// container is killed whole, its quit loop with it.
func TestSpatialQuitLoopAndRespawnedNonClient(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	addAttacker(t, f)
	addMPSClient(t, f)
	e := newEnv(t, "spatial-quit")
	appendConfig(t, e, "[spatial]\ngpus = [\"1\"]\n")
	mkStateDir(t, e)
	uuid := simroot.DefaultUUID(1)
	cli := vgpuCLI(t)
	startNode(t, e)
	eventuallyTrue(t, 30*time.Second, "GPU 1's MPS control daemon running", func() bool {
		m := mpsOf(vgpuStatus(t, cli, e.stateDir), uuid)
		return m != nil && m.State == "running"
	})
	// no memory limit: only the client rule can act on the worker
	sh := `(while true; do vgpu-mpsclient -c quit >/dev/null 2>&1; sleep 0.3; done) & ` +
		`sleep 3600 | while true; do env -u CUDA_MPS_PIPE_DIRECTORY vgpu-attack driver 1024 >/dev/null 2>&1; sleep 0.2; done`
	b := makeBundle(t, filepath.Join(e.dir, "bundle-quitter"), f.rootfs, []string{"/bin/sh", "-c", sh}, []string{"VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=40"}, nil)
	e.runc(t).createStart(b, "quitter")
	var mpsKills int
	var exits []string
	eventuallyTrue(t, 120*time.Second, "the quitter killed whole (kill-container, reason repeat)", func() bool {
		evs, _ := events.Read(e.stateDir)
		whole := false
		mpsKills, exits = 0, exits[:0]
		for _, ev := range evs {
			switch {
			case ev.Kind == "kill" && ev.Reason == "mps" && ev.Container == "quitter":
				mpsKills++
			case ev.Kind == "kill-container" && ev.Reason == "repeat" && ev.Container == "quitter":
				whole = true
			case ev.Kind == "mps-exit" && ev.GPU == uuid:
				exits = append(exits, ev.Detail)
			}
		}
		return whole
	})
	if mpsKills < 2 {
		t.Errorf("%d kills (reason mps) before the container was killed whole, want the rounds before it", mpsKills)
	}
	if len(exits) == 0 {
		t.Errorf("the quit loop never stopped the daemon")
	}
	for _, d := range exits {
		if !strings.Contains(d, "restarting in 500ms") {
			t.Errorf("an exit after a quit restarted after a longer wait: %s", d)
		}
	}
	// the daemon is back once the quitter is gone
	eventuallyTrue(t, 30*time.Second, "the daemon running again", func() bool {
		m := mpsOf(vgpuStatus(t, cli, e.stateDir), uuid)
		return m != nil && m.State == "running"
	})
}
