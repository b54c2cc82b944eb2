// Command nvidia-cuda-mps-control (simulated) stands in for NVIDIA's MPS
// control program in the simulated driver root (test/simgpu/README.md,
// "MPS"). It follows the real one's interface: -d (daemon in the
// background) and -f (foreground) run the control daemon, which serves
// $CUDA_MPS_PIPE_DIRECTORY/control, writes its pid to
// nvidia-cuda-mps-control.pid there and logs to
// $CUDA_MPS_LOG_DIRECTORY/control.log; with no argument it is the client
// that sends each line of stdin to the daemon and prints the answers
// (`echo get_server_list | nvidia-cuda-mps-control`). An MPS server is a
// child process per user id, started for a client of that user (or by
// start_server -uid); a client of another user waits until the running
// server's clients are gone, as the real daemon does.
//
// The endpoint (the simulated libcuda's side of it): a Unix stream socket
// <pipe>/control, one request line per connection. A command line gets its
// answer and the connection is closed. The line "client <priority>" (0
// normal, 1 below normal: the client's CUDA_MPS_CLIENT_PRIORITY as its
// driver read it; "client" alone is normal) makes the
// connection an MPS client for as long as it stays open: the daemon takes
// the peer's pid and uid from SO_PEERCRED, finds or starts the server of
// that uid, and answers "server <pid> <active thread percentage>\n"; EOF
// on it later means the server is gone. The control log records each
// client's priority: "Client <pid> connected to server <pid> with priority
// <n>".
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	socketName = "control"
	pidName    = "nvidia-cuda-mps-control.pid"
	serverMode = "SIMMPS_SERVER" // re-executed as a server process
	childMode  = "SIMMPS_DAEMON" // re-executed by -d as the daemon
)

func pipeDir() string {
	if d := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"); d != "" {
		return d
	}
	return "/tmp/nvidia-mps"
}

func logDir() string {
	if d := os.Getenv("CUDA_MPS_LOG_DIRECTORY"); d != "" {
		return d
	}
	return "/var/log/nvidia-mps"
}

func main() {
	if os.Getenv(serverMode) != "" {
		// a server: lives until killed (the daemon's quit, or a test);
		// waiting on a signal, not on nothing (Go ends a program whose
		// goroutines all block forever)
		signal.Ignore(syscall.SIGHUP)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		// A server never outlives its control daemon: a test that kills
		// the daemon outright must not leave servers holding the files
		// (a lock, go test's output pipe) they inherited.
		daemon := os.Getppid()
		tick := time.NewTicker(100 * time.Millisecond)
		for {
			select {
			case <-sig:
				os.Exit(0)
			case <-tick.C:
				if os.Getppid() != daemon {
					os.Exit(0)
				}
			}
		}
	}
	args := os.Args[1:]
	switch {
	case len(args) == 1 && args[0] == "-d":
		if os.Getenv(childMode) != "" {
			os.Exit(daemon())
		}
		os.Exit(background())
	case len(args) == 1 && args[0] == "-f":
		os.Exit(daemon())
	case len(args) == 0:
		os.Exit(client(os.Stdin, os.Stdout))
	default:
		fmt.Fprintln(os.Stderr, "usage: nvidia-cuda-mps-control [-d | -f]")
		os.Exit(1)
	}
}

// background starts the daemon detached and returns once it serves.
func background() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command(self, "-d")
	cmd.Env = append(os.Environ(), childMode+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("unix", filepath.Join(pipeDir(), socketName)); err == nil {
			c.Close()
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "An instance of this daemon did not start")
	return 1
}

// client sends each line of in as one request and prints the answers.
func client(in io.Reader, out io.Writer) int {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		c, err := net.Dial("unix", filepath.Join(pipeDir(), socketName))
		if err != nil {
			fmt.Fprintln(os.Stderr, "Cannot find MPS control daemon process")
			return 1
		}
		fmt.Fprintln(c, line)
		if err := c.(*net.UnixConn).CloseWrite(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// What arrived is the answer: a daemon that quits as it answers
		// ends it, as the real one does.
		_, _ = io.Copy(out, c)
		c.Close()
	}
	return 0
}

