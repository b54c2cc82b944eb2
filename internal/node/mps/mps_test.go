package mps

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/mpsdir"
)

// simControl builds the simulated control program (test/simgpu/mpsd) once.
var simControl = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "simmps-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	out, err := exec.Command("go", "build", "-o", bin, "../../../test/simgpu/mpsd").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func testDirs(t *testing.T) mpsdir.Dirs {
	// a short root: the control socket's path must fit in sun_path
	root, err := os.MkdirTemp("/tmp", "mps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	cfg := config.Default()
	cfg.StateDir = root
	return mpsdir.Of(cfg, "GPU-1")
}

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(kind, detail string) {
	r.mu.Lock()
	r.events = append(r.events, kind+": "+detail)
	r.mu.Unlock()
}

func (r *recorder) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if strings.HasPrefix(e, kind+":") {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// mpsClient connects as the simulated libcuda does and returns the server's
// answer; the connection stays open (the client's life) until closed.
func mpsClient(t *testing.T, d mpsdir.Dirs) (net.Conn, string) {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(d.Pipe, "control"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(c, "client")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return c, strings.TrimSpace(line)
}

// The supervisor starts the daemon with its directories, answers through
// it which processes are clients, holds its servers to a share, restarts
// it after a kill (with an event) and stops it with quit.
func TestSupervisor(t *testing.T) {
	bin, err := simControl()
	if err != nil {
		t.Fatal(err)
	}
	d := testDirs(t)
	var rec recorder
	s := New(Options{UUID: "GPU-1", Binary: bin, Dirs: d, Event: rec.add, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	waitFor(t, "the daemon", func() bool { _, ok := d.Live(); return ok && s.State().State == Running })
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{d.Root, 0o700}, {d.Pipe, 0o755}, {d.Log, 0o700}, {d.Shm, 0o777 | os.ModeSticky}} {
		if fi, err := os.Stat(p.path); err != nil || fi.Mode().Perm()|fi.Mode()&os.ModeSticky != p.mode {
			t.Errorf("%s: %v %v, want mode %v", p.path, fi.Mode(), err, p.mode)
		}
	}
	// the daemon writes its log after it is up: wait for the line
	waitFor(t, "control.log saying \"Starting control daemon\"", func() bool {
		b, err := os.ReadFile(filepath.Join(d.Log, "control.log"))
		return err == nil && strings.Contains(string(b), "Starting control daemon")
	})
	servers, clients, err := s.Clients(ctx)
	if err != nil || len(servers) != 0 || len(clients) != 0 {
		t.Fatalf("no client yet: %v %v %v", servers, clients, err)
	}
	if err := s.Cap(ctx, nil, 40); err != nil {
		t.Fatal(err)
	}
	c, answer := mpsClient(t, d)
	var spid, spct int
	if _, err := fmt.Sscanf(answer, "server %d %d", &spid, &spct); err != nil || spct != 40 {
		t.Fatalf("client answer %q: want a server held to 40%% (the default set before it started)", answer)
	}
	servers, clients, err = s.Clients(ctx)
	if err != nil || len(servers) != 1 || servers[0] != spid || !clients[os.Getpid()] {
		t.Fatalf("servers %v clients %v err %v: want server %d with this process (pid %d) as client", servers, clients, err, spid, os.Getpid())
	}
	if err := s.Cap(ctx, servers, 30); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Command(ctx, fmt.Sprintf("get_active_thread_percentage %d", spid)); err != nil || out != "30.0\n" {
		t.Errorf("get_active_thread_percentage: %q %v", out, err)
	}
	c.Close()
	waitFor(t, "the client to leave", func() bool { _, cl, err := s.Clients(ctx); return err == nil && len(cl) == 0 })
	// an idle server stays, as the real daemon's does
	if servers, _, err := s.Clients(ctx); err != nil || len(servers) != 1 || servers[0] != spid {
		t.Errorf("after the client left: servers %v %v, want [%d]", servers, err, spid)
	}

	// A dead daemon is started again, and told in an event.
	pid := s.State().PID
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "the restart", func() bool { st := s.State(); return st.State == Running && st.PID != pid && st.Restarts == 1 })
	if rec.count("mps-exit") != 1 || rec.count("mps-start") != 2 {
		t.Errorf("events %q", rec.events)
	}
	// Running means started: on a loaded machine its control pipe may
	// take a moment to answer.
	waitFor(t, "the restarted daemon to answer", func() bool { _, _, err := s.Clients(ctx); return err == nil })
	cancel()
	<-done
	if _, ok := d.Live(); ok || s.State().State != Stopped || rec.count("mps-stop") != 1 {
		t.Errorf("after stop: live, state %+v, events %q", s.State(), rec.events)
	}
	if _, err := os.Stat(filepath.Join(d.Pipe, "control")); !os.IsNotExist(err) {
		t.Errorf("control socket left after quit: %v", err)
	}
}

// The simulated daemon: -d returns once it serves; a command of a user that
// is not root nor the daemon's is refused; quit ends it.
func TestSimulatedDaemonBackground(t *testing.T) {
	bin, err := simControl()
	if err != nil {
		t.Fatal(err)
	}
	d := testDirs(t)
	if err := d.Prepare(); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+d.Pipe, "CUDA_MPS_LOG_DIRECTORY="+d.Log)
	cmd := exec.Command(bin, "-d")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("-d: %v %s", err, out)
	}
	pid, ok := d.Live()
	if !ok {
		t.Fatal("no live daemon after -d")
	}
	run := func(in string) string {
		cmd := exec.Command(bin)
		cmd.Env, cmd.Stdin = env, strings.NewReader(in)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v %s", in, err, out)
		}
		return string(out)
	}
	if out := run("get_default_active_thread_percentage\nset_default_active_thread_percentage 25\nget_default_active_thread_percentage\nbogus\n"); out != "100.0\n25.0\nUnknown command\n" {
		t.Errorf("answers %q", out)
	}
	run("quit\n")
	waitFor(t, "quit", func() bool { return syscall.Kill(pid, 0) != nil })
	cmd = exec.Command(bin)
	cmd.Env, cmd.Stdin = env, strings.NewReader("get_server_list\n")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Cannot find MPS control daemon") {
		t.Errorf("after quit: %q %v", out, err)
	}
}

