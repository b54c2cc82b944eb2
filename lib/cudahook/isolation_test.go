//go:build integration

// Tenant isolation of the shared region (docs/security.md): a full filesystem under
// the shared directory fails closed, and a stopped process blocks nobody.
package cudahook_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/hostpids"
	"github.com/vgpu-dev/vgpu/internal/state/statetest"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// fullTmpfs mounts a 1 MiB tmpfs at dir and fills it to the last block, as
// a tenant's `dd` into its writable share would.
func fullTmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0777"); err != nil {
		t.Fatalf("mounting a tmpfs at %s (the test needs root): %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	f, err := os.Create(filepath.Join(dir, "junk"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// runFailing runs a client that is expected to fail closed: it must exit,
// not die of a signal (SIGBUS on a sparse page), and say why on stderr.
func runFailing(t *testing.T, e *env, prog string, args ...string) string {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = e.vars
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	// A failing exit is the case under test; one that did not start is not.
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("client killed by %v\nstdout: %s\nstderr: %s", ws.Signal(), out.String(), errb.String())
	}
	return errb.String()
}

// vgpuLines are the library's own lines in a client's stderr.
func vgpuLines(stderr string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(l, "vgpu:") {
			lines = append(lines, l)
		}
	}
	return lines
}

// The shared directory's filesystem is full: the region cannot be backed,
// the library fails closed with one line naming the cause, no SIGBUS. Both
// with no region yet and with a region file extended sparsely (ftruncate,
// which a full filesystem allows) before the library opened it.
func TestFullSharedFilesystemFailsClosed(t *testing.T) {
	dir := clients(t)
	for _, sparse := range []bool{false, true} {
		t.Run("sparse="+strconv.FormatBool(sparse), func(t *testing.T) {
			e := newEnv(t, []uint64{GiB})
			fullTmpfs(t, e.sharedDir())
			if sparse {
				if err := os.WriteFile(filepath.Join(e.sharedDir(), contract.RegionFile), nil, 0o666); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(filepath.Join(e.sharedDir(), contract.RegionFile), contract.RegionBytes); err != nil {
					t.Fatal(err)
				}
			}
			stderr := runFailing(t, e, filepath.Join(dir, "client-link"), "info")
			lines := vgpuLines(stderr)
			if len(lines) != 1 || !strings.Contains(lines[0], "no space left on device") && !strings.Contains(lines[0], "No space left on device") ||
				!strings.Contains(lines[0], "refusing GPU access") {
				t.Fatalf("want one vgpu: line naming the full filesystem, stderr:\n%s", stderr)
			}
		})
	}
}

