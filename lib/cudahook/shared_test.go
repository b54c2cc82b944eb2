//go:build integration

// One container, many processes: the shared region under concurrent
// allocation, SIGKILL at random moments, and fork. The region is read from
// the host side exactly as `vgpu status` reads it (internal/regionread), so these
// tests check the library and the reader against each other.
package cudahook_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/regionread"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

var (
	sharedOnce sync.Once
	sharedBin  string
	sharedErr  error
)

// sharedClient builds testdata/shared.c once (-rdynamic: it interposes
// pthread_mutex_consistent to count robust-mutex recoveries).
func sharedClient(t *testing.T) string {
	t.Helper()
	buildDir(t)
	sharedOnce.Do(func() {
		root, err := simroot.Create(mustTemp(), simroot.Options{})
		if err != nil {
			sharedErr = err
			return
		}
		sharedBin = filepath.Join(mustTemp(), "shared")
		out, err := exec.Command("gcc", "-O1", "-Wall", "-Werror", "-rdynamic", "-Iinclude", "-o", sharedBin,
			"testdata/shared.c", "-L"+root.LibDir(), "-l:libcuda.so.1", "-ldl", "-lpthread").CombinedOutput()
		if err != nil {
			sharedErr = fmt.Errorf("gcc shared.c: %v\n%s", err, out)
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedBin
}

func (e *env) sharedDir() string { return filepath.Join(filepath.Dir(e.quota), "shared") }

// proc is a running client: stdin to talk to it, its key=value lines.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	kv    map[string]string
	out   bytes.Buffer
	errb  bytes.Buffer
	done  chan struct{}
}

func (e *env) start(t *testing.T, prog string, args ...string) *proc {
	t.Helper()
	p := &proc{kv: map[string]string{}, done: make(chan struct{})}
	p.cmd = exec.Command(prog, args...)
	p.cmd.Env = e.vars
	p.cmd.Stderr = &p.errb
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Waits measured here are the shared state's, not other load's on this
	// (shared, 2-core) machine: the clients run at a higher priority.
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, p.cmd.Process.Pid, -10); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			if k, v, ok := bytes.Cut(sc.Bytes(), []byte("=")); ok {
				p.kv[string(k)] = string(v)
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

func (p *proc) say(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("writing to pid %d: %v", p.cmd.Process.Pid, err)
	}
}

// wait returns the value of key once printed (and forgets it, so that a key
// printed again can be waited for again).
func (p *proc) wait(t *testing.T, key string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		v, ok := p.kv[key]
		if ok {
			delete(p.kv, key)
		}
		out := p.out.String()
		p.mu.Unlock()
		if ok {
			return v
		}
		select {
		case <-p.done:
			t.Fatalf("pid %d ended before printing %s\nstdout: %s\nstderr: %s", p.cmd.Process.Pid, key, out, p.errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: no %s after %s\nstdout: %s", p.cmd.Process.Pid, key, timeout, out)
		}
		time.Sleep(time.Millisecond)
	}
}

func (p *proc) u(t *testing.T, key string) uint64 {
	t.Helper()
	v := p.wait(t, key, 30*time.Second)
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return n
}

func readRegion(t *testing.T, dir string) *regionread.Region {
	t.Helper()
	r, err := regionread.Read(dir)
	if err != nil {
		t.Fatalf("reading the region: %v", err)
	}
	return r
}

// libraryView is the container usage the library's limit check uses: every
// slot in use, dead or alive (dead ones until they are reclaimed).
func libraryView(r *regionread.Region) uint64 {
	var s uint64
	for _, sl := range r.Slots {
		s += sl.Usage[0]
	}
	return s
}

// 16 processes of one container, each 10,000 random allocations and frees at
// once: the usage never passes the limit (sampled all along through NVML,
// which the library answers from the region's slots, and from the
// host as vgpu status reads it), and ends at exactly 0 with every process
// alive and everything freed.
func TestSixteenProcessesShareExactly(t *testing.T) {
	bin := sharedClient(t)
	const n, iters, maxMiB = 16, 10000, 64
	const limit = n*ctx + 2*GiB // every context, then 2 GiB to fight over
	e := newEnv(t, []uint64{limit})
	procs := make([]*proc, n)
	for i := range procs {
		// one at a time: a context is measured as the device's free memory
		// before and after, which a concurrent start would blur
		procs[i] = e.start(t, bin, "churn", strconv.Itoa(iters), strconv.Itoa(maxMiB), strconv.Itoa(i+1))
		procs[i].wait(t, "ready", 30*time.Second)
	}
	if got := readRegion(t, e.sharedDir()).Usage(0); got != n*ctx {
		t.Fatalf("usage with %d idle processes = %d, want %d contexts = %d", n, got, n, uint64(n*ctx))
	}
	sampler := e.start(t, bin, "sampler")
	sampler.wait(t, "ready", 30*time.Second)
	// The host's view: a reading without the mutex is one instant only when
	// two copies in a row agreed (docs/status.md); such readings must be
	// within the limit too, and no counter may ever look wrong.
	var samples, stable, maxSeen atomic.Uint64
	var bad atomic.Value
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := regionread.Read(e.sharedDir())
			if err != nil {
				bad.Store(err.Error())
				return
			}
			for _, s := range r.Slots {
				if s.Usage[0] > limit { // a counter gone negative would show as ~2^64
					bad.Store(fmt.Sprintf("slot %d (pid %d) counts %d bytes", s.Index, s.PID, s.Usage[0]))
				}
			}
			u := r.Usage(0)
			if u > maxSeen.Load() {
				maxSeen.Store(u)
			}
			if r.Stable {
				stable.Add(1)
				if u > limit {
					bad.Store(fmt.Sprintf("a stable reading of the host shows usage %d > limit %d", u, uint64(limit)))
				}
			}
			samples.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	start := time.Now()
	for _, p := range procs {
		p.say(t, "go")
	}
	var calls, refused, maxCall uint64
	for _, p := range procs {
		p.wait(t, "done", 90*time.Second)
		if v := p.u(t, "errors"); v != 0 {
			t.Errorf("pid %d: %d driver calls failed", p.cmd.Process.Pid, v)
		}
		calls += p.u(t, "calls")
		refused += p.u(t, "refused")
		if m := p.u(t, "max_call_ns"); m > maxCall {
			maxCall = m
		}
	}
	elapsed := time.Since(start)
	close(stop)
	<-sampled
	sampler.say(t, "stop")
	if v := bad.Load(); v != nil {
		t.Errorf("during the run: %s", v)
	}
	nvSamples, nvMax, nvOver := sampler.u(t, "samples"), sampler.u(t, "max_used"), sampler.u(t, "over")
	if nvOver != 0 || nvMax > limit {
		t.Errorf("NVML saw the usage above the limit %d times (max %d, limit %d)", nvOver, nvMax, uint64(limit))
	}
	if nvSamples < 20 {
		t.Errorf("only %d NVML samples", nvSamples)
	}
	r := readRegion(t, e.sharedDir())
	live := 0
	for _, s := range r.Slots {
		if s.Alive {
			live++
		}
		if s.Usage[0] != 0 {
			t.Errorf("slot %d (pid %d, alive %v) still counts %d bytes after every free", s.Index, s.PID, s.Alive, s.Usage[0])
		}
	}
	if live != n {
		t.Errorf("%d live slots, want %d (one per process)", live, n)
	}
	if u := r.Usage(0); u != 0 {
		t.Errorf("usage after every process freed everything = %d, want exactly 0", u)
	}
	if refused == 0 {
		t.Errorf("no allocation was refused: the test never reached the limit")
	}
	t.Logf("%d processes × %d ops in %v: %d driver calls, %d refused at the limit; NVML: %d samples, max used %d of limit %d; host reader: %d samples (%d stable), max %d; longest call %v",
		n, iters, elapsed.Round(time.Millisecond), calls, refused, nvSamples, nvMax, uint64(limit), samples.Load(), stable.Load(), maxSeen.Load(), time.Duration(maxCall))
}

// 100 trials: a process allocating in a loop (and scanning for dead slots,
// so that many kills land inside a scan or a reservation) is SIGKILLed
// at a random moment while three others keep allocating. The mechanisms, not
// wall-clock bounds (a loaded machine stretches every wait): the dead slot
// leaves the library's count (the container's usage, as its limit check sees
// it, becomes the sum of the live processes' usage); the region's mutex is
// never taken (nothing to repair: no process waits for another); no
// survivor's driver call fails or hangs; and each
// survivor's slot is, after every one of its own operations and at the end,
// exactly what it holds plus its context. How long all that took is logged.
//
// Four trials in five start the next victim at once (its slot claim and
// usage queries reclaim the dead slot); every fifth waits with only the
// survivors allocating (the library's periodic scan on the allocation path).
func TestSIGKILLAtRandomMoments(t *testing.T) {
	bin := sharedClient(t)
	const survivors, trials, maxMiB = 3, 100, 32
	const limit = 4 * GiB
	e := newEnv(t, []uint64{limit})
	surv := make([]*proc, survivors)
	for i := range surv {
		surv[i] = e.start(t, bin, "survivor", strconv.Itoa(maxMiB), strconv.Itoa(100+i), filepath.Join(e.sharedDir(), contract.RegionFile))
		surv[i].wait(t, "ready", 30*time.Second)
	}
	for _, p := range surv {
		p.say(t, "go")
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var quiet, busy []time.Duration
	// clean waits until no dead slot is counted by the library any more.
	clean := func(trial int, dead time.Time, into *[]time.Duration) {
		for {
			r := readRegion(t, e.sharedDir())
			if libraryView(r) == r.Usage(0) {
				*into = append(*into, time.Since(dead))
				return
			}
			// a guard against a hang, not a bound: the scan runs every 100 ms
			if time.Since(dead) > 30*time.Second {
				t.Fatalf("trial %d: 30 s after the victim's death the library still counts %d bytes, the live processes %d",
					trial, libraryView(r), r.Usage(0))
			}
			time.Sleep(time.Millisecond)
		}
	}
	var kills []int64
	victim := func(trial int) *proc {
		return e.start(t, bin, "victim", strconv.Itoa(maxMiB), strconv.Itoa(1000+trial))
	}
	v := victim(0)
	for trial := 0; trial < trials; trial++ {
		v.wait(t, "ready", 30*time.Second)
		time.Sleep(time.Duration(rng.Int63n(int64(10 * time.Millisecond))))
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		kills = append(kills, ts.Nano())
		if err := v.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		v.cmd.Wait()
		dead := time.Now()
		if trial%5 == 4 || trial == trials-1 {
			clean(trial, dead, &quiet)
			if trial < trials-1 {
				v = victim(trial + 1)
			}
		} else {
			v = victim(trial + 1) // starting while the dead slot is still counted
			clean(trial, dead, &busy)
		}
	}
	for _, p := range surv {
		p.say(t, "stop")
	}
	for _, p := range surv {
		p.wait(t, "done", 30*time.Second)
	}
	r := readRegion(t, e.sharedDir())
	var sum, recovered, maxWait, waits, maxCall, calls, loadWaits, deathWaits uint64
	for _, p := range surv {
		pid := int(p.u(t, "pid"))
		own := p.u(t, "own")
		if v := p.u(t, "errors"); v != 0 {
			t.Errorf("survivor %d: %d driver calls failed", pid, v)
		}
		if v := p.wait(t, "selfcheck", 5*time.Second); !bytes.HasSuffix([]byte(v), []byte(" mismatches 0")) {
			t.Errorf("survivor %d: its slot did not match what it held after each of its operations: %s\n%s", pid, v, p.out.String())
		}
		maxWait = max(maxWait, p.u(t, "max_lock_wait_ns"))
		// Long waits are figures (a loaded machine makes them); a lock that
		// returned an error is a mutex the library failed to repair.
		for i := 0; i < 64; i++ {
			p.mu.Lock()
			v, ok := p.kv[fmt.Sprintf("longwait%d", i)]
			p.mu.Unlock()
			if !ok {
				break
			}
			var at, dur int64
			var rc int
			if _, err := fmt.Sscanf(v, "%d %d %d", &at, &dur, &rc); err != nil {
				t.Fatalf("survivor %d: longwait%d=%q: %v", pid, i, v, err)
			}
			if rc != 0 && rc != int(unix.EOWNERDEAD) {
				t.Errorf("survivor %d: a lock of the region's mutex returned %d after %v (not repaired)", pid, rc, time.Duration(dur))
			}
			overlaps := false
			for _, k := range kills {
				overlaps = overlaps || (at <= k+int64(5*time.Millisecond) && at+dur >= k)
			}
			if dur > int64(100*time.Millisecond) && overlaps {
				deathWaits++
			} else if dur > int64(100*time.Millisecond) {
				loadWaits++
			}
		}
		waits += p.u(t, "lock_waits")
		maxCall = max(maxCall, p.u(t, "max_call_ns"))
		calls += p.u(t, "calls")
		recovered += p.u(t, "ownerdead_region")
		found := false
		for _, s := range r.Slots {
			if s.PID == pid && s.Alive {
				found = true
				if s.Usage[0] != own+ctx {
					t.Errorf("survivor %d: slot counts %d, it holds %d + its context %d", pid, s.Usage[0], own, uint64(ctx))
				}
			}
		}
		if !found {
			t.Errorf("survivor %d has no live slot", pid)
		}
		sum += own + ctx
	}
	if got := r.Usage(0); got != sum {
		t.Errorf("container usage %d, the survivors hold %d", got, sum)
	}
	if recovered != 0 {
		t.Errorf("the region's mutex was recovered %d times: the library no longer takes it", recovered)
	}
	t.Logf("%d kills (%d inside the region's lock, recovered with EOWNERDEAD); dead slot out of the library's count: %s with a new process starting, %s with only allocations going on; survivors: %d waits for the region's mutex, longest %v, over 100 ms: %d across a victim's death, %d with every holder alive; %d driver calls, longest %v",
		trials, recovered, durStats(busy), durStats(quiet), waits, time.Duration(maxWait), deathWaits, loadWaits, calls, time.Duration(maxCall))
}

func durStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	var sum, worst time.Duration
	for _, d := range ds {
		sum += d
		worst = max(worst, d)
	}
	return fmt.Sprintf("%d trials, mean %v, worst %v", len(ds), (sum / time.Duration(len(ds))).Round(time.Microsecond), worst.Round(time.Microsecond))
}

// fork without exec: the child claims its own slot, both are counted, the
// child's share comes back when it dies holding it.
func TestForkChildOwnSlotHostView(t *testing.T) {
	bin := sharedClient(t)
	const limit = 4 * GiB
	e := newEnv(t, []uint64{limit})
	p := e.start(t, bin, "fork-hold")
	parentPID := p.cmd.Process.Pid
	if got := p.u(t, "parent_free"); got != limit-ctx-GiB {
		t.Errorf("parent after 1 GiB: free %d, want %d", got, uint64(limit-ctx-GiB))
	}
	if rc := p.wait(t, "child_alloc", 30*time.Second); rc != "0" {
		t.Fatalf("child allocation: %s", rc)
	}
	if got := p.u(t, "child_free"); got != limit-2*ctx-2*GiB {
		t.Errorf("child sees free %d, want both counted: %d", got, uint64(limit-2*ctx-2*GiB))
	}
	childPID := int(p.u(t, "child_pid"))
	r := readRegion(t, e.sharedDir())
	bypid := map[int]uint64{}
	for _, s := range r.Slots {
		if s.Alive {
			bypid[s.PID] = s.Usage[0]
		}
	}
	if len(bypid) != 2 || bypid[parentPID] != ctx+GiB || bypid[childPID] != ctx+GiB {
		t.Errorf("live slots by pid %v, want parent %d and child %d with %d each", bypid, parentPID, childPID, uint64(ctx+GiB))
	}
	if u := r.Usage(0); u != 2*(ctx+GiB) {
		t.Errorf("host view: usage %d, want %d", u, uint64(2*(ctx+GiB)))
	}
	p.say(t, "reap") // SIGTERM: the child dies holding its 1 GiB
	p.wait(t, "reaped", 30*time.Second)
	if u := readRegion(t, e.sharedDir()).Usage(0); u != ctx+GiB {
		t.Errorf("host view right after the child's death: usage %d, want the parent's %d", u, uint64(ctx+GiB))
	}
	p.say(t, "info")
	if got := p.u(t, "now_free"); got != limit-ctx-GiB {
		t.Errorf("parent after the child died: free %d, want %d", got, uint64(limit-ctx-GiB))
	}
	p.say(t, "free")
	if got := p.u(t, "freed_free"); got != limit-ctx {
		t.Errorf("parent after its free: %d, want %d", got, uint64(limit-ctx))
	}
	if u := readRegion(t, e.sharedDir()).Usage(0); u != ctx {
		t.Errorf("host view at the end: %d, want the parent's context %d", u, uint64(ctx))
	}
}

// A process killed while creating the region (after sizing the file, before
// its last store, the magic) leaves a region of zeros. The next process
// holds the creation lock, so nobody else is creating it: it must create it
// again, not fail closed for the rest of the container's life.
func TestRegionCreatorKilledBeforeMagic(t *testing.T) {
	dir := clients(t)
	e := newEnv(t, []uint64{GiB})
	if err := os.WriteFile(filepath.Join(e.sharedDir(), contract.RegionFile), make([]byte, contract.RegionBytes), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := regionread.Read(e.sharedDir()); err != regionread.ErrNoRegion {
		t.Errorf("host reader on an unfinished region: %v, want ErrNoRegion", err)
	}
	r := e.run(filepath.Join(dir, "client-link"), "info")
	if got := r.u(t, "now_free"); got != GiB-ctx {
		t.Errorf("free %d, want %d (stderr %s)", got, uint64(GiB-ctx), r.stderr)
	}
	if reg := readRegion(t, e.sharedDir()); reg.Version < 1 {
		t.Errorf("region not recreated: version %d", reg.Version)
	}
}
