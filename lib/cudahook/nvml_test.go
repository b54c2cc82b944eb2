//go:build integration

package cudahook_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// TestMain doubles as the go-nvml client: re-executed with LD_PRELOAD of the
// stand-ins, the test binary is a Go NVML program like any monitoring agent.
func TestMain(m *testing.M) {
	if os.Getenv("VGPU_TEST_NVML_CHILD") == "1" {
		os.Exit(nvmlChild())
	}
	code := m.Run()
	for _, d := range tempDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

func nvmlChild() int {
	lib := nvml.New() // dlopen("libnvidia-ml.so.1"): the preloaded stand-in answers
	if r := lib.Init(); r != nvml.SUCCESS {
		fmt.Printf("init=%d\n", r)
		return 0
	}
	// The child exits next, which releases NVML whatever Shutdown says.
	defer func() { _ = lib.Shutdown() }()
	n, r := lib.DeviceGetCount()
	fmt.Printf("count=%d\ncount_rc=%d\n", n, r)
	for i := 0; i < n; i++ {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			fmt.Printf("handle%d=%d\n", i, r)
			continue
		}
		uuid, _ := d.GetUUID()
		mem, r := d.GetMemoryInfo()
		fmt.Printf("uuid%d=%s\ntotal%d=%d\nfree%d=%d\nused%d=%d\nmem_rc%d=%d\n", i, uuid, i, mem.Total, i, mem.Free, i, mem.Used, i, r)
		m2, r := d.GetMemoryInfo_v2()
		fmt.Printf("total_v2_%d=%d\nv2_rc%d=%d\n", i, m2.Total, i, r)
		procs, r := d.GetComputeRunningProcesses()
		fmt.Printf("procs%d=%d\nprocs_rc%d=%d\n", i, len(procs), i, r)
		if os.Getenv("VGPU_TEST_NVML_LIMITS") == "1" {
			fmt.Printf("setlim_rc%d=%d\n", i, d.SetMemoryLimits_v1("/sys/fs/cgroup", 0, 1<<20))
			l, r := d.GetMemoryLimits_v1("/sys/fs/cgroup/any")
			fmt.Printf("getlim_rc%d=%d\nsoft%d=%d\nhard%d=%d\n", i, r, i, l.SoftLimit, i, l.HardLimit)
		}
	}
	return 0
}

func TestGoNVMLSeesContainerView(t *testing.T) {
	// two physical GPUs; the container gets only the second one, with 3 GiB
	e := newEnv(t, []uint64{3 << 30, 0})
	q, _ := os.ReadFile(e.quota)
	// drop device 0 from the quota and renumber: the container owns physical GPU 1 only
	var lines []string
	for _, l := range strings.Split(string(q), "\n") {
		if strings.HasPrefix(l, "device 0 ") {
			continue
		}
		if strings.HasPrefix(l, "device 1 ") {
			l = "device 0 " + strings.TrimPrefix(l, "device 1 ") + " memory=3221225472"
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(e.quota, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(e.vars, "VGPU_TEST_NVML_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	kv := parseKV(string(out))
	if kv["count"] != "1" {
		t.Fatalf("device count %s, want 1 (only the container's GPU)\n%s", kv["count"], out)
	}
	if !strings.HasSuffix(kv["uuid0"], "000000000001") {
		t.Errorf("index 0 is %s, want the physical GPU 1", kv["uuid0"])
	}
	if kv["total0"] != "3221225472" || kv["total_v2_0"] != "3221225472" {
		t.Errorf("memory total %s / v2 %s, want the 3 GiB limit\n%s", kv["total0"], kv["total_v2_0"], out)
	}
	if kv["free0"] != "3221225472" || kv["used0"] != "0" {
		t.Errorf("free %s used %s, want all free (no CUDA process)", kv["free0"], kv["used0"])
	}
	if kv["procs_rc0"] != "0" || kv["procs0"] != "0" {
		t.Errorf("processes: rc %s, %s listed", kv["procs_rc0"], kv["procs0"])
	}
}

// The driver's per-cgroup limits through the stand-in: Set is the host's
// (refused in the container), Get answers with the container's own limit;
// on a driver without them both say the function is not there.
func TestGoNVMLMemoryLimits(t *testing.T) {
	for _, c := range []struct {
		r615                bool
		request             string // a memory request in the quota: it is the soft limit
		set, get, soft, lim string
	}{
		{true, "", fmt.Sprint(int(nvml.ERROR_NO_PERMISSION)), "0", "3221225472", "3221225472"},
		{true, "1073741824", fmt.Sprint(int(nvml.ERROR_NO_PERMISSION)), "0", "1073741824", "3221225472"},
		{false, "", fmt.Sprint(int(nvml.ERROR_FUNCTION_NOT_FOUND)), fmt.Sprint(int(nvml.ERROR_FUNCTION_NOT_FOUND)), "0", "0"},
	} {
		e := newEnvOpts(t, []uint64{3 << 30}, simroot.Options{R615: c.r615})
		if c.request != "" {
			q, err := os.ReadFile(e.quota)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, l := range strings.Split(string(q), "\n") {
				if strings.HasPrefix(l, "device 0 ") {
					l += " memory-request=" + c.request
				}
				lines = append(lines, l)
			}
			if err := os.WriteFile(e.quota, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(e.vars, "VGPU_TEST_NVML_CHILD=1", "VGPU_TEST_NVML_LIMITS=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		kv := parseKV(string(out))
		if kv["setlim_rc0"] != c.set || kv["getlim_rc0"] != c.get || kv["hard0"] != c.lim || kv["soft0"] != c.soft {
			t.Errorf("r615 %v, request %q: set rc %s, get rc %s soft %s hard %s; want set %s, get %s, soft %s, hard %s\n%s",
				c.r615, c.request, kv["setlim_rc0"], kv["getlim_rc0"], kv["soft0"], kv["hard0"], c.set, c.get, c.soft, c.lim, out)
		}
	}
}
