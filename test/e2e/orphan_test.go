//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/node/events"
)

// The fork trick on the simulated GPU, real runc, vgpu node at its
// defaults: a container limited to 4 GiB runs two processes that each take
// 3 GiB through the real driver by its path, fork a child that keeps the
// driver's descriptors, and exit. The driver lists the exited pids for the
// memory (as driver 580 does); vgpu node charges it to the container whose
// cgroup held them, finds it over its limit, and kills the container whole
// (cgroup.kill: the children holding the memory go too), with an event.
func TestNodeKillsContainerHoldingMemoryUnderExitedPids(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	requireRoot(t)
	addAttacker(t, f)
	e := newEnv(t, "orphan")
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(e.dir, "runc")
	startNode(t, e)
	b := makeBundle(t, filepath.Join(e.dir, "bundle-orphan"), f.rootfs,
		[]string{"/bin/sh", "-c", "vgpu-attack orphan 3072 </dev/null; vgpu-attack orphan 3072 </dev/null; exec sleep 3600"},
		[]string{"VGPU_MEMORY_LIMIT=4Gi", "VGPU_VISIBLE_DEVICES=0"}, nil)
	if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "create", "--bundle", b, "--pid-file", filepath.Join(e.dir, "orphan.pid"), "orphan"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	t.Cleanup(func() { run(t, 10*time.Second, nil, "runc", "--root", root, "delete", "--force", "orphan") })
	if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "start", "orphan"); err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	var whole *events.Event
	for deadline := time.Now().Add(60 * time.Second); whole == nil; time.Sleep(200 * time.Millisecond) {
		evs, err := events.Read(e.stateDir)
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range evs {
			if ev.Container == "orphan" && ev.Kind == "kill-container" {
				whole = &evs[i]
			}
		}
		if time.Now().After(deadline) {
			smi, _ := exec.Command(filepath.Join(e.sim.Dir(), "usr", "bin", "nvidia-smi")).CombinedOutput()
			t.Fatalf("no kill of the container in 60 s; events %+v\nnvidia-smi:\n%s", evs, smi)
		}
	}
	if whole.Reason != "memory" || !strings.Contains(whole.Detail, "exited and a process of orphan keeps its memory through the driver's descriptors") || whole.Error != "" {
		t.Errorf("event %+v, want a memory kill naming the exited pid and the descriptors", *whole)
	}
	// the children holding the memory are gone with the container
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, _ := exec.Command("runc", "--root", root, "state", "orphan").CombinedOutput()
		if strings.Contains(string(out), `"status": "stopped"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container still runs 20 s after its kill: %s", out)
		}
	}
	fmt.Fprintln(os.Stderr, "orphan: killed whole:", whole.Detail)
}
