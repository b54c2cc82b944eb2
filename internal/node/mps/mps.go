// Package mps runs and supervises NVIDIA's MPS control daemon for each
// spatial GPU of the host (config spatial.gpus, docs/spatial.md): one
// `nvidia-cuda-mps-control -f` per GPU, with CUDA_VISIBLE_DEVICES=<uuid>
// and its pipe and log directories under <state_dir>/.mps/<uuid>/, in a
// mount namespace of its own whose /dev/shm is <state_dir>/.mps/<uuid>/shm
// (where MPS clients and their server meet; the GPU's containers get the
// same directory as their /dev/shm). A daemon that exits is started again
// after a backoff; at shutdown it is asked to quit (`echo quit |
// nvidia-cuda-mps-control`). The control program's stdin commands
// (get_server_list, get_client_list, set_active_thread_percentage …) are
// how vgpu node asks which processes are clients and holds each server's
// share.
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/mpsdir"
)

// Find returns the MPS control program: spatial.mps_control when it is a
// path, else the first file of that name in driver.bin_dirs under
// driver.root, else on PATH.
func Find(cfg *config.Config) (string, error) {
	name := cfg.Spatial.MPSControl
	if filepath.IsAbs(name) {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("spatial.mps_control: %w", err)
		}
		return name, nil
	}
	for _, d := range cfg.Driver.BinDirs {
		p := filepath.Join(cfg.DriverPath(d), name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("spatial.gpus names GPUs but %s is neither in driver.bin_dirs %v under %s nor on PATH; install NVIDIA's MPS (it comes with the driver) or set spatial.mps_control to its path", name, cfg.Driver.BinDirs, cfg.Driver.Root)
	}
	return p, nil
}

// ShmExecEnv marks vgpu-node's re-execution as the starter of a control
// daemon (ExecInShm); its value is the shm directory.
const ShmExecEnv = "VGPU_MPS_SHM"

// ExecInShm is the start of vgpu-node when ShmExecEnv is set: in a mount
// namespace of its own, /dev/shm becomes the GPU's shm directory, then it
// execs args (the control program). It returns only on error.
func ExecInShm(args []string) error {
	shm := os.Getenv(ShmExecEnv)
	_ = os.Unsetenv(ShmExecEnv) // not the daemon's
	if len(args) == 0 {
		return errors.New("mps: nothing to run")
	}
	runtime.LockOSThread() // unshare(2) and execve(2) from the same thread
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave mount: %w", err)
	}
	if err := os.MkdirAll("/dev/shm", 0o1777); err != nil {
		return err
	}
	if err := unix.Mount(shm, "/dev/shm", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on /dev/shm: %w", shm, err)
	}
	return unix.Exec(args[0], args, os.Environ())
}

// Options of a Supervisor.
type Options struct {
	UUID   string // the GPU
	Binary string // the control program (Find)
	Dirs   mpsdir.Dirs
	// Starter, when set, is the program that runs Binary in the shm
	// namespace (vgpu-node itself, ExecInShm); "": Binary is run directly
	// and keeps the host's /dev/shm (tests that are not root).
	Starter string
	// Event reports starts and exits (the daemon's event log); nil: none.
	Event func(kind, detail string)
	// Backoff: the wait before a restart (nextBackoff): MinBackoff after a
	// daemon that quit (status 0), else doubled after each exit up to
	// MaxBackoff, back to MinBackoff after a daemon that ran MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// QuitWait: how long quit has to end the daemon before SIGKILL.
	QuitWait time.Duration
}