type server struct {
	pid     int
	uid     uint32
	pct     int
	cmd     *exec.Cmd
	clients map[int]net.Conn
	gone    chan struct{}
}

type state struct {
	mu         sync.Mutex
	cond       *sync.Cond
	servers    map[int]*server
	defaultPct int
	log        *os.File
	self       string
	quit       chan struct{}
}

func (s *state) logf(format string, a ...any) {
	fmt.Fprintf(s.log, "[%s Control %d] %s\n", time.Now().Format("2006-01-02 15:04:05.000"), os.Getpid(), fmt.Sprintf(format, a...))
}

func daemon() int {
	pipe := pipeDir()
	if err := os.MkdirAll(pipe, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.MkdirAll(logDir(), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lf, err := os.OpenFile(filepath.Join(logDir(), "control.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sock := filepath.Join(pipe, socketName)
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		fmt.Fprintln(os.Stderr, "An instance of this daemon is already running")
		return 1
	}
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Chmod(sock, 0o666); err != nil { // clients of any user connect
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	self, _ := os.Executable()
	s := &state{servers: map[int]*server{}, defaultPct: 100, log: lf, self: self, quit: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	if err := os.WriteFile(filepath.Join(pipe, pidName), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.logf("Starting control daemon using socket %s", sock)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		select {
		case <-sig:
		case <-s.quit:
		}
		l.Close()
	}()
	// A daemon whose socket is gone (a test's temporary pipe directory
	// removed without a quit: a test that failed or timed out) exits with
	// its servers instead of outliving the test with the files it
	// inherited (the real daemon would stay: a stand-in must not).
	go func() {
		for range time.Tick(200 * time.Millisecond) {
			if _, err := os.Stat(sock); err != nil {
				s.logf("Socket %s is gone: exiting", sock)
				s.command("quit")
				return
			}
		}
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			break
		}
		go s.serve(c.(*net.UnixConn))
	}
	s.mu.Lock()
	for _, sv := range s.servers {
		sv.cmd.Process.Kill()
	}
	s.mu.Unlock()
	os.Remove(filepath.Join(pipe, pidName))
	os.Remove(sock)
	s.logf("Shutting down control daemon")
	return 0
}

func peer(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

func (s *state) serve(c *net.UnixConn) {
	line, err := bufio.NewReader(c).ReadString('\n')
	line = strings.TrimSpace(line)
	if err != nil && line == "" {
		c.Close()
		return
	}
	cred, err := peer(c)
	if err != nil {
		c.Close()
		return
	}
	if prio, ok := strings.CutPrefix(line, "client"); ok && (prio == "" || prio == " 0" || prio == " 1") {
		s.client(c, cred, strings.TrimSpace(prio) == "1") // keeps c
		return
	}
	defer c.Close()
	// administration: root or the daemon's own user only
	if cred.Uid != 0 && int(cred.Uid) != os.Getuid() {
		s.logf("User %d refused command %q", cred.Uid, line)
		fmt.Fprintln(c, "Permission denied")
		return
	}
	s.logf("Accepting connection... User did send %s", line)
	fmt.Fprint(c, s.command(line))
}

func pct(v string) (int, bool) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 100 {
		return 0, false
	}
	return int(f + 0.5), true
}

// command runs one administrative command and returns its answer.
func (s *state) command(line string) string {
	f := strings.Fields(line)
	s.mu.Lock()
	defer s.mu.Unlock()
	server := func(v string) *server {
		p, err := strconv.Atoi(v)
		if err != nil {
			return nil
		}
		return s.servers[p]
	}
	switch {
	case len(f) == 1 && f[0] == "get_server_list":
		var b strings.Builder
		for _, p := range s.sortedServers() {
			fmt.Fprintf(&b, "%d\n", p)
		}
		return b.String()
	case len(f) == 2 && f[0] == "get_client_list":
		sv := server(f[1])
		if sv == nil {
			return ""
		}
		var pids []int
		for p := range sv.clients {
			pids = append(pids, p)
		}
		sort.Ints(pids)
		var b strings.Builder
		for _, p := range pids {
			fmt.Fprintf(&b, "%d\n", p)
		}
		return b.String()
	case len(f) == 3 && f[0] == "start_server" && f[1] == "-uid":
		uid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return "Invalid uid\n"
		}
		for _, sv := range s.servers {
			if sv.uid == uint32(uid) {
				return ""
			}
		}
		if len(s.servers) > 0 {
			return "A server of another user is running\n"
		}
		if _, err := s.start(uint32(uid)); err != nil {
			return err.Error() + "\n"
		}
		return ""
	case len(f) == 2 && f[0] == "set_default_active_thread_percentage":
		p, ok := pct(f[1])
		if !ok {
			return "Invalid percentage\n"
		}
		s.defaultPct = p
		return ""
	case len(f) == 1 && f[0] == "get_default_active_thread_percentage":
		return fmt.Sprintf("%.1f\n", float64(s.defaultPct))
	case len(f) == 3 && f[0] == "set_active_thread_percentage":
		sv := server(f[1])
		p, ok := pct(f[2])
		if sv == nil || !ok {
			return "Invalid server or percentage\n"
		}
		sv.pct = p
		return ""
	case len(f) == 2 && f[0] == "get_active_thread_percentage":
		sv := server(f[1])
		if sv == nil {
			return "Invalid server\n"
		}
		return fmt.Sprintf("%.1f\n", float64(sv.pct))
	case len(f) == 1 && f[0] == "quit":
		select {
		case <-s.quit:
		default:
			close(s.quit)
		}
		return ""
	}
	return "Unknown command\n"
}

func (s *state) sortedServers() []int {
	var pids []int
	for p := range s.servers {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	return pids
}

// start starts a server of uid (s.mu held).
func (s *state) start(uid uint32) (*server, error) {
	cmd := exec.Command(s.self)
	cmd.Args[0] = "nvidia-cuda-mps-server"
	cmd.Env = append(os.Environ(), serverMode+"=1")
	if os.Getuid() == 0 && uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a server for user %d: %w", uid, err)
	}
	sv := &server{pid: cmd.Process.Pid, uid: uid, pct: s.defaultPct, cmd: cmd, clients: map[int]net.Conn{}, gone: make(chan struct{})}
	s.servers[sv.pid] = sv
	s.logf("Starting new server %d for user %d", sv.pid, uid)
	go func() {
		cmd.Wait()
		s.mu.Lock()
		delete(s.servers, sv.pid)
		for _, c := range sv.clients {
			c.Close() // its clients lose their server
		}
		close(sv.gone)
		s.cond.Broadcast()
		s.mu.Unlock()
		s.logf("Server %d exited", sv.pid)
	}()
	return sv, nil
}

// client makes c a client of the server of its user, starting or waiting
// for one, for as long as c stays open.
func (s *state) client(c *net.UnixConn, cred *unix.Ucred, belowNormal bool) {
	s.mu.Lock()
	var sv *server
	for sv == nil {
		for _, x := range s.servers {
			if x.uid == cred.Uid {
				sv = x
			}
		}
		if sv != nil {
			break
		}
		other := false
		for _, x := range s.servers {
			other = true
			if len(x.clients) == 0 {
				x.cmd.Process.Kill() // another user's idle server makes way
			}
		}
		if !other {
			var err error
			if sv, err = s.start(cred.Uid); err != nil {
				s.mu.Unlock()
				fmt.Fprintln(c, err)
				c.Close()
				return
			}
			break
		}
		s.logf("User %d waits for the server of another user to finish", cred.Uid)
		s.cond.Wait()
	}
	sv.clients[int(cred.Pid)] = c
	fmt.Fprintf(c, "server %d %d\n", sv.pid, sv.pct)
	prio := 0
	if belowNormal {
		prio = 1
	}
	s.logf("Client %d connected to server %d with priority %d", cred.Pid, sv.pid, prio)
	s.mu.Unlock()
	_, _ = io.Copy(io.Discard, c) // until the client closes (or the server is gone): either ends it
	s.mu.Lock()
	if sv.clients[int(cred.Pid)] == c {
		delete(sv.clients, int(cred.Pid))
	}
	if len(sv.clients) == 0 {
		s.cond.Broadcast()
	}
	s.mu.Unlock()
	c.Close()
	s.logf("Client %d disconnected", cred.Pid)
}
