//go:build integration

package simgpu_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/vgpu-dev/vgpu/internal/cgroup"
	"github.com/vgpu-dev/vgpu/test/simgpu/internal/cuclient"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// The r615 driver's per-cgroup memory limits (nvmlDevice{Set,Get}MemoryLimits_v1)
// and its refusal at allocation: tests here make cgroups, so they run as root.

func init() {
	// NVML calls, one per line of SIMGPU_NVML_OPS: "set PATH SOFT HARD",
	// "get PATH", "lookup SYMBOL"; prints one result line each. In a child:
	// a second root's libnvidia-ml.so.1 in one process would be the first's.
	children["limits-nvml"] = func(c *child) {
		lib := nvml.New(nvml.WithLibraryPath(libPath("libnvidia-ml.so.1")))
		if r := lib.Init(); r != nvml.SUCCESS {
			c.fatal("Init: %v", r)
		}
		// The child exits next, which releases NVML whatever Shutdown says.
		defer func() { _ = lib.Shutdown() }()
		d, r := lib.DeviceGetHandleByIndex(0)
		if r != nvml.SUCCESS {
			c.fatal("handle: %v", r)
		}
		for _, op := range strings.Split(os.Getenv("SIMGPU_NVML_OPS"), "\n") {
			f := strings.Fields(op)
			switch {
			case len(f) == 4 && f[0] == "set":
				soft, _ := strconv.ParseUint(f[2], 10, 64)
				hard, _ := strconv.ParseUint(f[3], 10, 64)
				fmt.Printf("SET %d\n", int(d.SetMemoryLimits_v1(f[1], soft, hard)))
			case len(f) == 2 && f[0] == "get":
				l, r := d.GetMemoryLimits_v1(f[1])
				fmt.Printf("GET %d %d %d %d\n", int(r), l.SoftLimit, l.HardLimit, l.CurrentUsed)
			case len(f) == 2 && f[0] == "lookup":
				fmt.Printf("LOOKUP %v\n", lib.Extensions().LookupSymbol(f[1]) == nil)
			}
		}
	}
	// allocates 256 MiB at a time through the driver by its path, until it
	// is refused or holds SIMGPU_FILL_MAX bytes
	children["limits-fill"] = func(c *child) {
		c.setup()
		max, _ := strconv.ParseUint(os.Getenv("SIMGPU_FILL_MAX"), 10, 64)
		var held uint64
		rc := 0
		for held < max {
			if rc = cuclient.Call("cuMemAlloc", out.At(100), 256<<20); rc != cudaSuccess {
				break
			}
			held += 256 << 20
		}
		fmt.Printf("HELD %d\nRC %d\n", held, rc)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the per-cgroup limit tests make cgroups: run them as root, as CI does")
	}
}

// newCgroup makes a cgroup v2 directory on this host (on a hybrid host, in
// the hierarchy at /sys/fs/cgroup/unified), removed at the end.
func newCgroup(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	root := simroot.CgroupV2Root()
	if root == "" {
		t.Fatal("this host mounts no cgroup v2 hierarchy (not even a hybrid one): the simulated driver's limits need one")
	}
	dir, err := os.MkdirTemp(root, "vgpu-simtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// nvmlOps runs limits-nvml with ops and returns its result lines.
func nvmlOps(t *testing.T, r *simroot.Root, ops ...string) []string {
	t.Helper()
	var res []string
	for _, l := range strings.Split(runChild(t, r, "limits-nvml", "SIMGPU_NVML_OPS="+strings.Join(ops, "\n")), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			res = append(res, l)
		}
	}
	if len(res) != len(ops) {
		t.Fatalf("ops %q: results %q", ops, res)
	}
	return res
}

func set(path string, soft, hard uint64) string { return fmt.Sprintf("set %s %d %d", path, soft, hard) }

// fillIn runs limits-fill in cgroup dir and returns what it held.
func fillIn(t *testing.T, r *simroot.Root, dir string, max uint64) (held uint64, rc int) {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd := childCmd(r, "limits-fill", fmt.Sprintf("SIMGPU_FILL_MAX=%d", max))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("limits-fill: %v\n%s", err, b)
	}
	held, _ = strconv.ParseUint(field(t, string(b), "HELD"), 10, 64)
	rc, _ = strconv.Atoi(field(t, string(b), "RC"))
	return held, rc
}

