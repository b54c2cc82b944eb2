//go:build integration

// Compute limits against the simulated GPU: a simulated kernel runs for real
// time (busy_2000us = 2 ms), one kernel at a time per device, FIFO across
// processes. On a loaded machine the launch loops get less CPU than they want,
// so the tests here assert only what holds with wide margins whatever the load:
// a limit bounds the device time from above, a container's processes share one
// budget, nothing deadlocks, every launch is accounted. The pacer's decisions
// are tested exactly in TestPacer; shares with tight tolerances are figures of
// `make bench` (compute_bench_test.go).
package cudahook_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// computeClient builds testdata/compute.c once, linked with -lcuda.
func computeClient(t *testing.T) string { return simClient(t, "compute", "-lpthread") }

// container: one quota file and one shared dir on a simulated driver root.
type container struct {
	shared string
	vars   []string
}

// mechanismPeriodMS is the pacing period of the tests of each mechanism: short,
// so that their windows of 1.5 to 2.5 s hold many periods. The default period
// is measured by TestShareMatrix (make bench) over 5 s.
const mechanismPeriodMS = 100

// newContainer makes a container with one quota device per entry of compute
// (0 = no compute limit), on devices 0..n-1 of root, paced with period
// mechanismPeriodMS.
func newContainer(t *testing.T, root *simroot.Root, compute ...int) *container {
	t.Helper()
	return newContainerSlot(t, root, nil, compute...)
}

// newContainerSlot: newContainer with a phase for every device, as the host
// gives one (nil: none, a free-running gate).
func newContainerSlot(t *testing.T, root *simroot.Root, phase *int, compute ...int) *container {
	t.Helper()
	p := mechanismPeriodMS
	return newContainerQuota(t, root, &p, phase, compute...)
}

// eachWay runs f free-running (phase nil) and in a slot at phase, as subtests.
func eachWay(t *testing.T, phase int, f func(t *testing.T, phase *int)) {
	for _, ph := range []*int{nil, &phase} {
		t.Run(fmt.Sprintf("slot=%v", ph != nil), func(t *testing.T) { f(t, ph) })
	}
}

// newContainerQuota: newContainer with a pacing period in ms (nil: the
// library's default) and a phase for every device (nil: none).
func newContainerQuota(t *testing.T, root *simroot.Root, periodMS, phase *int, compute ...int) *container {
	t.Helper()
	b := buildDir(t)
	dir := t.TempDir()
	q := &quota.File{
		DriverCuda:      filepath.Join(root.LibDir(), "libcuda.so."+simroot.DriverVersion),
		DriverNvml:      filepath.Join(root.LibDir(), "libnvidia-ml.so."+simroot.DriverVersion),
		SharedDir:       filepath.Join(dir, "shared"),
		ComputePeriodMS: periodMS,
	}
	for i, c := range compute {
		q.Devices = append(q.Devices, tenant.Device{Index: i, GPU: tenant.GPU{UUID: simroot.DefaultUUID(i)}, Compute: unlimitedIfZero(c), Phase: phase})
	}
	data, err := q.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(q.SharedDir, 0o700); err != nil {
		t.Fatal(err)
	}
	quota := filepath.Join(dir, "quota")
	if err := os.WriteFile(quota, data, 0o600); err != nil {
		t.Fatal(err)
	}
	vars := append(os.Environ(), root.Env()...)
	vars = append(vars, "VGPU_QUOTA_FILE="+quota,
		"LD_PRELOAD="+filepath.Join(b, "lib", "libvgpu-cuda.so")+":"+filepath.Join(b, "lib", "libvgpu-nvml.so"))
	return &container{shared: q.SharedDir, vars: vars}
}

func monoNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

type run struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	rest  bytes.Buffer
	errb  bytes.Buffer
	what  string
}

