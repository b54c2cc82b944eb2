//go:build integration

package simgpu_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/test/simgpu/internal/cuclient"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

const (
	errMPSConnection       = 805
	errUnsupportedAffinity = 224
	attrSMCount            = 16
	attrMPSEnabled         = 133
)

func init() {
	// what one process gets: MPS client or not, its SMs, its contexts' affinity
	children["mps"] = func(c *child) {
		c.open(false)
		r := cuclient.Call("cuInit", 0)
		fmt.Printf("init %d\n", r)
		if r != cudaSuccess {
			return
		}
		attr := func(a uint64) uint64 {
			c.must("cuDeviceGetAttribute", cuclient.Call("cuDeviceGetAttribute", out.At(0), a, 0))
			return uint64(out.U32(0))
		}
		fmt.Printf("mps %d\nsms %d\n", attr(attrMPSEnabled), attr(attrSMCount))
		c.must("cuDeviceGetExecAffinitySupport", cuclient.Call("cuDeviceGetExecAffinitySupport", out.At(0), 0, 0))
		fmt.Printf("support %d\n", out.U32(0))
		c.must("cuDevicePrimaryCtxRetain", cuclient.Call("cuDevicePrimaryCtxRetain", out.Ptr(), 0))
		c.must("cuCtxSetCurrent", cuclient.Call("cuCtxSetCurrent", out.U64(0)))
		c.must("cuCtxGetExecAffinity", cuclient.Call("cuCtxGetExecAffinity", out.At(200), 0))
		fmt.Printf("primary %d\n", out.U32(204))
		for _, want := range []uint32{132, 7, 66} {
			// CUctxCreateParams{&affinity, 1, NULL} at 64, the affinity at 128
			out.PutU64(64, out.At(128))
			out.PutU64(72, 1)
			out.PutU64(80, 0)
			out.PutU32(128, 0) // CU_EXEC_AFFINITY_TYPE_SM_COUNT
			out.PutU32(132, want)
			r := cuclient.Call("cuCtxCreate", out.At(0), out.At(64), 0, 0) // v4 at CUDA 13
			got := uint32(0)
			if r == cudaSuccess {
				c.must("cuCtxGetExecAffinity", cuclient.Call("cuCtxGetExecAffinity", out.At(200), 0))
				got = out.U32(204)
				c.must("cuCtxDestroy", cuclient.Call("cuCtxDestroy", out.U64(0)))
			}
			fmt.Printf("ctx%d %d %d\n", want, r, got)
		}
	}
}

type mpsSeen struct{ init, mps, sms, support, primary, ctx132, ctx7, ctx66 string }

func seeMPS(t *testing.T, r *simroot.Root, env ...string) mpsSeen {
	t.Helper()
	o := runChild(t, r, "mps", env...)
	s := mpsSeen{init: field(t, o, "init")}
	if s.init != "0" {
		return s
	}
	s.mps, s.sms, s.support, s.primary = field(t, o, "mps"), field(t, o, "sms"), field(t, o, "support"), field(t, o, "primary")
	s.ctx132, s.ctx7, s.ctx66 = field(t, o, "ctx132"), field(t, o, "ctx7"), field(t, o, "ctx66")
	return s
}