// A hard limit holds at allocation for a process that calls the driver by
// its path, context included; clearing it lifts it; Get reads it back.
func TestMemoryLimitsR615(t *testing.T) {
	r := newRoot(t, simroot.Options{R615: true})
	dir := newCgroup(t)
	res := nvmlOps(t, r, set(dir, 512<<20, 1<<30), "get "+dir)
	if want := []string{"SET 0", fmt.Sprintf("GET 0 %d %d 0", 512<<20, 1<<30)}; res[0] != want[0] || res[1] != want[1] {
		t.Fatalf("set then get: %q, want %q", res, want)
	}
	// 1 GiB = the context's 256 MiB + three steps of 256 MiB
	if held, rc := fillIn(t, r, dir, 4<<30); held != 768<<20 || rc != 2 {
		t.Errorf("under a hard limit of 1 GiB a process held %d MiB (rc %d), want 768 MiB then CUDA_ERROR_OUT_OF_MEMORY (2)", held>>20, rc)
	}
	// a child cgroup is held by its parent's limit too
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(sub)
	if held, _ := fillIn(t, r, sub, 4<<30); held != 768<<20 {
		t.Errorf("in a cgroup below the limited one a process held %d MiB, want 768", held>>20)
	}
	res = nvmlOps(t, r, set(dir, 0, nvml.DEVICE_MEMORY_LIMIT_MAX), "get "+dir)
	if res[0] != "SET 0" || !strings.HasPrefix(res[1], fmt.Sprintf("GET %d ", nvml.ERROR_NOT_FOUND)) {
		t.Errorf("clear then get: %q, want SET 0 and NOT_FOUND", res)
	}
	if held, _ := fillIn(t, r, dir, 2<<30); held != 2<<30 {
		t.Errorf("after clearing a process held %d MiB, want 2048", held>>20)
	}
}

// What nvml.h says the call refuses, and what the simulated driver refuses
// besides: a cgroup v1 directory, and (cgroup-v2-only) a hybrid host.
func TestMemoryLimitsRefused(t *testing.T) {
	r := newRoot(t, simroot.Options{R615: true})
	dir := newCgroup(t)
	cases := []struct {
		what string
		op   string
		want nvml.Return
	}{
		{"soft above hard", set(dir, 2<<30, 1<<30), nvml.ERROR_INVALID_ARGUMENT},
		{"hard above the device", set(dir, 0, 17<<30), nvml.ERROR_INVALID_ARGUMENT},
		{"no such cgroup", set(dir+"-gone", 0, 1<<30), nvml.ERROR_OPERATING_SYSTEM},
		{"not a cgroup", set(t.TempDir(), 0, 1<<30), nvml.ERROR_NOT_SUPPORTED},
	}
	// a cgroup v1 hierarchy, as CI's hybrid host mounts them beside the v2 one
	if v1 := cgroup.V1Dir("memory"); v1 != "" {
		cases = append(cases, struct {
			what string
			op   string
			want nvml.Return
		}{"cgroup v1 " + v1, set(v1, 0, 1<<30), nvml.ERROR_NOT_SUPPORTED})
	}
	var ops []string
	for _, c := range cases {
		ops = append(ops, c.op)
	}
	for i, res := range nvmlOps(t, r, ops...) {
		if want := fmt.Sprintf("SET %d", cases[i].want); res != want {
			t.Errorf("%s: %s, want %s", cases[i].what, res, want)
		}
	}
	r2 := newRoot(t, simroot.Options{R615: true, CgroupV2Only: true})
	want := nvml.SUCCESS
	if simroot.CgroupV2Root() != cgroup.Unified {
		want = nvml.ERROR_NOT_SUPPORTED // hybrid: the v2 hierarchy is not the host's only one
	}
	res := nvmlOps(t, r2, set(dir, 0, 1<<30), set(dir, 0, nvml.DEVICE_MEMORY_LIMIT_MAX))
	if res[0] != fmt.Sprintf("SET %d", want) {
		t.Errorf("cgroup-v2-only on a host whose v2 hierarchy is at %s: %s, want %v", simroot.CgroupV2Root(), res[0], want)
	}
}

// The 580 driver has no such call: the symbol is not there to look up.
func TestMemoryLimitsAbsentR580(t *testing.T) {
	res := nvmlOps(t, newRoot(t, simroot.Options{}), "lookup nvmlDeviceSetMemoryLimits_v1", "lookup nvmlDeviceGetMemoryLimits_v1")
	for _, l := range res {
		if l != "LOOKUP false" {
			t.Errorf("the simulated 580 driver: %s, want the symbols absent", l)
		}
	}
	res = nvmlOps(t, newRoot(t, simroot.Options{R615: true}), "lookup nvmlDeviceSetMemoryLimits_v1")
	if res[0] != "LOOKUP true" {
		t.Errorf("the simulated r615 driver: %s, want nvmlDeviceSetMemoryLimits_v1", res[0])
	}
}