// start runs the client in c; it returns once the client is set up (context,
// module, graph) and waits for its window.
func (c *container) start(t *testing.T, mode string, args ...string) *run {
	t.Helper()
	r := &run{what: strings.Join(append([]string{mode}, args...), " ")}
	r.cmd = exec.Command(computeClient(t), append([]string{mode}, args...)...)
	r.cmd.Env = c.vars
	r.cmd.Stderr = &r.errb
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.out = bufio.NewReader(stdout)
	for {
		line, err := r.out.ReadString('\n')
		if err != nil {
			_ = r.cmd.Wait()
			t.Fatalf("compute %s: no ready line (%v)\nstdout: %s\nstderr: %s", mode, err, line, r.errb.String())
		}
		r.rest.WriteString(line)
		if line == "ready\n" {
			return r
		}
	}
}

// measure gives every run the same window: warm after now, d long.
func measure(t *testing.T, warm, d time.Duration, runs ...*run) {
	t.Helper()
	s := monoNow() + uint64(warm)
	for _, r := range runs {
		if _, err := fmt.Fprintf(r.stdin, "%d %d\n", s, s+uint64(d)); err != nil {
			t.Fatal(err)
		}
		r.stdin.Close()
	}
}

func (r *run) wait(t *testing.T) result {
	t.Helper()
	rest, _ := io.ReadAll(r.out)
	r.rest.Write(rest)
	if err := r.cmd.Wait(); err != nil {
		t.Fatalf("compute %s: %v\nstdout: %s\nstderr: %s", r.what, err, r.rest.String(), r.errb.String())
	}
	res := result{kv: parseKV(r.rest.String()), stderr: r.errb.String()}
	if e, ok := res.kv["error"]; ok {
		t.Fatalf("compute %s: %s\nstderr: %s", r.what, e, res.stderr)
	}
	return res
}

// rate: launches per second within the window.
func rate(t *testing.T, r result) float64 {
	t.Helper()
	return float64(r.u(t, "counted")) / (float64(r.u(t, "window_ns")) / 1e9)
}

var (
	refOnce sync.Once
	refRate float64
)

// unlimitedRate is the simulated device's throughput with no limit, measured
// once per test binary.
func unlimitedRate(t *testing.T) float64 {
	t.Helper()
	refOnce.Do(func() { refRate = measureUnlimited(t) })
	if refRate == 0 {
		t.Fatal("no unlimited reference (see the first test that measured it)")
	}
	return refRate
}

func measureUnlimited(t *testing.T) float64 {
	t.Helper()
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newContainer(t, root, 0)
	r := c.start(t, "kernel")
	measure(t, 200*time.Millisecond, 1500*time.Millisecond, r)
	res := r.wait(t)
	ref := rate(t, res)
	t.Logf("unlimited: %.1f launches/s (a 2 ms kernel: at most 500)", ref)
	if ref < 400 || ref > 505 {
		t.Errorf("unlimited throughput %.1f/s: the simulated device should run about 500 kernels of 2 ms a second", ref)
		return 0
	}
	// no limit: the fast path never measures anything
	if busy, launches := regionCompute(t, c.shared, 0); busy != 0 || launches != 0 {
		t.Errorf("without a limit the region shows busy %d ns over %d launches: the pacing code ran", busy, launches)
	}
	return ref
}

// regionHeader reads the header of the container's region, of this
// release's layout.
func regionHeader(t *testing.T, shared string) contract.RegionHeader {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(shared, contract.RegionFile))
	if err != nil {
		t.Fatal(err)
	}
	h, ok := contract.DecodeRegionHeader(b)
	if !ok || h.Version != contract.RegionVersion {
		t.Fatalf("region of %d bytes, layout version %d, want %d", len(b), h.Version, contract.RegionVersion)
	}
	return h
}

// regionCompute reads the compute fields of device d from the container's
// region.
func regionCompute(t *testing.T, shared string, d int) (busy, launches uint64) {
	t.Helper()
	h := regionHeader(t, shared)
	return h.Compute[d].BusyNs, h.Compute[d].Launches
}

func pctOf(r, ref float64) float64 { return 100 * r / ref }

