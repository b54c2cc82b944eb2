//go:build vgpubench && integration

package cudahook_test

import (
	"sort"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// The order's figure for `make bench` (bench/run.sh): a light tenant's 1 ms
// requests every 8 ms beside a tenant flooding 2 ms kernels, vgpu node
// running, in interleaved rounds: with priorities (light high, flooder low)
// and without (both normal: the light one, below its request of 20, wakes
// at once by the equal-priority rule). Without any order its requests wait
// behind the flooder's queue (TestPriorityHighWaitsForOneLowKernel's
// control, docs/results.md). Each round prints the light tenant's
// launch-to-done p50, p90 and max and the flooder's device share; then the
// medians. Figures only: an idle machine is needed for them to mean much.
func TestBenchPriorityWait(t *testing.T) {
	const rounds = 3
	type fig struct{ p50, p90, max, low float64 }
	runs := map[bool][]fig{}
	for r := 0; r < rounds; r++ {
		for _, prio := range []bool{true, false} {
			root, err := simroot.Create(t.TempDir(), simroot.Options{})
			if err != nil {
				t.Fatal(err)
			}
			stateDir := t.TempDir()
			r20, r30 := 20, 30
			hi := tenantIn(t, root, stateDir, "hi", 100, &r20)
			lo := tenantIn(t, root, stateDir, "lo", 100, &r30)
			if prio {
				setPriority(t, stateDir, "hi", contract.PriorityHigh)
				setPriority(t, stateDir, "lo", contract.PriorityLow)
			}
			startNode(t, stateDir, noNVML{}, nil)
			rl, rh := lo.start(t, "kernel"), hi.start(t, "latency")
			measure(t, time.Second, 3*time.Second, rl, rh)
			resL, resH := rl.wait(t), rh.wait(t)
			f := fig{float64(resH.u(t, "lat_p50_ns")) / 1e6, float64(resH.u(t, "lat_p90_ns")) / 1e6, float64(resH.u(t, "lat_max_ns")) / 1e6, occupancy(t, resL)}
			t.Logf("round %d, priorities %v: light p50 %.2f ms p90 %.2f ms max %.2f ms; flooder %.1f%% of the device", r, prio, f.p50, f.p90, f.max, f.low)
			runs[prio] = append(runs[prio], f)
		}
	}
	med := func(fs []fig, get func(fig) float64) float64 {
		v := make([]float64, len(fs))
		for i, f := range fs {
			v[i] = get(f)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	for _, prio := range []bool{true, false} {
		fs := runs[prio]
		t.Logf("priorities %v, medians of %d rounds: light p50 %.2f ms p90 %.2f ms max %.2f ms; flooder %.1f%%", prio, rounds,
			med(fs, func(f fig) float64 { return f.p50 }), med(fs, func(f fig) float64 { return f.p90 }),
			med(fs, func(f fig) float64 { return f.max }), med(fs, func(f fig) float64 { return f.low }))
	}
}
