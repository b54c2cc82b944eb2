//go:build vgpubench && integration

// Device shares measured in real time on the simulated GPU, with tight
// tolerances: they hold only on an idle machine, so they are figures for
// `make bench` (bench/run.sh runs them with -tags vgpubench -v), not part of
// `make test`. The pacer's decisions are tested exactly in TestPacer.
package cudahook_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// Every launch path, alone on a device, reaches P% of the unlimited throughput.
func TestShareEveryLaunchPath(t *testing.T) {
	ref := unlimitedRate(t)
	cases := []struct {
		mode string
		pct  int
	}{
		{"kernel", 30}, {"kernel", 50}, {"ptsz", 50}, {"procaddr", 30}, {"graph", 50}, {"graph_ptsz", 30},
		{"ex", 50}, {"coop", 30}, {"mixed", 50}, {"threads", 30}, {"contexts", 50}, {"capture", 50},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.mode, tc.pct), func(t *testing.T) {
			t.Parallel()
			retry(t, func() (errs []string) {
				root, err := simroot.Create(t.TempDir(), simroot.Options{})
				if err != nil {
					t.Fatal(err)
				}
				c := newContainer(t, root, tc.pct)
				r := c.start(t, tc.mode)
				measure(t, 300*time.Millisecond, 1500*time.Millisecond, r)
				res := r.wait(t)
				got := pctOf(rate(t, res), ref)
				occ := 100 * float64(res.u(t, "busy0_ns")) / float64(res.u(t, "window_ns"))
				t.Logf("%s at %d%%: %.1f%% of the unlimited throughput; device busy %.1f%% of the window", tc.mode, tc.pct, got, occ)
				if got < float64(tc.pct)-3 || got > float64(tc.pct)+3 {
					errs = append(errs, fmt.Sprintf("%s at compute=%d: throughput %.1f%% of unlimited, want %d ± 3", tc.mode, tc.pct, got, tc.pct))
				}
				if occ > float64(tc.pct)+3 {
					errs = append(errs, fmt.Sprintf("%s at compute=%d: the device was busy %.1f%% of the window", tc.mode, tc.pct, occ))
				}
				if tc.mode == "capture" && (res.kv["captures_failed"] != "0" || res.u(t, "captures_ok") < 50) {
					errs = append(errs, fmt.Sprintf("captures in another thread: %s failed, %s ok; pacing must not break them",
						res.kv["captures_failed"], res.kv["captures_ok"]))
				}
				if tc.mode == "procaddr" && res.kv["procaddr_is_wrapper"] != "1" {
					errs = append(errs, "cuGetProcAddress_v2(cuLaunchKernel, PER_THREAD) did not return the stand-in's cuLaunchKernel_ptsz")
				}
				// the measured device time is in the region for vgpu status
				busy, launches := regionCompute(t, c.shared, 0)
				all := res.u(t, "launches")
				if launches > all || launches+8 < all {
					errs = append(errs, fmt.Sprintf("region: %d launches measured, the client made %d", launches, all))
				}
				if want := launches * 2e6; busy < want*98/100 || busy > want*102/100 {
					errs = append(errs, fmt.Sprintf("region: busy %d ns over %d launches of 2 ms, want %d", busy, launches, want))
				}
				return errs
			})
		})
	}
}

