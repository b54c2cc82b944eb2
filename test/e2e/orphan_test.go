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

	"github.com/vgpu-dev/vgpu/internal/events"
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
	e := newNodeHost(t, "orphan")
	rt := e.runc(t)
	b := makeBundle(t, filepath.Join(e.dir, "bundle-orphan"), f.rootfs,
		[]string{"/bin/sh", "-c", "vgpu-attack orphan 3072 </dev/null; vgpu-attack orphan 3072 </dev/null; exec sleep 3600"},
		[]string{"VGPU_MEMORY_LIMIT=4Gi", "VGPU_VISIBLE_DEVICES=0"}, nil)
	rt.createStart(b, "orphan")
	var whole *events.Event
	if err := pollAt(60*time.Second, 200*time.Millisecond, func() error {
		evs, err := events.Read(e.stateDir)
		if err != nil {
			return giveUp(err)
		}
		for i, ev := range evs {
			if ev.Container == "orphan" && ev.Kind == "kill-container" {
				whole = &evs[i]
			}
		}
		return holds(whole != nil, "no kill of the container; events %+v", evs)
	}); err != nil {
		smi, _ := exec.Command(filepath.Join(e.sim.Dir(), "usr", "bin", "nvidia-smi")).CombinedOutput()
		t.Fatalf("%v\nnvidia-smi:\n%s", err, smi)
	}
	if whole.Reason != "memory" || !strings.Contains(whole.Detail, "exited and a process of orphan keeps its memory through the driver's descriptors") || whole.Error != "" {
		t.Errorf("event %+v, want a memory kill naming the exited pid and the descriptors", *whole)
	}
	// the children holding the memory are gone with the container
	if err := pollAt(20*time.Second, 200*time.Millisecond, func() error {
		status, _ := rt.state("orphan")
		return holds(status == "stopped", "runc state says %q", status)
	}); err != nil {
		t.Fatalf("the container still runs after its kill: %v", err)
	}
	fmt.Fprintln(os.Stderr, "orphan: killed whole:", whole.Detail)
}
