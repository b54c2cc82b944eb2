package inject

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
)

func TestPickPhase(t *testing.T) {
	for _, tc := range []struct {
		width int
		taken []slot
		want  int
	}{
		{30, nil, 0},
		{70, []slot{{0, 30}}, 30},
		{25, []slot{{0, 25}, {25, 25}, {50, 25}}, 75},
		{50, []slot{{0, 50}, {50, 50}}, 0},  // full: equal overlap, earliest
		{40, []slot{{0, 50}, {50, 20}}, 70}, // fits in 70..99 without overlap... 30 free: least overlap
		{20, []slot{{10, 30}}, 40},          // 0..19 overlaps 10, 40..59 none
		{10, []slot{{95, 10}}, 5},           // a slot that wraps round
		{99, []slot{{0, 1}}, 1},             // the rest of the circle
	} {
		if got := pickPhase(tc.width, tc.taken); got != tc.want {
			t.Errorf("pickPhase(%d, %v) = %d, want %d", tc.width, tc.taken, got, tc.want)
		}
	}
}

func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b slot
		want int
	}{
		{slot{0, 30}, slot{30, 70}, 0},
		{slot{0, 50}, slot{25, 50}, 25},
		{slot{90, 20}, slot{0, 5}, 5},
		{slot{0, 100}, slot{40, 10}, 10},
	} {
		if got := overlap(tc.a, tc.b); got != tc.want {
			t.Errorf("overlap(%v, %v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// Containers created at once on one GPU get slots that do not overlap while
// their shares fit, whatever the order; another GPU, another period or no
// limit does not take a slot.
func TestWriteStateAssignsPhases(t *testing.T) {
	cfg := fakeRoot(t)
	h := discover(t, cfg)
	shares := []int{30, 20, 10, 25, 15}
	var wg sync.WaitGroup
	errs := make(chan error, len(shares)+3)
	create := func(id string, env ...string) {
		defer wg.Done()
		p, err := NewPlan(mustReq(t, env...), cfg, h, id)
		if err == nil {
			err = p.WriteState("")
		}
		if err != nil {
			errs <- fmt.Errorf("%s: %w", id, err)
		}
	}
	for i, s := range shares {
		wg.Add(1)
		go create(fmt.Sprintf("c%d", i), "VGPU_VISIBLE_DEVICES=0", fmt.Sprintf("VGPU_COMPUTE_LIMIT=%d", s))
	}
	wg.Add(2)
	go create("other-gpu", "VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=90")
	go create("unlimited", "VGPU_VISIBLE_DEVICES=0")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var slots []slot
	for i, s := range shares {
		_, q, err := ReadState(cfg.StateDir, fmt.Sprintf("c%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if q.Devices[0].Phase == nil {
			t.Fatalf("c%d: no phase in its quota file", i)
		}
		slots = append(slots, slot{*q.Devices[0].Phase, s})
	}
	for i := range slots {
		for j := i + 1; j < len(slots); j++ {
			if ov := overlap(slots[i], slots[j]); ov != 0 {
				t.Errorf("slots %v and %v overlap by %d points", slots[i], slots[j], ov)
			}
		}
	}
	if _, q, _ := ReadState(cfg.StateDir, "other-gpu"); q == nil || q.Devices[0].Phase == nil || *q.Devices[0].Phase != 0 {
		t.Errorf("the other GPU's container should start at phase 0: %+v", q)
	}
	if _, q, _ := ReadState(cfg.StateDir, "unlimited"); q == nil || q.Devices[0].Phase != nil {
		t.Errorf("an unlimited container got a phase: %+v", q)
	}

	// A removed container frees its slot; launch-by-launch pacing takes none.
	if err := RemoveState(cfg.StateDir, "c0"); err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(mustReq(t, "VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=30"), cfg, h, "again")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteState(""); err != nil {
		t.Fatal(err)
	}
	if ph := p.Quota.Devices[0].Phase; ph == nil || *ph != slots[0].start {
		t.Errorf("after c0 left, a 30 %% container got phase %v, want c0's %d", ph, slots[0].start)
	}
	// A container killed and never deleted (its init pid gone) frees its slot;
	// one not started yet (no pid) keeps it.
	uuid := twoGPUs[0].UUID
	if n := len(takenSlots(cfg.StateDir, config.DefaultComputePeriodMS)[uuid]); n != len(shares) {
		t.Fatalf("%d slots taken on GPU 0, want %d", n, len(shares))
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := SetPIDs(cfg.StateDir, "again", []int{dead.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	if n := len(takenSlots(cfg.StateDir, config.DefaultComputePeriodMS)[uuid]); n != len(shares)-1 {
		t.Errorf("%d slots taken on GPU 0 with a stale container, want %d", n, len(shares)-1)
	}
	if err := SetPIDs(cfg.StateDir, "again", []int{os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	if n := len(takenSlots(cfg.StateDir, config.DefaultComputePeriodMS)[uuid]); n != len(shares) {
		t.Errorf("%d slots taken on GPU 0 with a live container, want %d", n, len(shares))
	}
	cfg.Library.ComputePeriod = "0"
	p, err = NewPlan(mustReq(t, "VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=30"), cfg, h, "nogate")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteState(""); err != nil {
		t.Fatal(err)
	}
	if p.Quota.Devices[0].Phase != nil {
		t.Errorf("period 0 (launch by launch) got a phase")
	}
}

// The host's idea of the library's default period is the library's.
func TestDefaultPeriodMatchesLibrary(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "lib", "cudahook", "src", "compute.h"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`#define VGPU_PERIOD_MS (\d+)`).FindSubmatch(src)
	if m == nil || string(m[1]) != fmt.Sprint(config.DefaultComputePeriodMS) {
		t.Errorf("compute.h VGPU_PERIOD_MS %q, config.DefaultComputePeriodMS %d", m, config.DefaultComputePeriodMS)
	}
}
