//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// Several GPUs in one container: a host with four simulated GPUs of
// different sizes; a container asks for two of them, by index or UUID, with a
// limit each. Everything inside (the device nodes, the quota file, the driver
// API under any CUDA_VISIBLE_DEVICES, NVML, nvidia-smi) must put each limit on
// its physical GPU, and the memory must land on that GPU on the host.

const (
	ctxBytes     = 256 << 20 // a CUDA context on the simulator
	nvmlNotFound = 6         // NVML_ERROR_NOT_FOUND
)

// physMem: the four host GPUs, each a different size.
var physMem = []uint64{16 << 30, 24 << 30, 32 << 30, 40 << 30}

func physName(i int) string { return fmt.Sprintf("NVIDIA Sim%d (simulated)", i) }

// newEnv4 is newEnv over a host with the four GPUs of physMem.
func newEnv4(t *testing.T, name string) *env {
	t.Helper()
	var devs []simroot.Device
	for i, m := range physMem {
		devs = append(devs, simroot.Device{Name: physName(i), MemoryBytes: m})
	}
	return newEnvSim(t, name, simroot.Options{Devices: devs})
}

// ctrGPU is one GPU of the container, in container order.
type ctrGPU struct {
	phys    int    // host index
	limit   uint64 // bytes; 0: none
	compute int    // percent; 0: none
}

// total is what the container must see as this GPU's size.
func (g ctrGPU) total() uint64 {
	if g.limit != 0 {
		return g.limit
	}
	return physMem[g.phys]
}

// cudaOrder is the container's GPUs as CUDA numbers them without
// CUDA_VISIBLE_DEVICES: the driver enumerates the GPUs the container can reach
// in host order. The plan numbers the container's GPUs the same way, so this
// must be the identity; kept separate so that the test says so.
func cudaOrder(want []ctrGPU) []ctrGPU {
	c := append([]ctrGPU(nil), want...)
	sort.Slice(c, func(i, j int) bool { return c[i].phys < c[j].phys })
	return c
}

// cvdCase is one CUDA_VISIBLE_DEVICES set inside the container and the GPUs
// it leaves, in CUDA order.
type cvdCase struct {
	name  string
	value string // "" = unset
	gpus  []ctrGPU
}

