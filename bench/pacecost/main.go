// pacecost measures what the library costs the host per kernel launch on the
// simulated GPU: a loop of short kernels (the compute test client,
// lib/cudahook/testdata/compute.c, mode "matrix US 1") run natively, under the
// library without a limit, and under a limit of 99 % (in a slot of the default
// period, and launch by launch), interleaved for n rounds; prints the median
// ns per launch with min..max and the ratio to native. What it shows is the
// library's own code (locks, atomics, clock reads, sampling); on a real GPU
// the driver calls it makes cost more (docs/archive/gpu-runs.md). A second
// table does the same for cuMemAlloc/cuMemFree pairs of 1 MiB (mode
// "allocfree"), natively, under the library without a limit and under a
// memory limit of 8 GiB: counting every memory route (docs/memory-routes.md)
// must cost an honest
// program nothing measurable. Not a test: `make bench` (bench/run.sh).
//
//	pacecost -build build [-n 5] [-secs 1.5] [-us 1]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

func main() {
	build := flag.String("build", "build", "build directory (lib/libvgpu-cuda.so, lib/libvgpu-nvml.so)")
	n := flag.Int("n", 5, "rounds")
	secs := flag.Float64("secs", 1.5, "seconds per measurement")
	us := flag.Int("us", 1, "kernel length on the simulated GPU in microseconds")
	flag.Parse()
	if err := bench(*build, *n, time.Duration(*secs*float64(time.Second)), *us); err != nil {
		fmt.Fprintln(os.Stderr, "pacecost:", err)
		os.Exit(1)
	}
}

type variant struct {
	name    string
	library bool
	compute int
	period  *int // nil: the library's default
	phase   *int
	memory  uint64 // bytes, 0 = no memory limit
}

func bench(build string, n int, window time.Duration, us int) error {
	build, err := filepath.Abs(build)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "vgpu-pacecost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, err := simroot.Create(filepath.Join(dir, "sim"), simroot.Options{})
	if err != nil {
		return err
	}
	client := filepath.Join(dir, "compute")
	if out, err := exec.Command("gcc", "-O1", "-Ilib/cudahook/include", "-o", client, "lib/cudahook/testdata/compute.c",
		"-L"+root.LibDir(), "-l:libcuda.so.1", "-lpthread").CombinedOutput(); err != nil {
		return fmt.Errorf("gcc compute.c (run from the repository root): %v\n%s", err, out)
	}
	zero, phase := 0, 0
	launch := []variant{
		{name: "native"},
		{name: "library, no limit", library: true},
		{name: "limit 99, slot", library: true, compute: 99, phase: &phase},
		{name: "limit 99, launch by launch", library: true, compute: 99, period: &zero},
		{name: "memory limit 8 GiB", library: true, memory: 8 << 30},
	}
	if err := table(dir, build, root, client, launch, []string{"matrix", strconv.Itoa(us), "1"}, n, window,
		fmt.Sprintf("%d us kernels on the simulated GPU, %d rounds of %v, ns per launch", us, n, window)); err != nil {
		return err
	}
	alloc := []variant{
		{name: "native"},
		{name: "library, no limit", library: true},
		{name: "memory limit 8 GiB", library: true, memory: 8 << 30},
	}
	return table(dir, build, root, client, alloc, []string{"allocfree"}, n, window,
		fmt.Sprintf("cuMemAlloc+cuMemFree of 1 MiB on the simulated GPU, %d rounds of %v, ns per pair", n, window))
}