func TestFind(t *testing.T) {
	root := t.TempDir()
	cfg := config.Default()
	cfg.Driver.Root = root
	cfg.Spatial.MPSControl = "mps-control-test-absent"
	t.Setenv("PATH", t.TempDir())
	if _, err := Find(cfg); err == nil || !strings.Contains(err.Error(), "spatial.mps_control") {
		t.Errorf("absent: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr/local/nvidia/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "usr/local/nvidia/bin", "mps-control-test-absent")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Find(cfg); err != nil || got != p {
		t.Errorf("in a bin dir: %q %v", got, err)
	}
	cfg.Spatial.MPSControl = filepath.Join(root, "nope")
	if _, err := Find(cfg); err == nil || !strings.Contains(err.Error(), "spatial.mps_control") {
		t.Errorf("absolute, absent: %v", err)
	}
}

func TestPIDs(t *testing.T) {
	if p, err := PIDs("12\n34\n"); err != nil || len(p) != 2 || p[1] != 34 {
		t.Error(p, err)
	}
	if _, err := PIDs("Unknown command\n"); err == nil {
		t.Error("accepted text")
	}
}

// The control daemon's answers are outside input: PIDs takes only pid lists.
func FuzzPIDs(f *testing.F) {
	for _, s := range []string{"", "12\n34\n", "Unknown command\n", "0\n", "-1", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pids, err := PIDs(s)
		if err != nil {
			return
		}
		for _, p := range pids {
			if p <= 0 {
				t.Fatalf("%q: pid %d", s, p)
			}
		}
	})
}

// The wait before a restart: a daemon that quit (status 0: a quit the node
// did not send, the node sends one only when it stops it) is back after
// MinBackoff however often it quits; a crashing one waits twice as long
// each time up to MaxBackoff, a few seconds by default, and MinBackoff again
// after one that ran MaxBackoff.
func TestNextBackoff(t *testing.T) {
	o := New(Options{}).o
	if o.MinBackoff != 500*time.Millisecond || o.MaxBackoff != DefaultMaxBackoff || DefaultMaxBackoff > 5*time.Second {
		t.Fatalf("defaults: %v .. %v", o.MinBackoff, o.MaxBackoff)
	}
	wait := time.Duration(0)
	for i := 0; i < 20; i++ { // a quit loop: the daemon quits 10 ms after each start
		if wait = o.nextBackoff(wait, 10*time.Millisecond, true); wait != o.MinBackoff {
			t.Fatalf("quit %d: wait %v, want %v", i, wait, o.MinBackoff)
		}
	}
	var crash []time.Duration
	for i := 0; i < 6; i++ {
		wait = o.nextBackoff(wait, 10*time.Millisecond, false)
		crash = append(crash, wait)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	if fmt.Sprint(crash) != fmt.Sprint(want) {
		t.Errorf("crash loop after the quits: waits %v, want %v", crash, want)
	}
	if w := o.nextBackoff(5*time.Second, o.MaxBackoff-time.Millisecond, false); w != o.MaxBackoff {
		t.Errorf("a crash after %v: wait %v, want %v", o.MaxBackoff-time.Millisecond, w, o.MaxBackoff)
	}
	if w := o.nextBackoff(5*time.Second, o.MaxBackoff, false); w != o.MinBackoff {
		t.Errorf("a crash after running %v: wait %v, want %v", o.MaxBackoff, w, o.MinBackoff)
	}
}

// A root tenant sending quit to the control socket in a loop (the
// simulated daemon takes quit from root, as the real one's privileged
// socket does): the supervisor starts it again after MinBackoff each time,
// not after a wait that grows with each quit.
func TestSupervisorQuitLoop(t *testing.T) {
	bin, err := simControl()
	if err != nil {
		t.Fatal(err)
	}
	d := testDirs(t)
	var rec recorder
	s := New(Options{UUID: "GPU-1", Binary: bin, Dirs: d, Event: rec.add, MinBackoff: 50 * time.Millisecond, MaxBackoff: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i := 1; i <= 6; i++ {
		waitFor(t, "the daemon", func() bool { _, ok := d.Live(); return ok && s.State().State == Running })
		pid := s.State().PID
		if _, err := s.Command(ctx, "quit"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the quit", func() bool { st := s.State(); return st.Restarts == i && st.PID != pid })
		// The exit's event follows the state it reports: wait for it too.
		waitFor(t, "the exit's event", func() bool { return len(rec.exits()) == i })
	}
	for _, e := range rec.exits() {
		if !strings.Contains(e, "restarting in 50ms") {
			t.Errorf("after a quit: %q, want a restart in 50ms", e)
		}
	}
	if n := len(rec.exits()); n != 6 {
		t.Errorf("%d exits, want 6: %q", n, rec.exits())
	}
}

// exits returns the mps-exit events recorded so far.
func (r *recorder) exits() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if strings.HasPrefix(e, "mps-exit:") {
			out = append(out, e)
		}
	}
	return out
}