// cvdCases: indices are relative to the driver's order (cuda), as in any
// container; UUIDs name the GPU.
func cvdCases(cuda []ctrGPU) []cvdCase {
	u := func(g ctrGPU) string { return simroot.DefaultUUID(g.phys) }
	return []cvdCase{
		{"unset", "", []ctrGPU{cuda[0], cuda[1]}},
		{"reorder", "1,0", []ctrGPU{cuda[1], cuda[0]}},
		{"subset", "1", []ctrGPU{cuda[1]}},
		{"uuids", u(cuda[1]) + "," + u(cuda[0]), []ctrGPU{cuda[1], cuda[0]}},
		{"uuid", u(cuda[0]), []ctrGPU{cuda[0]}},
	}
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// multiGPUScript is what the container runs. Output sections start with "@@ name".
// The hold part keeps 1 GiB on the GPU that is CUDA ordinal 1 (reached as
// ordinal 0 under CUDA_VISIBLE_DEVICES=1,0), prints "@@ ready" and waits for
// the host to create /run/vgpu/shared/go, then fills both GPUs next to the
// holder.
func multiGPUScript(want []ctrGPU) string {
	var b strings.Builder
	b.WriteString("/bin/probe\n")
	b.WriteString("echo '@@ nvml'; nvml-info")
	for i := range physMem {
		b.WriteString(" " + simroot.DefaultUUID(i))
	}
	b.WriteString("\necho '@@ nvml-cvd'; CUDA_VISIBLE_DEVICES=1 nvml-info\n")
	b.WriteString("echo '@@ smi'; nvidia-smi -L\n")
	for _, c := range cvdCases(cudaOrder(want)) {
		pre := ""
		if c.value != "" {
			pre = "CUDA_VISIBLE_DEVICES=" + shq(c.value) + " "
		}
		fmt.Fprintf(&b, "echo '@@ devices %s'; %scuda-fill devices\n", c.name, pre)
		for k := range c.gpus {
			fmt.Fprintf(&b, "echo '@@ fill %s %d'; %sCLIENT_DEVICE=%d cuda-fill fill alloc 256\n", c.name, k, pre, k)
		}
	}
	// the holder holds until its stdin (a sleep) ends
	b.WriteString(`(sleep 600 & echo $! >/run/sleep.pid; wait) | CUDA_VISIBLE_DEVICES=1,0 CLIENT_DEVICE=0 cuda-fill hold 1024 >/run/hold.out 2>&1 &
while ! grep -q -e hold_free -e error= /run/hold.out; do sleep 0.05; done
echo '@@ hold'; cat /run/hold.out
echo '@@ ready'
while ! stat /run/vgpu/shared/go >/dev/null 2>&1; do sleep 0.05; done
echo '@@ held-fill 0'; CLIENT_DEVICE=0 cuda-fill fill alloc 256
echo '@@ held-fill 1'; CLIENT_DEVICE=1 cuda-fill fill alloc 256
kill $(cat /run/sleep.pid); wait
echo '@@ end'
`)
	return b.String()
}

// section is the key=value lines and the text of one "@@" section.
type section struct {
	kv   map[string]string
	text string
}

func sections(out string) map[string]*section {
	m := map[string]*section{}
	cur := &section{kv: map[string]string{}}
	m[""] = cur
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if name, ok := strings.CutPrefix(l, "@@ "); ok {
			cur = &section{kv: map[string]string{}}
			m[name] = cur
			continue
		}
		cur.text += l + "\n"
		if k, v, ok := strings.Cut(l, "="); ok {
			cur.kv[k] = v
		}
	}
	return m
}

// hostUsed reads, on the host, each physical GPU's used memory through the
// simulated driver's own NVML (what nvidia-smi on the host shows): nvml-info
// of the test rootfs, run outside any container. (Not go-nvml in this
// process: its cgo calls stay bound to the first libnvidia-ml it loaded.)
func hostUsed(t *testing.T, f *fixture, sim *simroot.Root) []uint64 {
	t.Helper()
	out := mustRun(t, 30*time.Second, sim.Env(), filepath.Join(f.rootfs, "usr/bin/nvml-info"))
	kv := sections(out)[""].kv
	if kv["nvml_count"] != fmt.Sprint(len(physMem)) {
		t.Fatalf("host NVML: want %d GPUs:\n%s", len(physMem), out)
	}
	used := make([]uint64, len(physMem))
	for i := range physMem {
		if kv[fmt.Sprintf("nvml_uuid%d", i)] != simroot.DefaultUUID(i) {
			t.Fatalf("host NVML: GPU %d is not %s:\n%s", i, simroot.DefaultUUID(i), out)
		}
		if _, err := fmt.Sscan(kv[fmt.Sprintf("nvml_used%d", i)], &used[i]); err != nil {
			t.Fatalf("host NVML: GPU %d used: %v\n%s", i, err, out)
		}
	}
	return used
}

