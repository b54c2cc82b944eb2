//go:build integration

package simgpu_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/vgpu-dev/vgpu/test/simgpu/internal/cuclient"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

func init() {
	// allocates SIMGPU_HOLD bytes, forks a child that keeps the driver's
	// descriptors and sleeps, prints READY, exits at the first line of stdin
	children["orphan-parent"] = func(c *child) {
		c.setup()
		n, _ := strconv.ParseUint(os.Getenv("SIMGPU_HOLD"), 10, 64)
		c.must("alloc", cuclient.Call("cuMemAlloc", out.At(100), n))
		if cuclient.ForkHold() < 0 {
			c.fatal("fork failed")
		}
		fmt.Println("READY")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // a line or EOF: either says go on
	}
	// device 0's compute processes ("PROC pid bytes") and used memory
	children["orphan-nvml-procs"] = func(c *child) {
		lib := nvml.New(nvml.WithLibraryPath(libPath("libnvidia-ml.so.1")))
		if r := lib.Init(); r != nvml.SUCCESS {
			c.fatal("Init: %v", r)
		}
		// The child exits next, which releases NVML whatever Shutdown says.
		defer func() { _ = lib.Shutdown() }()
		d, r := lib.DeviceGetHandleByIndex(0)
		if r != nvml.SUCCESS {
			c.fatal("DeviceGetHandleByIndex: %v", r)
		}
		ps, r := d.GetComputeRunningProcesses()
		if r != nvml.SUCCESS {
			c.fatal("GetComputeRunningProcesses: %v", r)
		}
		for _, p := range ps {
			fmt.Printf("PROC %d %d\n", p.Pid, p.UsedGpuMemory)
		}
		m, r := d.GetMemoryInfo()
		if r != nvml.SUCCESS {
			c.fatal("GetMemoryInfo: %v", r)
		}
		fmt.Printf("USED %d\n", m.Used)
	}
}

// nvmlProcs is device 0's compute processes (pid -> bytes) and used memory,
// as a reader in the host's pid namespace sees them.
func nvmlProcs(t *testing.T, r *simroot.Root) (map[int]uint64, uint64) {
	t.Helper()
	outp := runChild(t, r, "orphan-nvml-procs")
	procs := map[int]uint64{}
	for _, l := range strings.Split(outp, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "PROC" {
			pid, _ := strconv.Atoi(f[1])
			procs[pid], _ = strconv.ParseUint(f[2], 10, 64)
		}
	}
	used, _ := strconv.ParseUint(field(t, outp, "USED"), 10, 64)
	return procs, used
}

// The real driver (H200, driver 580): a process that allocates 4 GiB,
// forks a child that keeps the driver's descriptors and exits leaves the
// memory used, and NVML lists the exited parent's pid for it until the
// child exits. The simulator follows that for a process in a pid
// namespace of its own (a container) that a host reader saw alive: before,
// it listed such memory under no process at all.
func TestExitedParentListedWhileChildHoldsDescriptors(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a pid namespace)")
	}
	r := newRoot(t, simroot.Options{})
	const hold = 4 << 30
	// sh is the namespace's init and outlives the parent; unshare takes the
	// namespace (the holder too) down when killed
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "sh", "-c", `"$0" -test.run='^$'; exec sleep 600`, os.Args[0])
	cmd.Env = append(childCmd(r, "orphan-parent").Env, fmt.Sprintf("SIMGPU_HOLD=%d", hold))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if l, _ := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(l) != "READY" {
		t.Fatalf("parent: %q", l)
	}
	procs, _ := nvmlProcs(t, r) // the host sees the parent alive
	parent := 0
	for pid, b := range procs {
		if b == ctxMem+hold {
			parent = pid
		}
	}
	if parent == 0 {
		t.Fatalf("the parent's %d bytes are not listed: %v", ctxMem+hold, procs)
	}
	stdin.Close() // the parent exits; its child keeps the descriptors
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(parent, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("parent %d did not exit", parent)
		}
	}
	procs, used := nvmlProcs(t, r)
	if procs[parent] != ctxMem+hold || used != ctxMem+hold {
		t.Errorf("after the parent's exit NVML lists %v and %d bytes used, want the exited pid %d with %d (as driver 580 does)", procs, used, parent, ctxMem+hold)
	}
	cmd.Process.Kill() // the holder goes with the namespace
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs, used = nvmlProcs(t, r)
		if len(procs) == 0 && used == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with the child gone NVML still lists %v, %d bytes used", procs, used)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