// table measures variants interleaved for n rounds and prints the median ns
// per operation with min..max and the ratio to the first (native) variant.
func table(dir, build string, root *simroot.Root, client string, variants []variant, args []string, n int, window time.Duration, title string) error {
	perOp := make([][]float64, len(variants))
	cpuOp := make([][]float64, len(variants))
	for r := 0; r < n; r++ {
		for i, v := range variants {
			env, err := environment(dir, build, root, v, i)
			if err != nil {
				return err
			}
			rate, cpu, err := measure(client, args, env, window)
			if err != nil {
				return fmt.Errorf("%s %s: %w", args[0], v.name, err)
			}
			perOp[i] = append(perOp[i], 1e9/rate)
			cpuOp[i] = append(cpuOp[i], cpu)
		}
	}
	fmt.Printf("%s (median, min..max, ratio to native; then the launching thread's CPU ns per operation, median):\n", title)
	base := median(perOp[0])
	for i, v := range variants {
		s := append([]float64(nil), perOp[i]...)
		sort.Float64s(s)
		c := append([]float64(nil), cpuOp[i]...)
		sort.Float64s(c)
		fmt.Printf("  %-28s %8.0f  %8.0f..%-8.0f %6.3f  cpu %7.0f\n", v.name, median(s), s[0], s[len(s)-1], median(s)/base, median(c))
	}
	return nil
}

// environment: a quota file and shared directory for v (one per variant).
func environment(dir, build string, root *simroot.Root, v variant, i int) ([]string, error) {
	env := append(os.Environ(), root.Env()...)
	if !v.library {
		return append(env, "LD_PRELOAD="), nil
	}
	vdir := filepath.Join(dir, fmt.Sprintf("v%d-%d", i, v.memory>>20))
	q := &quota.File{
		DriverCuda:      filepath.Join(root.LibDir(), "libcuda.so."+simroot.DriverVersion),
		DriverNvml:      filepath.Join(root.LibDir(), "libnvidia-ml.so."+simroot.DriverVersion),
		SharedDir:       filepath.Join(vdir, "shared"),
		ComputePeriodMS: v.period,
		Devices:         []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: simroot.DefaultUUID(0)}, Memory: v.memory, Compute: unlimitedIfZero(v.compute), Phase: v.phase}},
	}
	data, err := q.Marshal()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(q.SharedDir, 0o700); err != nil {
		return nil, err
	}
	quota := filepath.Join(vdir, "quota")
	if err := os.WriteFile(quota, data, 0o600); err != nil {
		return nil, err
	}
	return append(env, "VGPU_QUOTA_FILE="+quota,
		"LD_PRELOAD="+filepath.Join(build, "lib", "libvgpu-cuda.so")+":"+filepath.Join(build, "lib", "libvgpu-nvml.so")), nil
}

// measure runs the client once: operations per second within its window,
// and the launching thread's CPU ns per operation.
func measure(client string, args []string, env []string, window time.Duration) (float64, float64, error) {
	cmd := exec.Command(client, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer cmd.Wait()
	out := bufio.NewReader(stdout)
	for {
		line, err := out.ReadString('\n')
		if err != nil {
			return 0, 0, fmt.Errorf("no ready line: %v (%s)", err, stderr.String())
		}
		if line == "ready\n" {
			break
		}
	}
	start := monoNow() + uint64(300*time.Millisecond)
	fmt.Fprintf(stdin, "%d %d\n", start, start+uint64(window))
	stdin.Close()
	rest, _ := io.ReadAll(out)
	kv := map[string]string{}
	for _, l := range strings.Split(string(rest), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	if e, ok := kv["error"]; ok {
		return 0, 0, fmt.Errorf("client: %s (%s)", e, stderr.String())
	}
	counted, err1 := strconv.ParseFloat(kv["counted"], 64)
	ns, err2 := strconv.ParseFloat(kv["window_ns"], 64)
	launches, err3 := strconv.ParseFloat(kv["launches"], 64)
	cpu, err4 := strconv.ParseFloat(kv["cpu_ns"], 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || counted == 0 || launches == 0 {
		return 0, 0, fmt.Errorf("client output %q (%s)", rest, stderr.String())
	}
	return counted / (ns / 1e9), cpu / launches, nil
}

func monoNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// unlimitedIfZero: 0 here means no limit, whose one form is 100.
func unlimitedIfZero(c int) int {
	if c == 0 {
		return 100
	}
	return c
}