// runMultiGPU runs the script in a runc container through vgpu-runtime;
// when the container says "@@ ready", it reads the host's view (hostUsed)
// and lets the container go on.
func runMultiGPU(t *testing.T, e *env, f *fixture, id string, env []string, want []ctrGPU) (string, []uint64) {
	t.Helper()
	b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/sh", "-c", multiGPUScript(want)}, env, nil)
	rt := e.runc(t)
	// whatever happens here, the container goes (a test that stops early
	// would leave it waiting for /run/vgpu/shared/go)
	rt.deleteAtEnd(id)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.runtime, "--root", rt.root, "run", "-b", b, id)
	cmd.Env = append(os.Environ(), e.vars()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	outPath := filepath.Join(e.dir, id+".out")
	of, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	cmd.Stdout, cmd.Stderr = of, of
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	read := func() string { b, _ := os.ReadFile(outPath); return string(b) }
	// (the command's own deadline, above, ends a container that never is)
	if err := pollAt(90*time.Second, 50*time.Millisecond, func() error {
		select {
		case err := <-done:
			return giveUp(fmt.Errorf("container exited before it was ready: %v", err))
		default:
		}
		return holds(strings.Contains(read(), "@@ ready"), "not ready")
	}); err != nil {
		t.Fatalf("%v\n%s", err, read())
	}
	used := hostUsed(t, f, e.sim)
	// <state dir>/<id>/shared is /run/vgpu/shared inside (docs/design.md)
	if err := os.WriteFile(filepath.Join(e.stateDir, id, "shared", "go"), nil, 0o644); err != nil {
		t.Errorf("letting the container go on: %v", err)
		cancel()
	}
	if err := <-done; err != nil {
		t.Fatalf("vgpu-runtime run: %v\n%s", err, read())
	}
	return read(), used
}

func TestMultiGPURunc(t *testing.T) {
	f := shared(t)
	need(t, "runc")
	both := []ctrGPU{{1, 2 << 30, 0}, {3, 6 << 30, 0}}
	for _, tc := range []struct {
		name, visible, memory, compute string
		want                           []ctrGPU
	}{
		// the request: container GPU 0 = host GPU 1 with 2 GiB, 1 = host GPU 3 with 6 GiB
		{"index", "1,3", "0=2Gi,1=6Gi", "", both},
		{"uuid", simroot.DefaultUUID(1) + "," + simroot.DefaultUUID(3), "0=2Gi,1=6Gi", "", both},
		// the container numbers its GPUs in host order (as CUDA does); the limit
		// follows the request's order (0= is host GPU 3); a GPU without a limit shows its own size
		{"reversed-one-limit", "3,1", "0=6Gi", "", []ctrGPU{{1, 0, 0}, {3, 6 << 30, 0}}},
		// compute limits per device follow their GPU as memory limits do
		{"compute", "3,1", "0=6Gi,1=2Gi", "0=70,1=30", []ctrGPU{{1, 2 << 30, 30}, {3, 6 << 30, 70}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv4(t, "multi-"+tc.name)
			id := "multi-" + tc.name
			vars := []string{"VGPU_VISIBLE_DEVICES=" + tc.visible, "VGPU_MEMORY_LIMIT=" + tc.memory}
			if tc.compute != "" {
				vars = append(vars, "VGPU_COMPUTE_LIMIT="+tc.compute)
			}
			out, used := runMultiGPU(t, e, f, id, vars, tc.want)
			checkMultiGPU(t, out, used, tc.want)
			if _, err := os.Stat(filepath.Join(e.stateDir, id)); !os.IsNotExist(err) {
				t.Errorf("state dir left after run exited: %v", err)
			}
		})
	}
}

