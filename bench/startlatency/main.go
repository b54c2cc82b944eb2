// startlatency compares container start latency under vgpu-runtime and plain
// runc on the same busybox bundle: `<runtime> run --keep -b B id` (the container
// runs /bin/true) then `<runtime> delete id`, n times each; prints medians in ms
// (with min..max) and the ratio, the two runtimes interleaved. Needs root, runc, busybox. Not a test: `make bench`.
//
//	startlatency -runtime build/bin/vgpu-runtime [-config cfg.toml] [-n 20] [-env VGPU_MEMORY_LIMIT=1Gi,...] [-floor build/bin/execfloor]
//
// -floor names a Go program that only execs runc (bench/execfloor): it runs
// interleaved with the other two, and its figure is what starting any Go
// wrapper twice (run, delete) costs on this machine.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

func main() {
	runtime := flag.String("runtime", "build/bin/vgpu-runtime", "vgpu-runtime binary")
	config := flag.String("config", "", "VGPU_CONFIG for vgpu-runtime (default: its own default)")
	n := flag.Int("n", 20, "runs per runtime")
	envs := flag.String("env", "", "comma-separated KEY=VALUE for the container (a GPU request, say); empty: pass-through")
	floor := flag.String("floor", "", "a Go program that only execs runc (bench/execfloor), run beside the two; empty: none")
	flag.Parse()
	if err := bench(*runtime, *config, *n, *envs, *floor); err != nil {
		fmt.Fprintln(os.Stderr, "startlatency:", err)
		os.Exit(1)
	}
}

func bench(vr, config string, n int, envs, floor string) error {
	vr, err := filepath.Abs(vr)
	if err != nil {
		return err
	}
	if floor != "" {
		if floor, err = filepath.Abs(floor); err != nil {
			return err
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "vgpu-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bundle := filepath.Join(dir, "bundle")
	if err := makeBundle(bundle, envs); err != nil {
		return err
	}
	env := os.Environ()
	if config != "" {
		env = append(env, "VGPU_CONFIG="+config)
	}
	pristine, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return err
	}
	// once returns the wall time of run+delete and the CPU time they took
	// (user+system of the runtime and the children it waited for): on a
	// loaded machine the wall time mostly measures the queue for a CPU, the
	// CPU time what the runtime itself costs.
	once := func(bin string, i int) (time.Duration, time.Duration, error) {
		root := filepath.Join(dir, "root-"+filepath.Base(bin))
		id := fmt.Sprintf("bench-%d", i)
		// Engines hand every container a fresh config.json; so do we.
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), pristine, 0o644); err != nil {
			return 0, 0, err
		}
		var cpu time.Duration
		t0 := time.Now()
		for _, args := range [][]string{{"--root", root, "run", "--keep", "-b", bundle, id}, {"--root", root, "delete", id}} {
			cmd := exec.Command(bin, args...)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				return 0, 0, fmt.Errorf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
			}
			cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		return time.Since(t0), cpu, nil
	}
	// Interleaved, so that drift of the machine hits both alike; the first
	// round warms caches and is dropped.
	var base, ours, low, baseCPU, oursCPU, lowCPU []time.Duration
	for i := 0; i < n+1; i++ {
		b, bc, err := once(runc, i)
		if err != nil {
			return err
		}
		o, oc, err := once(vr, i)
		if err != nil {
			return err
		}
		var f, fc time.Duration
		if floor != "" {
			if f, fc, err = once(floor, i); err != nil {
				return err
			}
		}
		if i > 0 {
			base, ours = append(base, b), append(ours, o)
			baseCPU, oursCPU = append(baseCPU, bc), append(oursCPU, oc)
			low, lowCPU = append(low, f), append(lowCPU, fc)
		}
	}
	mb, mo := median(base), median(ours)
	what := "no GPU request (pass-through)"
	if envs != "" {
		what = "request " + envs
	}
	fmt.Printf("start latency, run+delete of /bin/true, interleaved, median of %d (min..max), %s\n", n, what)
	fmt.Printf("  runc          %8.2f ms  (%.2f..%.2f)\n", ms(mb), ms(slices.Min(base)), ms(slices.Max(base)))
	fmt.Printf("  vgpu-runtime  %8.2f ms  (%.2f..%.2f)\n", ms(mo), ms(slices.Min(ours)), ms(slices.Max(ours)))
	fmt.Printf("  ratio         %8.3f  (%+.2f ms)\n", float64(mo)/float64(mb), ms(mo-mb))
	if floor != "" {
		mf := median(low)
		fmt.Printf("  Go exec floor %8.2f ms  (%+.2f ms: a Go program that only execs runc)\n", ms(mf), ms(mf-mb))
	}
	cb, co := median(baseCPU), median(oursCPU)
	fmt.Printf("  CPU time (user+sys), median: runc %.2f ms, vgpu-runtime %.2f ms (%+.2f ms)", ms(cb), ms(co), ms(co-cb))
	if floor != "" {
		cf := median(lowCPU)
		fmt.Printf(", Go exec floor %.2f ms (%+.2f ms)", ms(cf), ms(cf-cb))
	}
	fmt.Println()
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func makeBundle(bundle, envs string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return err
	}
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"bin", "dev", "proc", "sys", "etc", "tmp", "run"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin/busybox"), b, 0o755); err != nil {
		return err
	}
	for _, a := range []string{"sh", "true"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", a)); err != nil {
			return err
		}
	}
	if out, err := exec.Command("runc", "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return fmt.Errorf("runc spec: %v\n%s", err, out)
	}
	p := filepath.Join(bundle, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	proc := s["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/true"}
	env := []string{"PATH=/bin"}
	if envs != "" {
		env = append(env, strings.Split(envs, ",")...)
	}
	proc["env"] = env
	out, _ := json.MarshalIndent(s, "", "\t")
	return os.WriteFile(p, out, 0o644)
}