// retry runs a timing measurement that returns what is out of tolerance. On a
// loaded machine (2 cores shared with other tests and users) a process can be
// descheduled for longer than the burst covers; such a measurement is taken once
// more before it counts as a failure.
func retry(t *testing.T, attempt func() []string) {
	t.Helper()
	errs := attempt()
	if len(errs) == 0 {
		return
	}
	t.Logf("out of tolerance, measuring again: %s", strings.Join(errs, "; "))
	for _, e := range attempt() {
		t.Error(e)
	}
}

// loadMargin: how far above its limit a container's device time may be seen
// on a loaded machine (a late wake-up, a measurement charged one period late).
// A broken limit shows the unlimited device time, 100 %.
const loadMargin = 12

// occupancy: the percent of the window the client's own 2 ms kernels kept
// the device busy (launches completed in the window x 2 ms).
func occupancy(t *testing.T, r result) float64 {
	t.Helper()
	return 100 * float64(r.u(t, "counted")) * 2e6 / float64(r.u(t, "window_ns"))
}

// Every launch path, alone on a device, is held to its limit, makes progress,
// and each of its launches is measured and accounted in the region.
func TestComputeLimitEveryLaunchPath(t *testing.T) {
	cases := []struct {
		mode string
		pct  int
	}{
		{"kernel", 30}, {"ptsz", 50}, {"procaddr", 30}, {"graph", 50}, {"graph_ptsz", 30},
		{"ex", 50}, {"coop", 30}, {"mixed", 50}, {"threads", 30}, {"contexts", 50}, {"capture", 50},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.mode, tc.pct), func(t *testing.T) {
			t.Parallel()
			root, err := simroot.Create(t.TempDir(), simroot.Options{})
			if err != nil {
				t.Fatal(err)
			}
			c := newContainer(t, root, tc.pct)
			r := c.start(t, tc.mode)
			measure(t, 300*time.Millisecond, 1500*time.Millisecond, r)
			res := r.wait(t)
			occ := 100 * float64(res.u(t, "busy0_ns")) / float64(res.u(t, "window_ns"))
			t.Logf("%s at %d%%: device busy %.1f%% of the window, %d launches", tc.mode, tc.pct, occ, res.u(t, "counted"))
			if occ > float64(tc.pct+loadMargin) {
				t.Errorf("%s at compute=%d: the device was busy %.1f%% of the window", tc.mode, tc.pct, occ)
			}
			if res.u(t, "counted") == 0 {
				t.Errorf("%s at compute=%d: no launch completed in 1.5 s", tc.mode, tc.pct)
			}
			if tc.mode == "capture" && (res.kv["captures_failed"] != "0" || res.u(t, "captures_ok") == 0) {
				t.Errorf("captures in another thread: %s failed, %s ok; pacing must not break them",
					res.kv["captures_failed"], res.kv["captures_ok"])
			}
			if tc.mode == "procaddr" && res.kv["procaddr_is_wrapper"] != "1" {
				t.Error("cuGetProcAddress_v2(cuLaunchKernel, PER_THREAD) did not return the stand-in's cuLaunchKernel_ptsz")
			}
			// the measured device time is in the region for vgpu status
			busy, launches := regionCompute(t, c.shared, 0)
			all := res.u(t, "launches")
			if launches > all || launches+8 < all {
				t.Errorf("region: %d launches measured, the client made %d", launches, all)
			}
			if min := launches * 2e6 * 95 / 100; busy < min || busy > launches*2e6*3/2 {
				t.Errorf("region: busy %d ns over %d launches of 2 ms", busy, launches)
			}
		})
	}
}