func checkMultiGPU(t *testing.T, out string, used []uint64, want []ctrGPU) {
	t.Helper()
	secs := sections(out)
	sec := func(name string) *section {
		s, ok := secs[name]
		if !ok {
			t.Fatalf("no section %q in the container's output:\n%s", name, out)
		}
		return s
	}
	defer func() {
		if t.Failed() {
			t.Logf("container output:\n%s", out)
		}
	}()

	// device nodes: the control nodes and exactly the two GPUs
	r := parseReport(t, out)
	var devs []string
	for d, how := range r.Devs {
		devs = append(devs, d)
		if how != "ENXIO" && how != "ok" {
			t.Errorf("%s: open gives %s, want ENXIO (allowed by the device cgroup)", d, how)
		}
	}
	sort.Strings(devs)
	wantDevs := []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"}
	for _, g := range want {
		wantDevs = append(wantDevs, fmt.Sprintf("/dev/nvidia%d", g.phys))
	}
	sort.Strings(wantDevs)
	if strings.Join(devs, " ") != strings.Join(wantDevs, " ") {
		t.Errorf("device nodes in the container: %v, want %v", devs, wantDevs)
	}

	// the quota file: container order, each limit on its UUID
	var qdev []string
	for _, l := range strings.Split(r.Quota, "\n") {
		if strings.HasPrefix(l, "device ") {
			qdev = append(qdev, l)
		}
	}
	if len(qdev) != len(want) {
		t.Errorf("quota file lists %d devices, want %d:\n%s", len(qdev), len(want), r.Quota)
	} else {
		for i, g := range want {
			w := fmt.Sprintf("device %d %s", i, simroot.DefaultUUID(g.phys))
			if g.limit != 0 {
				w += fmt.Sprintf(" memory=%d", g.limit)
			}
			if g.compute != 0 {
				w += fmt.Sprintf(" compute=%d", g.compute)
			}
			// a compute limit comes with the host's phase for it (any)
			if before, phase, ok := strings.Cut(qdev[i], " phase="); ok && g.compute != 0 && phase != "" {
				qdev[i] = before
			}
			if qdev[i] != w {
				t.Errorf("quota line %d: %q, want %q", i, qdev[i], w)
			}
		}
	}

	// NVML: only the container's GPUs, in container order, with their limits;
	// other GPUs cannot be looked up; CUDA_VISIBLE_DEVICES does not change NVML
	for _, name := range []string{"nvml", "nvml-cvd"} {
		kv := sec(name).kv
		if kv["nvml_count"] != fmt.Sprint(len(want)) {
			t.Errorf("%s: nvml_count %q, want %d", name, kv["nvml_count"], len(want))
			continue
		}
		for i, g := range want {
			if got, w := kv[fmt.Sprintf("nvml_uuid%d", i)], simroot.DefaultUUID(g.phys); got != w {
				t.Errorf("%s: device %d UUID %s, want %s (host GPU %d)", name, i, got, w, g.phys)
			}
			if got, w := kv[fmt.Sprintf("nvml_total%d", i)], fmt.Sprint(g.total()); got != w {
				t.Errorf("%s: device %d total %s, want %s", name, i, got, w)
			}
			if got := kv[fmt.Sprintf("nvml_index%d", i)]; got != fmt.Sprint(i) {
				t.Errorf("%s: device %d nvmlDeviceGetIndex %s, want %d", name, i, got, i)
			}
			if got := kv[fmt.Sprintf("nvml_minor%d", i)]; got != fmt.Sprint(g.phys) {
				t.Errorf("%s: device %d minor number %s, want %d (/dev/nvidia%d)", name, i, got, g.phys, g.phys)
			}
		}
	}
	inCtr := map[int]bool{}
	for _, g := range want {
		inCtr[g.phys] = true
	}
	for i := range physMem {
		w := fmt.Sprint(nvmlNotFound)
		if inCtr[i] {
			w = "0"
		}
		if got := sec("nvml").kv["nvml_byuuid_"+simroot.DefaultUUID(i)]; got != w {
			t.Errorf("nvmlDeviceGetHandleByUUID(host GPU %d): %s, want %s", i, got, w)
		}
	}

	// nvidia-smi -L (the driver's tool over our NVML)
	var smi []string
	for i, g := range want {
		smi = append(smi, fmt.Sprintf("GPU %d: %s (UUID: %s)", i, physName(g.phys), simroot.DefaultUUID(g.phys)))
	}
	if got := strings.TrimSpace(sec("smi").text); got != strings.Join(smi, "\n") {
		t.Errorf("nvidia-smi -L in the container:\n%s\nwant:\n%s", got, strings.Join(smi, "\n"))
	}

	// the driver API under each CUDA_VISIBLE_DEVICES: every CUDA ordinal is
	// the right GPU, reports its limit and runs out of memory exactly there
	cuda := cudaOrder(want)
	for _, c := range cvdCases(cuda) {
		kv := sec("devices " + c.name).kv
		if kv["count"] != fmt.Sprint(len(c.gpus)) {
			t.Errorf("CUDA_VISIBLE_DEVICES %s (%q): %s CUDA devices, want %d", c.name, c.value, kv["count"], len(c.gpus))
			continue
		}
		for k, g := range c.gpus {
			if got, w := kv[fmt.Sprintf("dev%d_uuid", k)], simroot.DefaultUUID(g.phys); got != w {
				t.Errorf("CUDA_VISIBLE_DEVICES %s (%q): ordinal %d is %s, want %s (host GPU %d)", c.name, c.value, k, got, w, g.phys)
			}
			if got, w := kv[fmt.Sprintf("dev%d_total", k)], fmt.Sprint(g.total()); got != w {
				t.Errorf("CUDA_VISIBLE_DEVICES %s (%q): ordinal %d cuDeviceTotalMem %s, want %s", c.name, c.value, k, got, w)
			}
			checkFill(t, fmt.Sprintf("CUDA_VISIBLE_DEVICES %s (%q), ordinal %d (host GPU %d)", c.name, c.value, k, g.phys),
				sec(fmt.Sprintf("fill %s %d", c.name, k)).kv, g.total(), g.total()-ctxBytes)
		}
	}

	// a second process holding 1 GiB on CUDA ordinal 1 (which it reached as
	// ordinal 0 under CUDA_VISIBLE_DEVICES=1,0) counts on that GPU only
	held := cuda[1]
	h := sec("hold").kv
	if !strings.Contains(sec("hold").text, "\nhold_rc=0\n") || h["hold_total"] != fmt.Sprint(held.total()) || h["hold_free"] != fmt.Sprint(held.total()-ctxBytes-1<<30) {
		t.Errorf("holder: rc %s total %s free %s, want 0, %d, %d", h["hold_rc"], h["hold_total"], h["hold_free"], held.total(), held.total()-ctxBytes-1<<30)
	}
	checkFill(t, "next to the holder, the other GPU", sec("held-fill 0").kv, cuda[0].total(), cuda[0].total()-ctxBytes)
	checkFill(t, "next to the holder, its GPU", sec("held-fill 1").kv, held.total(), held.total()-2*ctxBytes-1<<30)
	sec("end")

	// on the host, the holder's memory is on that physical GPU and no other
	for i := range physMem {
		var w uint64
		if i == held.phys {
			w = ctxBytes + 1<<30
		}
		if used[i] != w {
			t.Errorf("host GPU %d: %d bytes used while the container holds 1 GiB on host GPU %d, want %d", i, used[i], held.phys, w)
		}
	}
}

// checkFill asserts a "cuda-fill fill alloc 256" run: the device reports total,
// takes exactly fill bytes, refuses with CUDA_ERROR_OUT_OF_MEMORY, and takes
// the same again after freeing.
func checkFill(t *testing.T, what string, kv map[string]string, total, fill uint64) {
	t.Helper()
	fill -= fill % (256 << 20)
	if kv["before_total"] != fmt.Sprint(total) || kv["before_devtotal"] != fmt.Sprint(total) {
		t.Errorf("%s: cuMemGetInfo total %q, cuDeviceTotalMem %q, want %d", what, kv["before_total"], kv["before_devtotal"], total)
	}
	if kv["first_bytes"] != fmt.Sprint(fill) || kv["first_err"] != "2" {
		t.Errorf("%s: filled %q bytes then error %q, want %d then CUDA_ERROR_OUT_OF_MEMORY (2)", what, kv["first_bytes"], kv["first_err"], fill)
	}
	if kv["second_bytes"] != kv["first_bytes"] {
		t.Errorf("%s: after freeing filled %q bytes, want %q again", what, kv["second_bytes"], kv["first_bytes"])
	}
}