func startMPS(t *testing.T, r *simroot.Root) *simroot.MPS {
	t.Helper()
	m, err := r.StartMPS(filepath.Join(t.TempDir(), "pipe"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// As the real driver: a process is an MPS client only when a control daemon
// answers in CUDA_MPS_PIPE_DIRECTORY; otherwise it runs on the whole GPU,
// silently, and cannot have execution affinity (H200: UNSUPPORTED_EXEC_AFFINITY).
// A client sees its active thread percentage of the SMs in whole TPCs (H200:
// 30 % of 132 is 38). A context's SM count (H200, test/gpu/spatial.sh): above
// the share refused, below 8 given 8, exactly the share reported as the
// whole device.
func TestMPSClientOnlyWithDaemon(t *testing.T) {
	r := newRoot(t, simroot.Options{})
	empty := t.TempDir()
	want := func(what string, got, want mpsSeen) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %+v, want %+v", what, got, want)
		}
	}
	noAff := fmt.Sprintf("%d 0", errUnsupportedAffinity)
	want("no daemon in the pipe directory", seeMPS(t, r, "CUDA_MPS_PIPE_DIRECTORY="+empty, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"),
		mpsSeen{"0", "0", "132", "0", "132", noAff, noAff, noAff})
	m := startMPS(t, r)
	want("client at 50", seeMPS(t, r, "CUDA_MPS_PIPE_DIRECTORY="+m.Pipe, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"),
		mpsSeen{"0", "1", "66", "1", "66", noAff, "0 8", "0 132"})
	want("client at 30", seeMPS(t, r, "CUDA_MPS_PIPE_DIRECTORY="+m.Pipe, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"),
		mpsSeen{"0", "1", "38", "1", "38", noAff, "0 8", noAff})
	want("client without a percentage", seeMPS(t, r, "CUDA_MPS_PIPE_DIRECTORY="+m.Pipe),
		mpsSeen{"0", "1", "132", "1", "132", "0 132", "0 8", "0 66"})
	want("the same client, another pipe directory", seeMPS(t, r, "CUDA_MPS_PIPE_DIRECTORY="+empty, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"),
		mpsSeen{"0", "0", "132", "0", "132", noAff, noAff, noAff})
}

// The server's percentage (set_active_thread_percentage, as vgpu node holds
// it) is a ceiling: a client's own percentage only lowers it.
func TestMPSServerPercentageIsCeiling(t *testing.T) {
	r := newRoot(t, simroot.Options{})
	m := startMPS(t, r)
	if out, err := m.Command("set_default_active_thread_percentage 40"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	for _, c := range []struct{ env, sms string }{{"100", "52"}, {"", "52"}, {"20", "26"}} {
		env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + m.Pipe}
		if c.env != "" {
			env = append(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+c.env)
		}
		if got := seeMPS(t, r, env...); got.mps != "1" || got.sms != c.sms || got.primary != c.sms {
			t.Errorf("server at 40, client %q: %+v, want %s SMs", c.env, got, c.sms)
		}
	}
	servers, err := m.Command("get_server_list")
	if err != nil || len(strings.Fields(servers)) != 1 {
		t.Errorf("get_server_list: %q %v, want one server", servers, err)
	}
}

func init() {
	// NVML's compute and MPS compute processes of device 0: "compute PID
	// BYTES" and "mps PID BYTES" lines
	children["nvml-procs"] = func(c *child) {
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
		ps, r := d.GetComputeRunningProcesses()
		if r != nvml.SUCCESS {
			c.fatal("compute: %v", r)
		}
		for _, p := range ps {
			fmt.Printf("compute %d %d\n", p.Pid, p.UsedGpuMemory)
		}
		if ps, r = d.GetMPSComputeRunningProcesses(); r != nvml.SUCCESS {
			c.fatal("mps: %v", r)
		}
		for _, p := range ps {
			fmt.Printf("mps %d %d\n", p.Pid, p.UsedGpuMemory)
		}
	}
}

// As the H200's driver: an MPS client is among NVML's MPS compute processes
// and, with its memory, among the compute processes; a process without MPS
// only among the latter.
func TestNVMLListsMPSClients(t *testing.T) {
	r := newRoot(t, simroot.Options{})
	m := startMPS(t, r)
	hold := func(env ...string) int {
		h := childCmd(r, "holder", append([]string{"SIMGPU_HOLD=67108864"}, env...)...)
		stdin, _ := h.StdinPipe()
		stdout, _ := h.StdoutPipe()
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); h.Process.Kill(); h.Wait() })
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || strings.TrimSpace(line) != "READY" {
			t.Fatalf("holder did not get ready: %q %v", line, err)
		}
		return h.Process.Pid
	}
	client := hold("CUDA_MPS_PIPE_DIRECTORY=" + m.Pipe)
	plain := hold("CUDA_MPS_PIPE_DIRECTORY=" + t.TempDir())
	o := runChild(t, r, "nvml-procs")
	has := func(line string) bool { return slices.Contains(strings.Split(o, "\n"), line) }
	mem := ctxMem + 64<<20
	for _, want := range []string{fmt.Sprintf("compute %d %d", client, mem), fmt.Sprintf("compute %d %d", plain, mem), fmt.Sprintf("mps %d %d", client, mem)} {
		if !has(want) {
			t.Errorf("no %q in\n%s", want, o)
		}
	}
	if strings.Contains(o, fmt.Sprintf("mps %d ", plain)) {
		t.Errorf("a process without MPS among the MPS compute processes:\n%s", o)
	}
}

// A simulated control daemon whose pipe directory is removed without a quit
// (a test that failed before its cleanup) exits, with its server: nothing
// is left behind holding a test's files or locks.
func TestMPSDaemonExitsWithItsPipeDirectory(t *testing.T) {
	r := newRoot(t, simroot.Options{})
	bin, err := r.MPSControl()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pipe := filepath.Join(dir, "pipe")
	env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_LOG_DIRECTORY="+filepath.Join(dir, "log"))
	d := exec.Command(bin, "-f")
	d.Env = env
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Wait() }()
	defer d.Process.Kill()
	var server string
	for i := 0; i < 500 && server == ""; i++ {
		c := exec.Command(bin)
		c.Env, c.Stdin = env, strings.NewReader("start_server -uid "+strconv.Itoa(os.Getuid())+"\nget_server_list\n")
		o, _ := c.Output()
		server = strings.TrimSpace(string(o))
		time.Sleep(10 * time.Millisecond)
	}
	spid, err := strconv.Atoi(server)
	if err != nil {
		t.Fatalf("no server: %q", server)
	}
	os.RemoveAll(pipe)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the daemon, its pipe directory gone: %v, want a quit's exit 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon outlived its pipe directory")
	}
	for i := 0; i < 200 && unix.Kill(spid, 0) == nil; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if unix.Kill(spid, 0) == nil {
		t.Errorf("server %d outlived its daemon", spid)
	}
}
