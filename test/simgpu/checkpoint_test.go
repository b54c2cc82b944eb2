//go:build integration

package simgpu_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/test/simgpu/internal/cuclient"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// CUresult values of the checkpoint API (the real driver's)
const (
	errOperatingSystem = 304
	errIllegalState    = 401
	errNotSupported    = 801
)

// CUprocessState values
const (
	stateRunning      = 0
	stateLocked       = 1
	stateCheckpointed = 2
)

func init() {
	// holds SIMGPU_HOLD bytes with a pattern in its first MiB (and 2 MiB of
	// managed memory with SIMGPU_MANAGED=1), prints READY, then answers
	// stdin: "check" (the pattern read back: CHECK ok|bad), "launch US" (a
	// kernel of US microseconds, not waited for: LAUNCHED)
	children["ckpt-target"] = func(c *child) {
		c.setup()
		n, _ := strconv.ParseUint(os.Getenv("SIMGPU_HOLD"), 10, 64)
		c.must("alloc", cuclient.Call("cuMemAlloc", out.At(100), n))
		d := out.U64(100)
		if os.Getenv("SIMGPU_MANAGED") == "1" {
			c.must("managed", cuclient.Call("cuMemAllocManaged", out.At(108), 2*mib, 1))
		}
		pattern := cuclient.Alloc(mib)
		b := make([]byte, mib)
		for i := range b {
			b[i] = byte(i*7 + 3)
		}
		pattern.SetBytes(b)
		c.must("HtoD", cuclient.Call("cuMemcpyHtoD", d, pattern.Ptr(), mib))
		back := cuclient.Alloc(mib)
		f := loadFunc(c, "spin_20000000us", "spin_20000000us")
		fmt.Println("READY")
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch l := strings.Fields(in.Text()); l[0] {
			case "check":
				r := cuclient.Call("cuMemcpyDtoH", back.Ptr(), d, mib)
				if r != cudaSuccess || !bytes.Equal(back.Bytes(), b) {
					fmt.Printf("CHECK bad %d\n", r)
				} else {
					fmt.Println("CHECK ok")
				}
			case "launch":
				launch(c, f, 0)
				fmt.Println("LAUNCHED")
			}
		}
	}
	// another process's calls on SIMGPU_PID, one per word of SIMGPU_OPS
	// (lock:TIMEOUT_MS, checkpoint, restore, unlock): "OP name CUresult state"
	children["ckpt-ctl"] = func(c *child) {
		c.open(false)
		c.must("cuInit", cuclient.Call("cuInit", 0))
		pid, _ := strconv.ParseUint(os.Getenv("SIMGPU_PID"), 10, 64)
		args := cuclient.Alloc(64)
		for _, op := range strings.Fields(os.Getenv("SIMGPU_OPS")) {
			name, timeout, _ := strings.Cut(op, ":")
			ms, _ := strconv.ParseUint(timeout, 10, 32)
			args.PutU64(0, ms) // timeoutMs, reserved0
			fn := map[string]string{"lock": "cuCheckpointProcessLock", "checkpoint": "cuCheckpointProcessCheckpoint",
				"restore": "cuCheckpointProcessRestore", "unlock": "cuCheckpointProcessUnlock"}[name]
			r := cuclient.Call(fn, pid, args.Ptr())
			st := cuclient.Call("cuCheckpointProcessGetState", pid, out.At(0))
			fmt.Printf("OP %s %d %d %d\n", name, r, st, out.U32(0))
		}
	}
}

type ckptTarget struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	pid   int
}

func startTarget(t *testing.T, r *simroot.Root, hold uint64, env ...string) *ckptTarget {
	t.Helper()
	cmd := childCmd(r, "ckpt-target", append(env, fmt.Sprintf("SIMGPU_HOLD=%d", hold))...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg := &ckptTarget{cmd: cmd, in: in, lines: make(chan string, 16), pid: cmd.Process.Pid}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		s := bufio.NewScanner(outp)
		for s.Scan() {
			tg.lines <- s.Text()
		}
		close(tg.lines)
	}()
	if l := tg.next(t, 30*time.Second); l != "READY" {
		t.Fatalf("target: %q", l)
	}
	return tg
}

func (tg *ckptTarget) next(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-tg.lines:
		if !ok {
			t.Fatal("target exited")
		}
		return l
	case <-time.After(within):
		t.Fatalf("target said nothing within %v", within)
		return ""
	}
}

