// nodecost measures vgpu-node on the simulated GPU with real runc
// containers started through vgpu-runtime: the time from a tenant crossing
// its memory limit through the real driver (attack 2: the driver dlopened
// by its full path) to the daemon's kill, n times (median, p99), and the
// daemon's CPU time per container while it watches c honest containers,
// and, m times, the time from a compute bypass that freezing cannot hold
// (kernels of 3 s, running on while it is frozen) starting to its kill by
// the escalation, and from its first freeze to that kill.
// Needs root, runc, gcc. Not a test: `make bench`.
//
//	nodecost -build build [-n 20] [-containers 8] [-idle 10s] [-escalations 2]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

func main() {
	build := flag.String("build", "build", "the build directory (make build)")
	n := flag.Int("n", 20, "kills to time")
	conts := flag.Int("containers", 8, "honest containers the daemon watches for the CPU figure")
	idle := flag.Duration("idle", 10*time.Second, "how long the CPU is measured")
	esc := flag.Int("escalations", 2, "compute escalations to time (about 20 s each)")
	flag.Parse()
	if err := bench(*build, *n, *conts, *idle, *esc); err != nil {
		fmt.Fprintln(os.Stderr, "nodecost:", err)
		os.Exit(1)
	}
}

type env struct {
	dir, config, state, rootfs, runtime, nodeBin string
}

func setup(build string) (*env, error) {
	build, err := filepath.Abs(build)
	if err != nil {
		return nil, err
	}
	if err := os.Setenv("VGPU_BUILD", build); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "vgpu-nodecost-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, config: filepath.Join(dir, "config.toml"), state: filepath.Join(dir, "state"), rootfs: filepath.Join(dir, "rootfs"),
		runtime: filepath.Join(build, "bin", "vgpu-runtime"), nodeBin: filepath.Join(build, "bin", "vgpu-node")}
	sim, err := simroot.Create(filepath.Join(dir, "driver"), simroot.Options{Devices: []simroot.Device{{MemoryBytes: 64 << 30}}})
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf("state_dir = %q\n[driver]\nroot = %q\ndev_root = %q\nipc_paths = [\"run/simgpu\"]\n[library]\ndir = %q\n",
		e.state, sim.Dir(), sim.Dir(), filepath.Join(build, "lib"))
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	// a rootfs of glibc and the test tenant (test/e2e/attack/attack.c)
	for _, d := range []string{"lib64", "lib/x86_64-linux-gnu", "usr/bin", "usr/lib", "dev", "proc", "sys", "tmp", "run", "etc"} {
		if err := os.MkdirAll(filepath.Join(e.rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	cp := func(from, to string) error {
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(e.rootfs, to), b, 0o755)
	}
	if err := cp("/lib64/ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2"); err != nil {
		return nil, err
	}
	for _, l := range []string{"libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libm.so.6"} {
		if err := cp("/lib/x86_64-linux-gnu/"+l, "lib/x86_64-linux-gnu/"+l); err != nil {
			return nil, err
		}
	}
	if out, err := exec.Command("gcc", "-O2", "-o", filepath.Join(e.rootfs, "usr/bin/vgpu-attack"), "test/e2e/attack/attack.c", "-ldl").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gcc: %v\n%s", err, out)
	}
	return e, nil
}

func (e *env) bundle(id string, args []string, envs ...string) (string, error) {
	dir := filepath.Join(e.dir, "bundle-"+id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("runc spec: %v\n%s", err, out)
	}
	p := filepath.Join(dir, "config.json")
	b, _ := os.ReadFile(p)
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		return "", err
	}
	s["root"] = map[string]any{"path": e.rootfs, "readonly": true}
	proc := s["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = args
	ev := []any{"PATH=/usr/bin"}
	for _, v := range envs {
		ev = append(ev, v)
	}
	proc["env"] = ev
	s["mounts"] = append(s["mounts"].([]any), map[string]any{"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": []any{"nosuid", "nodev", "mode=755"}})
	out, _ := json.Marshal(s)
	return dir, os.WriteFile(p, out, 0o644)
}

// tenant is one container running vgpu-attack in the foreground; its stdin
// keeps it holding.
type tenant struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func (e *env) start(id string, args []string, envs ...string) (*tenant, error) {
	b, err := e.bundle(id, args, envs...)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.runtime, "--root", filepath.Join(e.dir, "runc"), "run", "--bundle", b, id)
	cmd.Env = append(os.Environ(), "VGPU_CONFIG="+e.config)
	in, _ := cmd.StdinPipe()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The tenant's end shows as EOF on its output, which the reader checks.
	go func() { _ = cmd.Wait(); _ = pw.Close() }()
	return &tenant{cmd: cmd, stdin: in, out: bufio.NewReader(pr)}, nil
}

// waitLine reads the tenant's output until a line starting with prefix.
func (t *tenant) waitLine(prefix string) error {
	for {
		l, err := t.out.ReadString('\n')
		if strings.HasPrefix(l, prefix) {
			return nil
		}
		if strings.HasPrefix(l, "error=") {
			return fmt.Errorf("tenant: %s", strings.TrimSpace(l))
		}
		if err != nil {
			return fmt.Errorf("tenant ended before %q: %v", prefix, err)
		}
	}
}