// Two processes of one container share its limit (the bucket is in the
// region): together they stay near 50, where two budgets would give 100.
func TestComputeProcessesOfOneContainerPool(t *testing.T) {
	eachWay(t, 20, func(t *testing.T, phase *int) {
		root, err := simroot.Create(t.TempDir(), simroot.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c := newContainerSlot(t, root, phase, 50)
		r1, r2 := c.start(t, "kernel"), c.start(t, "ptsz")
		measure(t, 300*time.Millisecond, 2500*time.Millisecond, r1, r2)
		res1, res2 := r1.wait(t), r2.wait(t)
		o1, o2 := occupancy(t, res1), occupancy(t, res2)
		t.Logf("one container at 50%%, two processes: device %.1f%% + %.1f%% = %.1f%%", o1, o2, o1+o2)
		if o1+o2 > 50+loadMargin {
			t.Errorf("together %.1f%% of the device, want at most 50 (+%d on a loaded machine)", o1+o2, loadMargin)
		}
		if res1.u(t, "counted") == 0 || res2.u(t, "counted") == 0 {
			t.Errorf("a process made no progress: %d and %d launches", res1.u(t, "counted"), res2.u(t, "counted"))
		}
	})
}

// Two containers on one device at 30 and 70: each is held to its own limit,
// free-running and in the slots the host would give them (0-30, 30-100).
func TestComputeTwoContainersEachHeld(t *testing.T) {
	eachWay(t, 0, func(t *testing.T, phase *int) {
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
		oa, ob := occupancy(t, resA), occupancy(t, resB)
		t.Logf("compute=30: device %.1f%%, compute=70: %.1f%%", oa, ob)
		if oa > 30+loadMargin || ob > 70+loadMargin {
			t.Errorf("device %.1f%% and %.1f%%, want at most 30 and 70 (+%d on a loaded machine)", oa, ob, loadMargin)
		}
		if resA.u(t, "counted") == 0 || resB.u(t, "counted") == 0 {
			t.Errorf("a container made no progress: %d and %d launches", resA.u(t, "counted"), resB.u(t, "counted"))
		}
	})
}

// with returns a copy of c whose processes also get vars.
func (c *container) with(vars ...string) *container {
	return &container{shared: c.shared, vars: append(append([]string(nil), c.vars...), vars...)}
}

// Per-device compute limits follow the physical GPU whatever the process's
// CUDA_VISIBLE_DEVICES: the container's GPU 0 (host GPU 0) at 30 and GPU 1
// at 70; under "1,0" (or the UUIDs in that order) ordinal 0 is host GPU 1
// and ordinal 1 host GPU 0. Two processes, one on each ordinal, busy at
// once: the one on host GPU 0 is held to 30 (a limit taken by ordinal would
// give it 70), and each GPU's device time lands in its own region slot.
func TestComputeLimitFollowsPhysicalGPU(t *testing.T) {
	for _, cvd := range []string{"1,0", simroot.DefaultUUID(1) + "," + simroot.DefaultUUID(0)} {
		t.Run(cvd, func(t *testing.T) {
			root, err := simroot.Create(t.TempDir(), simroot.Options{Devices: make([]simroot.Device, 2)})
			if err != nil {
				t.Fatal(err)
			}
			c := newContainer(t, root, 30, 70).with("CUDA_VISIBLE_DEVICES=" + cvd)
			on1 := c.with("COMPUTE_DEVICE=0").start(t, "kernel") // host GPU 1: 70
			on0 := c.with("COMPUTE_DEVICE=1").start(t, "kernel") // host GPU 0: 30
			measure(t, 300*time.Millisecond, 2000*time.Millisecond, on1, on0)
			r1, r0 := on1.wait(t), on0.wait(t)
			o1, o0 := occupancy(t, r1), occupancy(t, r0)
			t.Logf("CUDA_VISIBLE_DEVICES=%s: ordinal 0 (host GPU 1, limit 70) %.1f%%, ordinal 1 (host GPU 0, limit 30) %.1f%%", cvd, o1, o0)
			if o0 > 30+loadMargin || o1 > 70+loadMargin {
				t.Errorf("host GPU 0 busy %.1f%%, host GPU 1 %.1f%%: want at most 30 and 70 (+%d on a loaded machine)", o0, o1, loadMargin)
			}
			if r0.u(t, "counted") == 0 || r1.u(t, "counted") == 0 {
				t.Errorf("a process made no progress: %d and %d launches", r0.u(t, "counted"), r1.u(t, "counted"))
			}
			b0, n0 := regionCompute(t, c.shared, 0)
			b1, n1 := regionCompute(t, c.shared, 1)
			if n0 == 0 || n1 == 0 || b1 <= b0 {
				t.Errorf("region: container GPU 0 (host 0, 30) %d launches, %d ns; GPU 1 (host 1, 70) %d launches, %d ns: want both charged, GPU 1 more",
					n0, b0, n1, b1)
			}
		})
	}
}

// cuLaunchCooperativeKernelMultiDevice: each device held by its own limit.
func TestComputeMultiDeviceLaunch(t *testing.T) {
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
		if o > 50+loadMargin || o == 0 {
			t.Errorf("device %d busy %.1f%% of the window, want at most 50 (+%d on a loaded machine), more than 0", d, o, loadMargin)
		}
	}
}