// Launches of 10 and 30 us: measured 1 in 8 at random, the others charged
// the estimate those samples keep; the share is still P, and what the region
// accounts is the device time that ran.
func TestShareTinyKernelsSampled(t *testing.T) {
	share := func(compute int) (perS float64, launches, regionBusy, regionLaunches uint64) {
		root, err := simroot.Create(t.TempDir(), simroot.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c := newContainer(t, root, compute)
		r := c.start(t, "tiny")
		measure(t, 300*time.Millisecond, 1500*time.Millisecond, r)
		res := r.wait(t)
		busy, n := regionCompute(t, c.shared, 0)
		return rate(t, res), res.u(t, "launches"), busy, n
	}
	// The simulator's launch path costs a few us of CPU, so an unlimited run
	// of 20 us kernels may not keep the device busy: the share is taken of the
	// device (launches × 20 us per second of wall time), not of that run.
	ref, _, _, _ := share(0)
	if ref*20e-6*100 < 60 {
		t.Skipf("unlimited: %.0f launches of 20 us a second; this machine is too loaded to load the simulated device", ref)
	}
	retry(t, func() (errs []string) {
		got, launches, busy, accounted := share(50)
		occ := got * 20e-6 * 100
		t.Logf("20 us launches: unlimited %.0f/s (device %.1f%% busy); at 50%%: %.0f/s, device %.1f%% busy; region: %d of %d launches, %.2f us each",
			ref, ref*20e-6*100, got, occ, accounted, launches, float64(busy)/float64(accounted)/1e3)
		if occ < 46 || occ > 54 {
			errs = append(errs, fmt.Sprintf("tiny kernels at compute=50: device %.1f%% busy, want 50 ± 4", occ))
		}
		if accounted > launches || accounted+8 < launches {
			errs = append(errs, fmt.Sprintf("region: %d launches accounted, the client made %d", accounted, launches))
		}
		if per := float64(busy) / float64(accounted); per < 19e3 || per > 21e3 {
			errs = append(errs, fmt.Sprintf("region: %.0f ns a launch accounted, the launches took 20000 on average", per))
		}
		return errs
	})
}

// Two containers on one device at 30 and 70 get 30:70.
// Free-running, and in the slots the host would give them (0-30, 30-100).
func TestShareTwoContainers(t *testing.T) {
	eachWay(t, 0, shareTwoContainers)
}

// twoContainersShareByLimit: the first container's slot at phase, the second's right after it.
func shareTwoContainers(t *testing.T, phase *int) {
	ref := unlimitedRate(t)
	retry(t, func() (errs []string) {
		root, err := simroot.Create(t.TempDir(), simroot.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var next *int
		if phase != nil {
			next = intp((*phase + 30) % 100)
		}
		a, b := newContainerSlot(t, root, phase, 30), newContainerSlot(t, root, next, 70)
		ra, rb := a.start(t, "kernel"), b.start(t, "kernel")
		measure(t, 300*time.Millisecond, 2500*time.Millisecond, ra, rb)
		resA, resB := ra.wait(t), rb.wait(t)
		pa, pb := pctOf(rate(t, resA), ref), pctOf(rate(t, resB), ref)
		if phase != nil {
			// two turns that fill the period: the device is busy all the time
			if occ := 100 * float64(resA.u(t, "busy0_ns")) / float64(resA.u(t, "window_ns")); occ < 95 {
				errs = append(errs, fmt.Sprintf("slots 0-30 and 30-100: device busy %.1f%% of the window, want ≥ 95", occ))
			}
		}
		share := 100 * pa / (pa + pb)
		t.Logf("compute=30: %.1f%%, compute=70: %.1f%% of unlimited; share of the first %.1f%%", pa, pb, share)
		if pa < 25 || pa > 35 || pb < 65 || pb > 75 {
			errs = append(errs, fmt.Sprintf("throughputs %.1f%% and %.1f%%, want 30 and 70 ± 5", pa, pb))
		}
		if share < 25 || share > 35 {
			errs = append(errs, fmt.Sprintf("ratio %.1f:%.1f, want 30:70 ± 5", share, 100-share))
		}
		return errs
	})
}

// Two processes of one container share its limit (the bucket is in the region).
func TestShareProcessesOfOneContainer(t *testing.T) {
	eachWay(t, 20, shareProcessesPool)
}

func shareProcessesPool(t *testing.T, phase *int) {
	ref := unlimitedRate(t)
	retry(t, func() (errs []string) {
		root, err := simroot.Create(t.TempDir(), simroot.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c := newContainerSlot(t, root, phase, 50)
		r1, r2 := c.start(t, "kernel"), c.start(t, "ptsz")
		measure(t, 300*time.Millisecond, 2500*time.Millisecond, r1, r2)
		res1, res2 := r1.wait(t), r2.wait(t)
		p1, p2 := pctOf(rate(t, res1), ref), pctOf(rate(t, res2), ref)
		t.Logf("one container at 50%%, two processes: %.1f%% + %.1f%% = %.1f%%", p1, p2, p1+p2)
		if p1+p2 < 47 || p1+p2 > 53 {
			errs = append(errs, fmt.Sprintf("together %.1f%% of unlimited, want 50 ± 3", p1+p2))
		}
		if p1 < 15 || p2 < 15 {
			errs = append(errs, fmt.Sprintf("one process starves: %.1f%% and %.1f%%", p1, p2))
		}
		return errs
	})
}

// cuLaunchCooperativeKernelMultiDevice: each device paced by its own limit.
func TestShareMultiDeviceLaunch(t *testing.T) {
	retry(t, func() (errs []string) {
		root, err := simroot.Create(t.TempDir(), simroot.Options{Devices: make([]simroot.Device, 2)})
		if err != nil {
			t.Fatal(err)
		}
		c := newContainer(t, root, 50, 50)
		r := c.start(t, "multi")
		measure(t, 300*time.Millisecond, 1500*time.Millisecond, r)
		res := r.wait(t)
		win := float64(res.u(t, "window_ns"))
		o0, o1 := 100*float64(res.u(t, "busy0_ns"))/win, 100*float64(res.u(t, "busy1_ns"))/win
		t.Logf("multi-device launch at 50%%: devices busy %.1f%% and %.1f%%", o0, o1)
		for d, o := range []float64{o0, o1} {
			if o < 47 || o > 53 {
				errs = append(errs, fmt.Sprintf("device %d busy %.1f%% of the window, want 50 ± 3", d, o))
			}
		}
		return errs
	})
}

// The table: for P in 10, 25, 50, 75 and kernels of 50 us, 1 ms and
// 20 ms, launched back to back on one and on four streams and replayed from a
// graph, with the library's default pacing period, the device is busy P% ± 3
// of a 5 s window. The four limits of one row run at once, each on its own
// simulated device.
func TestShareMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the matrix takes about a minute")
	}
	const window = 5 * time.Second
	for _, us := range []string{"50", "1000", "20000"} {
		for _, layout := range []string{"1", "4", "graph"} {
			t.Run(us+"us/"+layout, func(t *testing.T) {
				retry(t, func() (errs []string) {
					pcts := []int{10, 25, 50, 75}
					runs := make([]*run, len(pcts))
					for i, p := range pcts {
						root, err := simroot.Create(t.TempDir(), simroot.Options{})
						if err != nil {
							t.Fatal(err)
						}
						// as the host sets a container up: the default period, a slot from phase 0
						runs[i] = newContainerQuota(t, root, nil, intp(0), p).start(t, "matrix", us, layout)
					}
					measure(t, time.Second, window, runs...)
					for i, r := range runs {
						res := r.wait(t)
						busy := 100 * float64(res.u(t, "busy0_ns")) / float64(res.u(t, "window_ns"))
						t.Logf("%s us kernels, %s: compute=%d -> device busy %.1f%%", us, layout, pcts[i], busy)
						if busy < float64(pcts[i])-3 || busy > float64(pcts[i])+3 {
							errs = append(errs, fmt.Sprintf("%s us kernels, %s, compute=%d: device busy %.1f%% of 5 s, want %d ± 3", us, layout, pcts[i], busy, pcts[i]))
						}
					}
					return errs
				})
			})
		}
	}
}

// With a phase from the host, the container's work runs in its slot of every
// period (so that containers on one GPU take turns instead of time-slicing),
// including a slot that wraps round the period's end, and still gets its
// share. Without a phase the same work falls in that slot only by chance.
func TestSharePhaseSlots(t *testing.T) {
	retry(t, func() (errs []string) {
		cases := []struct {
			pct   int
			phase *int
		}{{30, intp(50)}, {30, intp(85)}, {30, nil}}
		runs := make([]*run, len(cases))
		for i, tc := range cases {
			root, err := simroot.Create(t.TempDir(), simroot.Options{})
			if err != nil {
				t.Fatal(err)
			}
			c := newContainerSlot(t, root, tc.phase, tc.pct)
			c.vars = append(c.vars, fmt.Sprintf("COMPUTE_SLOT=%d %d %d", mechanismPeriodMS, slotOf(tc.phase), tc.pct))
			runs[i] = c.start(t, "kernel")
		}
		measure(t, 300*time.Millisecond, 2*time.Second, runs...)
		for i, r := range runs {
			res := r.wait(t)
			tc := cases[i]
			busy := 100 * float64(res.u(t, "busy0_ns")) / float64(res.u(t, "window_ns"))
			in := 100 * float64(res.u(t, "slot_busy_ns")) / float64(res.u(t, "busy0_ns"))
			t.Logf("compute=%d phase=%d (%v): device busy %.1f%%, %.1f%% of it in the slot", tc.pct, slotOf(tc.phase), tc.phase != nil, busy, in)
			if busy < float64(tc.pct)-3 || busy > float64(tc.pct)+3 {
				errs = append(errs, fmt.Sprintf("compute=%d phase=%d (%v): device busy %.1f%%, want %d ± 3", tc.pct, slotOf(tc.phase), tc.phase != nil, busy, tc.pct))
			}
			if tc.phase != nil && in < 95 {
				errs = append(errs, fmt.Sprintf("compute=%d phase=%d: %.1f%% of the busy time in the slot, want ≥ 95", tc.pct, *tc.phase, in))
			}
			if tc.phase == nil && in > 80 {
				errs = append(errs, fmt.Sprintf("no phase: %.1f%% of the busy time in one slot; the test cannot tell slots from chance", in))
			}
		}
		return errs
	})
}

// Without a limit the library costs no device share: for each kernel size on
// one stream, the device is as busy under the library as without it (± 1).
func TestShareNoLimitMatchesNative(t *testing.T) {
	retry(t, func() (errs []string) {
		sizes := []string{"50", "1000", "20000"}
		var native, limited []*run
		for _, us := range sizes {
			for _, lib := range []bool{false, true} {
				root, err := simroot.Create(t.TempDir(), simroot.Options{})
				if err != nil {
					t.Fatal(err)
				}
				c := newContainer(t, root, 0)
				if !lib {
					c.vars = append(c.vars, "LD_PRELOAD=")
					native = append(native, c.start(t, "matrix", us, "1"))
				} else {
					limited = append(limited, c.start(t, "matrix", us, "1"))
				}
			}
		}
		measure(t, 500*time.Millisecond, 2*time.Second, append(native, limited...)...)
		for i, us := range sizes {
			n, l := native[i].wait(t), limited[i].wait(t)
			bn := 100 * float64(n.u(t, "busy0_ns")) / float64(n.u(t, "window_ns"))
			bl := 100 * float64(l.u(t, "busy0_ns")) / float64(l.u(t, "window_ns"))
			t.Logf("%s us kernels, no limit: device busy %.1f%% without the library, %.1f%% with it", us, bn, bl)
			if bl < bn-1 {
				errs = append(errs, fmt.Sprintf("%s us kernels: device busy %.1f%% under the library without a limit, %.1f%% without it", us, bl, bn))
			}
		}
		return errs
	})
}