func (e *env) node() (*exec.Cmd, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(e.nodeBin, "--state-dir", e.state, "--listen", addr)
	cmd.Env = append(os.Environ(), "VGPU_CONFIG="+e.config)
	lf, _ := os.Create(filepath.Join(e.dir, "node.log"))
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(filepath.Join(e.state, config.StateNode, events.HeartbeatFile)); err == nil {
			return cmd, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return cmd, fmt.Errorf("vgpu-node did not start (see %s)", lf.Name())
}

// cpuTicks is utime+stime of pid in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s, nil
}

func bench(build string, n, conts int, idle time.Duration, escs int) error {
	e, err := setup(build)
	if err != nil {
		return err
	}
	defer os.RemoveAll(e.dir)
	node, err := e.node()
	if node != nil {
		// Stopping the node is clean-up after the figures are taken.
		defer func() { _ = node.Process.Signal(syscall.SIGTERM); _ = node.Wait() }()
	}
	if err != nil {
		return err
	}
	cleanup := func(id string) {
		// Best effort: the runc root is removed with e.dir at the end.
		_ = exec.Command("runc", "--root", filepath.Join(e.dir, "runc"), "delete", "--force", id).Run()
	}

	// 1. CPU of the daemon watching honest containers, each holding memory
	var honest []*tenant
	for i := 0; i < conts; i++ {
		id := fmt.Sprintf("honest%d", i)
		t, err := e.start(id, []string{"/usr/bin/vgpu-attack", "honest", "512"}, "VGPU_MEMORY_LIMIT=1Gi", "VGPU_VISIBLE_DEVICES=0")
		if err != nil {
			return err
		}
		defer cleanup(id)
		if err := t.waitLine("held_mib="); err != nil {
			return err
		}
		honest = append(honest, t)
	}
	time.Sleep(time.Second)
	t0, err := cpuTicks(node.Process.Pid)
	if err != nil {
		return err
	}
	start := time.Now()
	time.Sleep(idle)
	t1, _ := cpuTicks(node.Process.Pid)
	wall := time.Since(start).Seconds()
	cpu := float64(t1-t0) / 100 / wall // USER_HZ is 100 on Linux
	fmt.Printf("daemon CPU with %d containers (%d GPU processes), sampling every 100 ms: %.2f %% of a core, %.3f %% per container\n",
		conts, conts, cpu*100, cpu*100/float64(conts))

	// 2. time from crossing the limit (the tenant reports it holds 2 GiB
	// under 1 GiB) to its death
	var lat []time.Duration
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("attack%d", i)
		t, err := e.start(id, []string{"/usr/bin/vgpu-attack", "driver", "2048"}, "VGPU_MEMORY_LIMIT=1Gi", "VGPU_VISIBLE_DEVICES=0")
		if err != nil {
			return err
		}
		if err := t.waitLine("held_mib="); err != nil {
			cleanup(id)
			return err
		}
		crossed := time.Now()
		done := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, t.out); close(done) }() // drains until the tenant ends
		select {
		case <-done:
			lat = append(lat, time.Since(crossed))
		case <-time.After(30 * time.Second):
			cleanup(id)
			return fmt.Errorf("%s not killed within 30 s (see %s)", id, filepath.Join(e.dir, "node.log"))
		}
		t.stdin.Close()
		cleanup(id)
	}
	for _, t := range honest {
		t.stdin.Close()
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1)+0.5)] }
	fmt.Printf("crossing the memory limit to the kill (grace 500 ms, n=%d): median %v, p99 %v, min %v, max %v\n",
		len(lat), p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), lat[0].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))

	// 3. a compute bypass freezing cannot hold: frozen once its window
	// fills, killed EscalateAfter (10 s) after the first freeze
	for i := 0; i < escs; i++ {
		id := fmt.Sprintf("long%d", i)
		t, err := e.start(id, []string{"/usr/bin/vgpu-attack", "compute", "0", "3000000"}, "VGPU_COMPUTE_LIMIT=25", "VGPU_VISIBLE_DEVICES=0")
		if err != nil {
			return err
		}
		if err := t.waitLine("computing="); err != nil {
			cleanup(id)
			return err
		}
		started := time.Now()
		done := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, t.out); close(done) }() // drains until the tenant ends
		select {
		case <-done:
		case <-time.After(120 * time.Second):
			cleanup(id)
			return fmt.Errorf("%s not killed within 120 s (see %s)", id, filepath.Join(e.dir, "node.log"))
		}
		died := time.Since(started)
		cleanup(id)
		evs, err := events.Read(e.state)
		if err != nil {
			return err
		}
		var froze, killed time.Time
		for _, ev := range evs {
			if ev.Container != id {
				continue
			}
			if ev.Kind == "freeze" && froze.IsZero() {
				froze = ev.Time
			}
			if ev.Kind == "kill" && ev.Reason == "compute" {
				killed = ev.Time
			}
		}
		if froze.IsZero() || killed.IsZero() {
			return fmt.Errorf("%s died without a freeze and a compute kill recorded (see %s)", id, filepath.Join(e.dir, "node.log"))
		}
		fmt.Printf("compute bypass freezing cannot hold (25 %% limit, window 10 s, escalation 10 s): start to death %v, first freeze to kill %v\n",
			died.Round(100*time.Millisecond), killed.Sub(froze).Round(10*time.Millisecond))
	}
	return nil
}