func (tg *ckptTarget) say(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(tg.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// ctl runs the ops on the target from another process: each op's CUresult
// and the state after it.
func ctl(t *testing.T, r *simroot.Root, pid int, ops string) (rcs, states []int) {
	t.Helper()
	outp := runChild(t, r, "ckpt-ctl", fmt.Sprintf("SIMGPU_PID=%d", pid), "SIMGPU_OPS="+ops)
	for _, l := range strings.Split(outp, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "OP" {
			rc, _ := strconv.Atoi(f[2])
			st, _ := strconv.Atoi(f[4])
			rcs, states = append(rcs, rc), append(states, st)
		}
	}
	if len(rcs) != len(strings.Fields(ops)) {
		t.Fatalf("ctl %s: %s", ops, outp)
	}
	return rcs, states
}

func rssBytes(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for %d", pid)
	return 0
}

const ckptCtx = 32 * mib

func ckptRoot(t *testing.T, devMem uint64) *simroot.Root {
	return newRoot(t, simroot.Options{Devices: []simroot.Device{{MemoryBytes: devMem}}, ContextMemory: ckptCtx})
}

// The driver 580 checkpoint API as the probe found it: suspended, the
// process holds no device memory, is listed by no NVML call, its copy is its
// own host memory and its driver calls wait; restored and unlocked, its
// memory is back and intact.
func TestCheckpointSuspendsAndRestores(t *testing.T) {
	const hold = 128 * mib
	r := ckptRoot(t, 512*mib)
	tg := startTarget(t, r, hold)
	if procs, used := nvmlProcs(t, r); procs[tg.pid] != ckptCtx+hold || used != ckptCtx+hold {
		t.Fatalf("before: NVML lists %v, %d used; want pid %d with %d", procs, used, tg.pid, ckptCtx+hold)
	}
	rss0 := rssBytes(t, tg.pid)
	rcs, states := ctl(t, r, tg.pid, "lock:5000 checkpoint")
	if rcs[0] != cudaSuccess || states[0] != stateLocked || rcs[1] != cudaSuccess || states[1] != stateCheckpointed {
		t.Fatalf("lock, checkpoint: CUresults %v, states %v; want 0 0 and locked, checkpointed", rcs, states)
	}
	if procs, used := nvmlProcs(t, r); len(procs) != 0 || used != 0 {
		t.Errorf("checkpointed: NVML lists %v, %d used; want nothing", procs, used)
	}
	if rss := rssBytes(t, tg.pid); rss < rss0+ckptCtx+hold {
		t.Errorf("checkpointed: the target's RSS %d, want at least %d more than before (%d): the host copy is its own memory", rss, ckptCtx+hold, rss0)
	}
	tg.say(t, "check")
	select {
	case l := <-tg.lines:
		t.Fatalf("a checkpointed process's driver call returned: %q", l)
	case <-time.After(300 * time.Millisecond):
	}
	rcs, states = ctl(t, r, tg.pid, "restore unlock")
	if rcs[0] != cudaSuccess || states[0] != stateLocked || rcs[1] != cudaSuccess || states[1] != stateRunning {
		t.Fatalf("restore, unlock: CUresults %v, states %v; want 0 0 and locked, running", rcs, states)
	}
	if l := tg.next(t, 30*time.Second); l != "CHECK ok" {
		t.Errorf("after restore the memory reads back %q, want CHECK ok", l)
	}
	if procs, used := nvmlProcs(t, r); procs[tg.pid] != ckptCtx+hold || used != ckptCtx+hold {
		t.Errorf("restored: NVML lists %v, %d used; want pid %d with %d", procs, used, tg.pid, ckptCtx+hold)
	}
	if rss := rssBytes(t, tg.pid); rss >= rss0+ckptCtx+hold {
		t.Errorf("restored: the target's RSS %d still holds the host copy (before: %d)", rss, rss0)
	}
	// the states are a sequence: no checkpoint of a running process, no
	// unlock of a running one
	rcs, _ = ctl(t, r, tg.pid, "checkpoint unlock restore")
	for i, rc := range rcs {
		if rc != errIllegalState {
			t.Errorf("op %d on a running process: CUresult %d, want CUDA_ERROR_ILLEGAL_STATE", i, rc)
		}
	}
}

// A restore that lacks room fails, and every later one fails too, as on
// driver 580; killing the checkpointed process frees everything.
func TestCheckpointRestoreWithoutRoomIsFinal(t *testing.T) {
	const hold = 128 * mib
	r := ckptRoot(t, 256*mib)
	tg := startTarget(t, r, hold)
	if rcs, _ := ctl(t, r, tg.pid, "lock:5000 checkpoint"); rcs[0] != cudaSuccess || rcs[1] != cudaSuccess {
		t.Fatalf("lock, checkpoint: %v", rcs)
	}
	// the room it left is taken (a context and all the rest)
	filler := childCmd(r, "holder", fmt.Sprintf("SIMGPU_HOLD=%d", 256*mib-2*ckptCtx))
	fin, _ := filler.StdinPipe()
	fout, _ := filler.StdoutPipe()
	if err := filler.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = filler.Process.Kill(); _ = filler.Wait() }()
	if l, _ := bufio.NewReader(fout).ReadString('\n'); strings.TrimSpace(l) != "READY" {
		t.Fatalf("holder: %q", l)
	}
	rcs, states := ctl(t, r, tg.pid, "restore")
	if rcs[0] != errOutOfMemory || states[0] != stateCheckpointed {
		t.Fatalf("restore without room: CUresult %d, state %d; want CUDA_ERROR_OUT_OF_MEMORY, checkpointed", rcs[0], states[0])
	}
	_ = fin.Close()
	_ = filler.Wait()
	rcs, states = ctl(t, r, tg.pid, "restore")
	if rcs[0] != errOperatingSystem || states[0] != stateCheckpointed {
		t.Errorf("restore with room after one without: CUresult %d, state %d; want CUDA_ERROR_OPERATING_SYSTEM for good", rcs[0], states[0])
	}
	_ = tg.cmd.Process.Kill()
	_ = tg.cmd.Wait()
	if outp := runChild(t, r, "filler", "SIMGPU_FILL=1"); field(t, outp, "FREE") != strconv.Itoa(256*mib-ckptCtx) {
		t.Errorf("after the checkpointed process is killed: %s", outp)
	}
}

// A lock waits for the process's kernels and honours its timeout; a
// process with managed memory is refused a checkpoint and left locked.
func TestCheckpointRefusals(t *testing.T) {
	t.Run("kernel in flight", func(t *testing.T) {
		r := ckptRoot(t, 512*mib)
		tg := startTarget(t, r, 16*mib)
		tg.say(t, "launch")
		if l := tg.next(t, 30*time.Second); l != "LAUNCHED" {
			t.Fatalf("target: %q", l)
		}
		rcs, states := ctl(t, r, tg.pid, "lock:200")
		if rcs[0] != errNotReady || states[0] != stateRunning {
			t.Errorf("lock with 200 ms beside a 20 s kernel: CUresult %d, state %d; want CUDA_ERROR_NOT_READY, running", rcs[0], states[0])
		}
	})
	t.Run("managed memory", func(t *testing.T) {
		r := ckptRoot(t, 512*mib)
		tg := startTarget(t, r, 16*mib, "SIMGPU_MANAGED=1")
		rcs, states := ctl(t, r, tg.pid, "lock:5000 checkpoint")
		if rcs[0] != cudaSuccess || rcs[1] != errNotSupported || states[1] != stateLocked {
			t.Fatalf("checkpoint with managed memory: CUresults %v, states %v; want 0, CUDA_ERROR_NOT_SUPPORTED and locked", rcs, states)
		}
		if rcs, states := ctl(t, r, tg.pid, "unlock"); rcs[0] != cudaSuccess || states[0] != stateRunning {
			t.Fatalf("unlock: %v %v", rcs, states)
		}
		tg.say(t, "check")
		if l := tg.next(t, 30*time.Second); l != "CHECK ok" {
			t.Errorf("after the refused checkpoint: %q", l)
		}
	})
	t.Run("not a CUDA process", func(t *testing.T) {
		r := ckptRoot(t, 512*mib)
		outp := runChild(t, r, "ckpt-ctl", fmt.Sprintf("SIMGPU_PID=%d", os.Getpid()), "SIMGPU_OPS=lock:100")
		if !strings.Contains(outp, fmt.Sprintf("OP lock %d ", errNotInitialized)) {
			t.Errorf("lock of a process without CUDA: %s; want CUDA_ERROR_NOT_INITIALIZED", outp)
		}
		outp = runChild(t, r, "ckpt-ctl", "SIMGPU_PID=4000000", "SIMGPU_OPS=lock:100")
		if !strings.Contains(outp, fmt.Sprintf("OP lock %d ", errOperatingSystem)) {
			t.Errorf("lock of a pid that does not exist: %s; want CUDA_ERROR_OPERATING_SYSTEM", outp)
		}
	})
	t.Run("MPS client", func(t *testing.T) {
		r := ckptRoot(t, 512*mib)
		m := startMPS(t, r)
		tg := startTarget(t, r, 16*mib, "CUDA_MPS_PIPE_DIRECTORY="+m.Pipe)
		rcs, states := ctl(t, r, tg.pid, "lock:1000")
		if rcs[0] != errNotSupported || states[0] != stateRunning {
			t.Errorf("lock of an MPS client: CUresult %d, state %d; want CUDA_ERROR_NOT_SUPPORTED, running", rcs[0], states[0])
		}
	})
}