// A launch measured long after it ran (the process paused between launches)
// is still charged its device time: the region accounts every 2 ms kernel.
func TestComputeLateMeasurementCharged(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newContainer(t, root, 50)
	r := c.start(t, "idle")
	measure(t, 0, 4*time.Second, r)
	res := r.wait(t)
	busy, accounted := regionCompute(t, c.shared, 0)
	launches := res.u(t, "launches")
	t.Logf("%d launches of 2 ms, %d accounted, busy %d ns", launches, accounted, busy)
	// the last launch is accounted at a launch that never comes
	if accounted+1 < launches || float64(busy) < 0.9*2e6*float64(accounted) {
		t.Errorf("region: %d of %d launches accounted, busy %d ns; want about 2 ms each", accounted, launches, busy)
	}
}

// compute=1 still makes progress, and a thread of a process that pacing holds
// back still gets answers from cuStreamQuery, cuEventQuery, cuStreamSynchronize.
func TestComputeLimitOneProgressesAndAnswers(t *testing.T) {
	eachWay(t, 0, limitOneProgressesAndAnswers)
}

// limitOneProgressesAndAnswers: free-running (phase nil) or in a slot of 1 ms.
func limitOneProgressesAndAnswers(t *testing.T, phase *int) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newContainerSlot(t, root, phase, 1)
	r := c.start(t, "starve")
	measure(t, 100*time.Millisecond, 2000*time.Millisecond, r)
	res := r.wait(t)
	n := res.u(t, "counted")
	occ := occupancy(t, res)
	maxq := time.Duration(res.u(t, "max_query_ns"))
	t.Logf("compute=1: %d launches in 2 s (device %.2f%%); %d query rounds meanwhile, slowest %v", n, occ, res.u(t, "queries"), maxq)
	// progress, not a rate: in a slot of 1 ms a launcher that wakes up late
	// on a loaded machine misses the slot and waits a period
	if n < 1 {
		t.Errorf("compute=1: no launch of 2 ms in 2 s, want progress (about 10)")
	}
	if occ > 5 {
		t.Errorf("compute=1: device %.2f%% busy, want about 1", occ)
	}
	// The launching thread is held about 200 ms per launch; a watcher that had
	// to wait for it would manage about 10 rounds in 2 s, not hundreds.
	if res.u(t, "queries") < 50 {
		t.Errorf("queries during pacing: %d rounds, slowest %v; pacing must not block other threads", res.u(t, "queries"), maxq)
	}
}