// A process stopped (SIGSTOP) in the middle of a reservation, the point where
// the library used to hold the region's mutex, blocks nobody: three others
// finish their allocation rounds. Resumed, it finishes too, and the
// accounting is exact: every slot back at 0, no negative (wrapped) count.
func TestStoppedProcessBlocksNobody(t *testing.T) {
	bin := sharedClient(t)
	const others, iters, maxMiB = 3, 2000, 64
	const limit = (others+1)*ctx + 1*GiB
	e := newEnv(t, []uint64{limit})
	stopped := &env{t: t, root: e.root, quota: e.quota, vars: append(append([]string{}, e.vars...), "VGPU_TEST_STOP=reserve")}
	s := stopped.start(t, bin, "churn", "50", strconv.Itoa(maxMiB), "99")
	// it stops at its first reservation (its context's, or its first
	// allocation's once told to go): wait for that state
	deadline := time.Now().Add(60 * time.Second)
	started := false
	for !processStopped(t, s.cmd.Process.Pid) {
		s.mu.Lock()
		_, ready := s.kv["ready"]
		s.mu.Unlock()
		if ready && !started {
			s.wait(t, "ready", time.Second)
			s.say(t, "go")
			started = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never stopped itself\nstderr: %s", s.cmd.Process.Pid, s.errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	procs := make([]*proc, others)
	for i := range procs {
		procs[i] = e.start(t, bin, "churn", strconv.Itoa(iters), strconv.Itoa(maxMiB), strconv.Itoa(i+1))
		procs[i].wait(t, "ready", 60*time.Second)
	}
	for _, p := range procs {
		p.say(t, "go")
	}
	for _, p := range procs {
		// a guard against a hang, not a bound: a loaded machine stretches it
		p.wait(t, "done", 120*time.Second)
		if v := p.u(t, "errors"); v != 0 {
			t.Errorf("pid %d: %d driver calls failed", p.cmd.Process.Pid, v)
		}
	}
	if !processStopped(t, s.cmd.Process.Pid) {
		t.Fatalf("the stopped process ran meanwhile: the test did not test a stopped holder")
	}
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !started {
		s.wait(t, "ready", 60*time.Second)
		s.say(t, "go")
	}
	s.wait(t, "done", 60*time.Second)
	if v := s.u(t, "errors"); v != 0 {
		t.Errorf("the resumed process: %d driver calls failed", v)
	}
	r := readRegion(t, e.sharedDir())
	for _, sl := range r.Slots {
		if sl.Usage[0] != 0 {
			t.Errorf("slot %d (pid %d, alive %v) counts %d bytes after every free", sl.Index, sl.PID, sl.Alive, sl.Usage[0])
		}
	}
	if u := r.Usage(0); u != 0 {
		t.Errorf("container usage %d after every process freed everything, want 0", u)
	}
}

// processStopped reads the state field of /proc/<pid>/stat (T: stopped).
func processStopped(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'T'
}

// siblingEnv is a second container on e's simulated GPU: its own quota file
// and shared directory, the same devices.
func siblingEnv(t *testing.T, e *env) *env {
	t.Helper()
	dir := t.TempDir()
	q, err := os.ReadFile(e.quota)
	if err != nil {
		t.Fatal(err)
	}
	q = bytes.Replace(q, []byte("shared-dir "+e.sharedDir()+"\n"), []byte("shared-dir "+filepath.Join(dir, "shared")+"\n"), 1)
	if err := os.Mkdir(filepath.Join(dir, "shared"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "quota"), q, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &env{t: t, root: e.root, quota: filepath.Join(dir, "quota")}
	for _, v := range e.vars {
		if strings.HasPrefix(v, "VGPU_QUOTA_FILE=") {
			v = "VGPU_QUOTA_FILE=" + s.quota
		}
		s.vars = append(s.vars, v)
	}
	return s
}

// smiProcs runs the simulator's nvidia-smi under e's library (inside a new
// PID namespace when pidns, as in a container) and returns its process
// table: PID -> MiB.
func smiProcs(t *testing.T, e *env, pidns bool) map[int]int {
	t.Helper()
	smi := filepath.Join(e.root.Dir(), "usr", "bin", "nvidia-smi")
	cmd := exec.Command(smi)
	if pidns {
		cmd = exec.Command("unshare", "--pid", "--fork", smi)
	}
	cmd.Env = e.vars
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nvidia-smi: %v\n%s", err, out)
	}
	procs := map[int]int{}
	_, table, _ := strings.Cut(string(out), "Processes:")
	row := regexp.MustCompile(`(?m)^\|\s+\d+\s+(\d+)\s.*\s(\d+)MiB \|$`)
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		pid, _ := strconv.Atoi(m[1])
		mib, _ := strconv.Atoi(m[2])
		procs[pid] = mib
	}
	return procs
}

// Two containers on one GPU, each with a process holding memory: each
// tenant's nvidia-smi lists its own process only, with its real usage, under
// the PID the host's map gives it (hostpids.Write, as `vgpu node` does);
// without a map, inside a PID namespace nobody is listed, and on the host's
// (vgpu exec) the region's own processes are.
func TestNVMLListsOwnProcessesOnly(t *testing.T) {
	dir := clients(t)
	e1 := newEnv(t, []uint64{4 * GiB})
	e2 := siblingEnv(t, e1)
	a := e1.start(t, filepath.Join(dir, "client-link"), "hold", "512")
	b := e2.start(t, filepath.Join(dir, "client-link"), "hold", "1024")
	for _, p := range []*proc{a, b} {
		if rc := p.wait(t, "hold_rc", 30*time.Second); !strings.HasPrefix(rc, "0") {
			t.Fatalf("hold: rc %s\n%s", rc, p.errb.String())
		}
	}
	apid, bpid := a.cmd.Process.Pid, b.cmd.Process.Pid
	stateOf := func(e *env) (string, string) {
		d := filepath.Dir(e.quota)
		return filepath.Dir(d), filepath.Base(d)
	}
	if got := smiProcs(t, e1, false); len(got) != 1 || got[apid] < 512 {
		t.Errorf("host PID namespace, no map: container 1 sees %v, want only pid %d with >= 512 MiB (the other holds pid %d)", got, apid, bpid)
	}
	if got := smiProcs(t, e1, true); len(got) != 0 {
		t.Errorf("in a PID namespace with no map: container 1 sees %v, want nobody", got)
	}
	s1, id1 := stateOf(e1)
	s2, id2 := stateOf(e2)
	if err := hostpids.Write(s1, id1, map[int]int{apid: 7}); err != nil {
		t.Fatal(err)
	}
	if err := hostpids.Write(s2, id2, map[int]int{bpid: 7}); err != nil {
		t.Fatal(err)
	}
	if got := smiProcs(t, e1, true); len(got) != 1 || got[7] < 512 || got[7] >= 1024 {
		t.Errorf("container 1 with its map sees %v, want only pid 7 with its 512 MiB (+ context)", got)
	}
	if got := smiProcs(t, e2, true); len(got) != 1 || got[7] < 1024 {
		t.Errorf("container 2 with its map sees %v, want only pid 7 with its 1024 MiB (+ context)", got)
	}
	if err := os.WriteFile(hostpids.Path(s1, id1), []byte(strconv.Itoa(apid)+" 7\n"+strconv.Itoa(bpid)+" x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := smiProcs(t, e1, false); len(got) != 0 {
		t.Errorf("with a malformed map container 1 sees %v, want nobody", got)
	}
}

// A process stopped while it holds the busy spans' lock word (the one lock
// left in the region, taken around each measurement's placement) blocks
// nobody: another process of the container launches and is measured through
// a whole window, stealing the lock; resumed, the stopped one finishes too.
func TestStoppedSpansHolderBlocksNobody(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newContainer(t, root, 50)
	stopper := &container{shared: c.shared, vars: append(append([]string{}, c.vars...), "VGPU_TEST_STOP=spans")}
	r1 := stopper.start(t, "kernel")
	measure(t, 0, 3*time.Second, r1)
	deadline := time.Now().Add(60 * time.Second)
	for !processStopped(t, r1.cmd.Process.Pid) {
		if time.Now().After(deadline) {
			r1.cmd.Process.Kill()
			t.Fatalf("the first process never stopped itself in its measurements\nstderr: %s", r1.errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, before := regionCompute(t, c.shared, 0)
	r2 := c.start(t, "kernel")
	measure(t, 0, 1500*time.Millisecond, r2)
	// a guard against a hang, not a bound: a loaded machine stretches it
	watchdog := time.AfterFunc(120*time.Second, func() { r2.cmd.Process.Kill() })
	res := r2.wait(t)
	watchdog.Stop()
	if !processStopped(t, r1.cmd.Process.Pid) {
		t.Fatalf("the first process ran meanwhile: the test did not test a stopped holder")
	}
	_, after := regionCompute(t, c.shared, 0)
	if res.u(t, "counted") == 0 || after <= before {
		t.Errorf("with the spans' holder stopped: %d launches counted, measured launches %d -> %d", res.u(t, "counted"), before, after)
	}
	if err := r1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r1.wait(t)
}

// A container started by an older release keeps that release's region. A
// newer library in it (the host upgraded vgpu while the container ran) would
// share counters whose rules differ (0.1.0 took a mutex in the region, which
// this library never takes, and knows no queue end): it refuses the GPU with
// one line naming both layout versions, and leaves the region as it was.
func TestOlderReleasesRegionFailsClosed(t *testing.T) {
	for _, fx := range []struct {
		dir, id string
		layout  uint32
	}{{"release-0.1.0", "old-release", 2}, {"release-7429073", "prev-release", 3}} {
		t.Run(fx.dir, func(t *testing.T) { olderRegionFailsClosed(t, fx.dir, fx.id, fx.layout) })
	}
}

func olderRegionFailsClosed(t *testing.T, fixture, id string, layout uint32) {
	dir := clients(t)
	e := newEnv(t, []uint64{GiB})
	release := statetest.PreviousRelease(t, "../../internal/state/testdata/"+fixture)
	old, err := os.ReadFile(filepath.Join(release, id, "shared", contract.RegionFile))
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := contract.DecodeRegionHeader(old); h.Version != layout {
		t.Fatalf("the %s region has layout version %d, want %d", fixture, h.Version, layout)
	}
	path := filepath.Join(e.sharedDir(), contract.RegionFile)
	if err := os.WriteFile(path, old, 0o666); err != nil {
		t.Fatal(err)
	}
	stderr := runFailing(t, e, filepath.Join(dir, "client-link"), "info")
	lines := vgpuLines(stderr)
	want := fmt.Sprintf("layout version %d, this library knows %d", layout, contract.RegionVersion)
	if len(lines) != 1 || !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "refusing GPU access") {
		t.Fatalf("want one vgpu: line with %q, refusing GPU access; stderr:\n%s", want, stderr)
	}
	if now, err := os.ReadFile(path); err != nil || !bytes.Equal(now, old) {
		t.Errorf("the older region was changed (err %v)", err)
	}
}
