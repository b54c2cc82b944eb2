//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// memory_borrow = "free", real runc on the simulated GPU (544 MiB of which
// the driver keeps 32 of its own, as a card's does: 512 for processes; 16
// MiB a context; its checkpoint API as driver 580's), vgpu node running:
// two containers requesting 192 MiB up to 384. The borrower writes a
// pattern into 320 MiB and holds it; the owner asks 170 MiB within its
// request with 160 free (192 by the processes' figures alone, which leave
// the driver's own out: a node that counted so would take nothing back).
// (Small: the simulated host copy touches every page.) Under memory_reclaim = "suspend" the owner's allocation
// completes while the borrower's process is suspended, alive, with a
// suspend event and vgpu status showing it; once the owner exits it is
// restored and finds its pattern intact, then exits 0. Under "kill" the
// borrower is killed, as before suspension.
func TestMemoryBorrowFreeSuspends(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	for _, mode := range []string{"suspend", "kill"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnvSim(t, "suspend-"+mode, simroot.Options{Devices: []simroot.Device{{MemoryBytes: 544 << 20, ReservedBytes: 32 << 20}}, ContextMemory: 16 << 20})
			setTopKeys(t, e, "memory_borrow = \"free\"\nmemory_reclaim = \""+mode+"\"\n")
			if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			startNode(t, e)
			f := shared(t)
			cli := vgpuCLI(t)
			rt := e.runc(t)
			env := []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_REQUEST=192Mi", "VGPU_MEMORY_LIMIT=384Mi"}

			// the borrower waits for vgpu node's ceiling (its library holds
			// it to its request until then), then borrows
			rt.deleteAtEnd("borrower")
			bb := makeBundle(t, filepath.Join(e.dir, "bundle-borrower"), f.rootfs, []string{"/bin/sh", "-c",
				`i=0; while [ $i -lt 600 ]; do out=$(cuda-fill info); v=${out#*now_free=}; v=${v%%[!0-9]*}; ` +
					`[ "${v:-0}" -gt 335544320 ] && break; i=$((i+1)); sleep 0.1; done; exec cuda-fill pattern 320`}, env, nil)
			bp := rt.startProc("run", "-b", bb, "borrower")
			var bout []string
			if l := bp.line("pattern_written=", 90*time.Second, &bout); l != "pattern_written=0" {
				t.Fatalf("the borrower could not write its pattern into 320 MiB: %q\n%s", l, strings.Join(bout, "\n"))
			}

			op := startOwnerWithCeiling(t, e, f, rt, cli, env, "cuda-fill hold 170")
			var oout []string
			if l := op.line("hold_rc=", 90*time.Second, &oout); l != "hold_rc=0" {
				t.Fatalf("the owner's 170 MiB within its request: %q, want success\n%s", l, strings.Join(oout, "\n"))
			}
			// the owner's allocation may complete as the driver frees the
			// room, before vgpu node's next round records what it did
			var evs []events.Event
			var took *events.Event
			eventuallyTrue(t, 10*time.Second, "an event taking the borrower's memory", func() bool {
				evs, _ = events.Read(e.stateDir)
				for i, ev := range evs {
					if ev.Container == "borrower" && (ev.Kind == "suspend" || ev.Kind == "kill") {
						took = &evs[i]
					}
				}
				return took != nil
			})
			if mode == "kill" {
				switch {
				case took == nil || took.Kind != "kill" || took.Reason != "borrow":
					t.Errorf("no borrow kill of the borrower under memory_reclaim = \"kill\": %+v", evs)
				case pidAlive(took.PID):
					t.Errorf("the borrower's pid %d still lives", took.PID)
				}
				return
			}
			switch {
			case took == nil || took.Kind != "suspend":
				t.Fatalf("no suspend event for the borrower: %+v", evs)
			case !strings.Contains(took.Detail, "owner needs 170 MiB under its request 192 MiB"):
				t.Errorf("suspend event %+v does not name the owner's need", *took)
			case !pidAlive(took.PID):
				t.Fatalf("the suspended borrower's pid %d is dead", took.PID)
			}
			var shown bool
			for _, c := range vgpuStatus(t, cli, e.stateDir).Containers {
				for _, d := range c.Devices {
					for _, s := range d.Suspended {
						shown = shown || c.ID == "borrower" && s.PID == took.PID && s.Bytes > 320<<20
					}
				}
			}
			if !shown {
				t.Errorf("vgpu status does not show pid %d of the borrower suspended", took.PID)
			}
			// the owner exits: the whole borrower fits again
			op.stdin.Close()
			eventuallyTrue(t, 60*time.Second, "the borrower's restore", func() bool {
				evs, _ := events.Read(e.stateDir)
				for _, ev := range evs {
					if ev.Kind == "restore" && ev.PID == took.PID {
						return true
					}
				}
				return false
			})
			bp.stdin.Close()
			if l := bp.line("pattern_ok=", 60*time.Second, &bout); l != "pattern_ok=1" {
				t.Errorf("the restored borrower's pattern: %q, want intact\n%s", l, strings.Join(bout, "\n"))
			}
			if err := bp.cmd.Wait(); err != nil {
				t.Errorf("the borrower's container: %v, want exit 0", err)
			}
			evs, _ = events.Read(e.stateDir)
			for _, ev := range evs {
				if ev.Kind == "kill" {
					t.Errorf("killed under memory_reclaim = \"suspend\": %+v", ev)
				}
			}
		})
	}
}
