package daemon

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// Under free: c1 borrows 16 GiB above its request (pids 101, 102), c2
// holds 4 GiB (pid 201) and waits for 8 with 4 free. Each time its largest
// worker is killed c1 respawns one that takes the room again: the third
// take-back within 30 s kills c1 whole (the rule memory and compute kills
// follow), not a 60th worker.
func TestDaemonTakeBacksCountTowardWholeContainer(t *testing.T) {
	p := newBorrowPair(t, true)
	d, f, h := p.d, p.f, p.host
	writeNeed(t, filepath.Join(h.state, "c2", "shared"), 5, 8<<10)
	worker := 102
	for round := 0; round < 3; round++ {
		addProc(t, h.proc, "c1", worker)
		f.samples = []nvmlfeed.Sample{{HostPID: 555, GPU: uuid, UsedBytes: 100 * gib}, {HostPID: 101, GPU: uuid, UsedBytes: 12 * gib},
			{HostPID: worker, GPU: uuid, UsedBytes: 20 * gib}, {HostPID: 201, GPU: uuid, UsedBytes: 4 * gib}}
		p.now = p.now.Add(time.Second)
		d.Round()
		worker++
	}
	var kinds []string
	for _, e := range eventsOf(t, h.state) {
		kinds = append(kinds, e.Kind+"/"+e.Reason+"/"+e.Container)
	}
	want := "kill/borrow/c1 kill/borrow/c1 kill-container/repeat/c1"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("events %q, want %q\n%s", got, want, p.log.String())
	}
	if len(p.killed) < 2 || p.killed[0] != 102 || p.killed[1] != 103 {
		t.Errorf("killed pids %v, want the two workers 102, 103 before the container", p.killed)
	}
}

// Under free, once c1's 20 GiB worker is killed for c2 (need 8 GiB), the
// room is held for c2 while its need is pending: c1's ceiling leaves the
// 8 GiB out (28 GiB, not its limit 32) so a respawned worker cannot take
// them first; c2's own ceiling keeps them. In the round of the kill c1 is
// held to its request (its ceiling counted the killed worker's memory).
// When c2's need is met, c1 may borrow them again.
func TestDaemonHoldsFreedRoomForOwner(t *testing.T) {
	p := newBorrowPair(t, true)
	d, f, h := p.d, p.f, p.host
	c2shared := filepath.Join(h.state, "c2", "shared")
	f.samples = append(f.samples, nvmlfeed.Sample{HostPID: 101, GPU: uuid, UsedBytes: 12 * gib},
		nvmlfeed.Sample{HostPID: 102, GPU: uuid, UsedBytes: 20 * gib}, nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 4 * gib})
	writeNeed(t, c2shared, 5, 8<<10)
	d.Round()
	if len(p.killed) != 1 || p.killed[0] != 102 {
		t.Fatalf("killed %v, want 102\n%s", p.killed, p.log.String())
	}
	if c := d.MemoryCeilings()["c1"][0]; c != 16*gib {
		t.Errorf("c1's ceiling %d GiB in the round its worker is killed, want its request 16 (a respawned worker must not retake the room)", c/gib)
	}
	f.samples = append(f.samples[:2], nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: 4 * gib}) // 102 gone: 24 GiB free
	p.now = p.now.Add(100 * time.Millisecond)
	d.Round()
	if c := d.MemoryCeilings()["c1"][0]; c != 28*gib {
		t.Errorf("c1's ceiling %d GiB while c2's 8 GiB need is pending, want 28 (12 + 24 free - 8 held)", c/gib)
	}
	if c := d.MemoryCeilings()["c2"][0]; c != 28*gib {
		t.Errorf("c2's ceiling %d GiB, want 28 (4 + the 24 free, its held room included)", c/gib)
	}
	writeNeed(t, c2shared, 5, 0)
	p.now = p.now.Add(100 * time.Millisecond)
	d.Round()
	p.now = p.now.Add(100 * time.Millisecond)
	d.Round()
	if c := d.MemoryCeilings()["c1"][0]; c != 32*gib {
		t.Errorf("c1's ceiling %d GiB once c2's need is met, want its limit 32", c/gib)
	}
}

// A lying owner: under free c2 writes a need of 8 GiB while it has no
// process on the GPU: nothing is killed, and the refusal is logged. Under
// the default rule an owner that hides 12 GiB (its process left the
// driver's list, the memory stayed) and asks 8 with one live 1 GiB process
// gets no honest tenant killed either.
func TestDaemonIgnoresNeedOfOwnerHoldingNothing(t *testing.T) {
	p := newBorrowPair(t, true)
	d, f, h := p.d, p.f, p.host
	f.samples = append(f.samples, nvmlfeed.Sample{HostPID: 101, GPU: uuid, UsedBytes: 12 * gib}, nvmlfeed.Sample{HostPID: 102, GPU: uuid, UsedBytes: 20 * gib})
	writeNeed(t, filepath.Join(h.state, "c2", "shared"), 5, 10<<10) // 8 free
	for i := 0; i < 10; i++ {
		p.now = p.now.Add(100 * time.Millisecond)
		d.Round()
	}
	if len(p.killed) != 0 || len(eventsOf(t, h.state)) != 0 {
		t.Fatalf("killed %v for an owner with no process on the GPU\n%s", p.killed, p.log.String())
	}
	if !strings.Contains(p.log.String(), "c2 asks 10 GiB on GPU "+uuid+" but has no live process there") {
		t.Errorf("the refusal is not logged:\n%s", p.log.String())
	}

	q := newBorrowPair(t, false)
	q.f.samples = append(q.f.samples, nvmlfeed.Sample{HostPID: 101, GPU: uuid, UsedBytes: 20 * gib}, nvmlfeed.Sample{HostPID: 200, GPU: uuid, UsedBytes: 12 * gib},
		nvmlfeed.Sample{HostPID: 201, GPU: uuid, UsedBytes: gib})
	q.f.used = 133 * gib
	q.d.Round()
	// 200 hides its 12 GiB: gone from the list, the memory stays used
	q.f.samples = []nvmlfeed.Sample{q.f.samples[0], q.f.samples[1], q.f.samples[3]}
	writeNeed(t, filepath.Join(q.host.state, "c2", "shared"), 5, 8<<10)
	for i := 0; i < 3; i++ {
		q.now = q.now.Add(100 * time.Millisecond)
		q.d.Round()
	}
	for _, e := range eventsOf(t, q.host.state) {
		if e.Container == "c1" {
			t.Fatalf("c1 killed for an owner hiding memory: %+v\n%s", e, q.log.String())
		}
	}
}