// No limit: each launch entry is one compare of vgpu_compute_off (graph
// launches: vgpu_graph_off), a branch, and the driver's jump, as for an
// unhooked trampoline. Kernel launches first look up their handle's byte in
// vgpu_kernel_map (a library kernel takes the slow path to have its library
// counted in the launch's context); the multi-device launch, whose kernels are
// in a list, compares vgpu_kernel_none. Nothing else: no call, no lock.
func TestComputeNoLimitFastPath(t *testing.T) {
	b := buildDir(t)
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", filepath.Join(b, "lib", "libvgpu-cuda.so")).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	dis := string(out)
	for _, name := range []string{"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
		"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuLaunchCooperativeKernelMultiDevice",
		"cuGraphLaunch", "cuGraphLaunch_ptsz"} {
		i := strings.Index(dis, "<"+name+">:\n")
		if i < 0 {
			t.Errorf("%s: not in the library", name)
			continue
		}
		body := strings.SplitN(dis[i:], "\n\n", 2)[0]
		lines := strings.Split(body, "\n")[1:]
		// graph launches also count graph memory: their flag is vgpu_graph_off
		flag := "vgpu_compute_off"
		if strings.HasPrefix(name, "cuGraphLaunch") {
			flag = "vgpu_graph_off"
		}
		paced := regexp.MustCompile(`j(e|ne)\s+\S+ <vgpu_paced_` + name + `>`)
		re := []*regexp.Regexp{
			regexp.MustCompile(`cmpl\s+\$0x0,.*<` + flag + `>`),
			paced,
		}
		switch {
		case name == "cuLaunchCooperativeKernelMultiDevice":
			re = append(re, regexp.MustCompile(`cmpl\s+\$0x0,.*<vgpu_kernel_none>`), paced)
		case !strings.HasPrefix(name, "cuGraphLaunch"):
			reg := "rdi" // the CUfunction argument
			if strings.HasPrefix(name, "cuLaunchKernelEx") {
				reg = "rsi"
			}
			re = append(re,
				regexp.MustCompile(`mov\s+%`+reg+`,%rax`),
				regexp.MustCompile(`shr\s+\$0x4,%rax`),
				regexp.MustCompile(`and\s+\$0xfff,%eax`),
				regexp.MustCompile(`lea\s+.*<vgpu_kernel_map>`),
				regexp.MustCompile(`cmpb\s+\$0x0,\(%r11,%rax,1\)`),
				paced)
		}
		re = append(re, regexp.MustCompile(`jmp\s+\*.*<vgpu_table\+0x[0-9a-f]+>`))
		if len(lines) < len(re) {
			t.Errorf("%s:\n%s", name, body)
			continue
		}
		for k, r := range re {
			if !r.MatchString(lines[k]) {
				t.Errorf("%s: instruction %d is %q, want %s\n%s", name, k+1, strings.TrimSpace(lines[k]), r, body)
			}
		}
	}
}

func intp(v int) *int { return &v }

// slotOf is the slot the test checks: the phase, or 50 for a container with none.
func slotOf(phase *int) int {
	if phase == nil {
		return 50
	}
	return *phase
}

// unlimitedIfZero: 0 here means no limit, whose one form is 100.
func unlimitedIfZero(c int) int {
	if c == 0 {
		return 100
	}
	return c
}

// A container that floods the device in its slot (as the host gives one)
// is held by its pacer, with none of its work queued, for what its limit
// leaves: about 70 % of the time at limit 30, about 10 % at 90. The region
// counts that time once however many launches wait in it (`vgpu status`'s
// paceWaitMs, the metric vgpu_compute_pace_wait_seconds_total), so an
// operator tells a tenant held to its own share from one starved by its
// neighbours; counted from the start of each wait instead, the flood's
// backpressure counted too (its launches wait while its queue still runs).
func TestComputePaceWaitCounted(t *testing.T) {
	const window = 2500 * time.Millisecond
	waited := map[int]float64{}
	for _, limit := range []int{30, 90} {
		root, err := simroot.Create(t.TempDir(), simroot.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c := newContainerSlot(t, root, intp(0), limit)
		r := c.start(t, "kernel")
		measure(t, 300*time.Millisecond, window, r)
		res := r.wait(t)
		waited[limit] = 100 * float64(regionHeader(t, c.shared).PaceWaitMs) / float64(window.Milliseconds())
		t.Logf("limit %d: device %.1f%%, held by the pacer %.1f%% of the window", limit, occupancy(t, res), waited[limit])
	}
	if waited[30] < 50 || waited[30] > 90+loadMargin {
		t.Errorf("at limit 30 the pacer held the launches %.1f%% of the window, want about 70 (50 to %d)", waited[30], 90+loadMargin)
	}
	if waited[90] > 10+2*loadMargin {
		t.Errorf("at limit 90 the pacer held the launches %.1f%% of the window, want about 10 (at most %d)", waited[90], 10+2*loadMargin)
	}
}