// State is what vgpu status shows of one daemon.
type State struct {
	GPU      string    `json:"gpu"`
	State    string    `json:"state"` // starting, running, restarting, stopped, failed
	PID      int       `json:"pid,omitempty"`
	Restarts int       `json:"restarts"`
	Since    time.Time `json:"since"`
	LastExit string    `json:"lastExit,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// The states.
const (
	Starting   = "starting"
	Running    = "running"
	Restarting = "restarting"
	Stopped    = "stopped"
)

// DefaultMaxBackoff: a few seconds. The spatial GPU's tenants lose their
// MPS work while the daemon is down, and a longer wait gains nothing
// against a daemon that keeps failing: each start costs one process.
const DefaultMaxBackoff = 5 * time.Second

// nextBackoff is the wait before the next start, after a daemon that ran
// for ran and exited (clean: with status 0) when the wait before its start
// was prev (0: none yet). A daemon exits with status 0 only when told to
// quit, and the node tells it so only when it stops it: a clean exit is a
// quit someone else sent (a tenant that is root reaches the control
// socket), which must not buy that sender a daemon down for longer: the
// daemon is back after MinBackoff, however often it is told. Other exits
// (a crash, a kill) double the wait up to MaxBackoff.
func (o Options) nextBackoff(prev, ran time.Duration, clean bool) time.Duration {
	if prev <= 0 || clean || ran >= o.MaxBackoff {
		return o.MinBackoff
	}
	return min(prev*2, o.MaxBackoff)
}

// Supervisor runs one GPU's control daemon.
type Supervisor struct {
	o  Options
	mu sync.Mutex
	st State
}

// New returns a supervisor; Run starts it.
func New(o Options) *Supervisor {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 500 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.QuitWait <= 0 {
		o.QuitWait = 5 * time.Second
	}
	return &Supervisor{o: o, st: State{GPU: o.UUID, State: Starting, Since: time.Now()}}
}

// State returns the daemon's state now.
func (s *Supervisor) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *Supervisor) set(f func(*State)) {
	s.mu.Lock()
	f(&s.st)
	s.mu.Unlock()
}

func (s *Supervisor) event(kind, format string, a ...any) {
	if s.o.Event != nil {
		s.o.Event(kind, fmt.Sprintf(format, a...))
	}
}

// env is the daemon's and its commands' environment.
func (s *Supervisor) env() []string {
	env := []string{"CUDA_VISIBLE_DEVICES=" + s.o.UUID, "CUDA_MPS_PIPE_DIRECTORY=" + s.o.Dirs.Pipe, "CUDA_MPS_LOG_DIRECTORY=" + s.o.Dirs.Log,
		// the control daemon starts nvidia-cuda-mps-server, found next to it
		"PATH=" + filepath.Dir(s.o.Binary) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	return env
}

func (s *Supervisor) command() *exec.Cmd {
	var cmd *exec.Cmd
	if s.o.Starter != "" {
		cmd = exec.Command(s.o.Starter, s.o.Binary, "-f")
		cmd.Env = append(s.env(), ShmExecEnv+"="+s.o.Dirs.Shm)
	} else {
		cmd = exec.Command(s.o.Binary, "-f")
		cmd.Env = s.env()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if f, err := os.OpenFile(filepath.Join(s.o.Dirs.Log, "vgpu-node.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
		cmd.Stdout, cmd.Stderr = f, f // closed by the caller after Wait
	}
	return cmd
}

// Run keeps the daemon running until ctx ends, then asks it to quit.
func (s *Supervisor) Run(ctx context.Context) {
	var backoff time.Duration
	for {
		if err := s.o.Dirs.Prepare(); err != nil {
			backoff = s.o.nextBackoff(backoff, 0, false)
			s.set(func(st *State) { st.State, st.Error = Restarting, err.Error() })
		} else {
			s.runOnce(ctx, &backoff)
		}
		if ctx.Err() != nil {
			s.set(func(st *State) { st.State, st.PID, st.Since = Stopped, 0, time.Now() })
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			s.set(func(st *State) { st.State, st.PID, st.Since = Stopped, 0, time.Now() })
			return
		case <-t.C:
		}
	}
}

func (s *Supervisor) runOnce(ctx context.Context, backoff *time.Duration) {
	cmd := s.command()
	defer func() {
		if f, ok := cmd.Stdout.(*os.File); ok {
			f.Close()
		}
	}()
	// A daemon of ours left over from a killed vgpu node still holds the
	// pipe directory: ask it to quit first.
	if pid, ok := s.o.Dirs.Live(); ok {
		_, _ = s.Command(context.Background(), "quit")
		for i := 0; i < 50 && unix.Kill(pid, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	os.Remove(filepath.Join(s.o.Dirs.Pipe, mpsdir.PIDFile))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		*backoff = s.o.nextBackoff(*backoff, 0, false)
		s.set(func(st *State) { st.State, st.Error, st.Since = Restarting, err.Error(), time.Now() })
		s.event("mps-exit", "GPU %s: starting %s: %v", s.o.UUID, s.o.Binary, err)
		return
	}
	pid := cmd.Process.Pid
	s.set(func(st *State) { st.State, st.PID, st.Error, st.Since = Running, pid, "", start })
	s.event("mps-start", "GPU %s: MPS control daemon pid %d (%s)", s.o.UUID, pid, s.o.Binary)
	var exit error
	done := make(chan struct{})
	go func() { exit = cmd.Wait(); close(done) }()
	select {
	case <-done:
		err := exit
		why := "exited"
		if err != nil {
			why = err.Error()
		}
		*backoff = s.o.nextBackoff(*backoff, time.Since(start), err == nil)
		s.set(func(st *State) {
			st.State, st.PID, st.Restarts, st.LastExit, st.Since = Restarting, 0, st.Restarts+1, why, time.Now()
		})
		s.event("mps-exit", "GPU %s: MPS control daemon pid %d %s after %v; restarting in %v (its clients lost their server: their CUDA calls fail until they start again)", s.o.UUID, pid, why, time.Since(start).Round(time.Millisecond), *backoff)
	case <-ctx.Done():
		s.stop(cmd, pid, done)
	}
}

// stop asks the daemon to quit, then kills it after QuitWait.
func (s *Supervisor) stop(cmd *exec.Cmd, pid int, done chan struct{}) {
	qctx, cancel := context.WithTimeout(context.Background(), s.o.QuitWait)
	defer cancel()
	_, qerr := s.Command(qctx, "quit")
	select {
	case <-done:
	case <-qctx.Done():
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
		if qerr == nil {
			qerr = errors.New("did not quit in time: killed")
		}
	}
	detail := "quit"
	if qerr != nil {
		detail = qerr.Error()
	}
	s.event("mps-stop", "GPU %s: MPS control daemon pid %d stopped (%s)", s.o.UUID, pid, detail)
}

// Command sends one command line to the daemon as `echo LINE |
// nvidia-cuda-mps-control` does and returns its answer.
func (s *Supervisor) Command(ctx context.Context, line string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, s.o.Binary)
	cmd.Env = s.env()
	cmd.Stdin = strings.NewReader(line + "\n")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %v %s", line, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// PIDs parses an answer that lists pids, one per line.
func PIDs(out string) ([]int, error) {
	var pids []int
	for _, f := range strings.Fields(out) {
		p, err := strconv.Atoi(f)
		if err != nil || p <= 0 {
			return nil, fmt.Errorf("not a pid list: %q", out)
		}
		pids = append(pids, p)
	}
	return pids, nil
}

// Clients returns the servers' pids and the pids of their clients.
func (s *Supervisor) Clients(ctx context.Context) (servers []int, clients map[int]bool, err error) {
	out, err := s.Command(ctx, "get_server_list")
	if err != nil {
		return nil, nil, err
	}
	if servers, err = PIDs(out); err != nil {
		return nil, nil, err
	}
	clients = map[int]bool{}
	for _, sp := range servers {
		out, err := s.Command(ctx, "get_client_list "+strconv.Itoa(sp))
		if err != nil {
			return nil, nil, err
		}
		cs, err := PIDs(out)
		if err != nil {
			return nil, nil, err
		}
		for _, c := range cs {
			clients[c] = true
		}
	}
	return servers, clients, nil
}

// Cap holds every server of the daemon, and those it starts next, to pct
// percent of the GPU's threads: a client's own
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE can only lower it.
func (s *Supervisor) Cap(ctx context.Context, servers []int, pct int) error {
	if _, err := s.Command(ctx, fmt.Sprintf("set_default_active_thread_percentage %d", pct)); err != nil {
		return err
	}
	for _, sp := range servers {
		if _, err := s.Command(ctx, fmt.Sprintf("set_active_thread_percentage %d %d", sp, pct)); err != nil {
			return err
		}
	}
	return nil
}
