//go:build e2e

package e2e

import (
	"bytes"
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

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/hostpids"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/status"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// vgpu node (docs/node.md) against real runc containers on the
// simulated GPU: tenants that take more device memory than their limit by
// routes the in-process library cannot close end killed; an honest
// container that fills its limit with several processes is left alone.
// No reaction time is asserted here (bench/nodecost measures it).

// addAttacker builds test/e2e/attack/attack.c into the shared rootfs as
// /usr/bin/vgpu-attack.
func addAttacker(t *testing.T, f *fixture) {
	t.Helper()
	buildIntoRootfs(t, f, "vgpu-attack", "attack/attack.c", "-ldl")
	// attack 3's loader: the image's own copy of ld.so, patched to read
	// another file than /etc/ld.so.preload (same length)
	skip := filepath.Join(f.rootfs, "lib64/ld-skip-preload.so.2")
	if _, err := os.Stat(skip); err != nil {
		b, err := os.ReadFile(filepath.Join(f.rootfs, "lib64/ld-linux-x86-64.so.2"))
		if err != nil {
			t.Fatal(err)
		}
		p := bytes.ReplaceAll(b, []byte("/etc/ld.so.preload"), []byte("/etc/ld.so.nopreld"))
		if bytes.Equal(p, b) {
			t.Fatal("ld.so holds no /etc/ld.so.preload to patch")
		}
		if err := os.WriteFile(skip, p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// startNode runs vgpu-node on the env's state directory until the test ends.
func startNode(t *testing.T, e *env) (metricsURL, logPath string) {
	t.Helper()
	metricsURL, logPath, _ = startNodeStoppable(t, e)
	return metricsURL, logPath
}

// startNodeStoppable is startNode that also returns stop: SIGTERM, and wait
// for vgpu-node to exit (10 s, then SIGKILL); the test's end calls it too.
func startNodeStoppable(t *testing.T, e *env) (metricsURL, logPath string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logPath = filepath.Join(e.dir, "node.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(vgpuNode(t), "--state-dir", e.stateDir, "--listen", addr)
	cmd.Env = append(os.Environ(), e.vars()...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			// an error here is a node that exited already: Wait returns at once
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(func() {
		stop()
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("vgpu node log:\n%s", b)
		}
	})
	if err := poll(30*time.Second, func() error {
		return holds(vgpuStatus(t, vgpuCLI(t), e.stateDir).HostEnforcement.On, "vgpu status does not show host enforcement on")
	}); err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("%v; vgpu node log:\n%s", err, b)
	}
	return "http://" + addr + "/metrics", logPath, stop
}

// waitRounds waits until vgpu node, serving metricsURL, has finished n
// rounds more than when called (vgpu_node_rounds_total), for checks that
// nothing happened: a loaded machine stretches rounds, so a wall-clock
// wait could see none. The round in progress at the call may have begun
// before what the caller waits past: n-1 whole rounds follow it. Rounds
// start at most one interval apart on average (a ticker's), so n rounds
// also last about n-1 intervals at least.
func waitRounds(t *testing.T, metricsURL string, n int) {
	t.Helper()
	rounds := func() float64 {
		v, ok := metricValue(scrape(t, metricsURL), "vgpu_node_rounds_total", nil)
		if !ok {
			t.Fatalf("%s has no vgpu_node_rounds_total", metricsURL)
		}
		return v
	}
	from := rounds()
	eventually(t, 5*time.Minute, fmt.Sprintf("%d rounds of vgpu node", n), func() error {
		now := rounds()
		return holds(now >= from+float64(n), "%.0f rounds since %.0f", now-from, from)
	})
}

func pidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// a zombie has died already (its parent has not reaped it)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func TestNodeKillsBypassesLeavesHonest(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	addAttacker(t, f)
	e := newEnv(t, "node")
	mkStateDir(t, e)
	cli := vgpuCLI(t)
	rt := e.runc(t)
	// without the daemon, status says enforcement is off
	text := statusText(cli, e.stateDir)
	if !strings.Contains(text, "host enforcement: off") {
		t.Errorf("status without vgpu node:\n%s", text)
	}
	url, _ := startNode(t, e)

	start := func(id string, limit uint64, sh string) {
		t.Helper()
		b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/sh", "-c", sh},
			[]string{fmt.Sprintf("VGPU_MEMORY_LIMIT=%d", limit), "VGPU_VISIBLE_DEVICES=0"}, nil)
		rt.createStart(b, id)
	}
	// honest: three processes that together fill 2 GiB (context included)
	// (the rootfs is read-only: no files to take turns by, a pause instead)
	const honestLimit = 2 << 30
	h := "sleep 3600 | cuda-fill hold 400"
	start("honest", honestLimit, h+" & sleep 1; "+h+" & sleep 1; "+h+" & wait")
	honestPIDs := func() []int {
		c := container(vgpuStatus(t, cli, e.stateDir), "honest")
		var pids []int
		var sum uint64
		for _, p := range c.Processes {
			if p.Memory[0] > 0 {
				pids = append(pids, p.HostPID)
				sum += p.Memory[0]
			}
		}
		if sum > honestLimit {
			t.Fatalf("honest container holds %d bytes by its library's count, over its limit", sum)
		}
		return pids
	}
	var before []int
	if err := pollAt(60*time.Second, 200*time.Millisecond, func() error {
		before = honestPIDs()
		return holds(len(before) >= 3, "%d GPU processes, want 3", len(before))
	}); err != nil {
		t.Fatalf("honest container: %v:\n%s", err, statusText(cli, e.stateDir))
	}
	// attack 1: zero the region's counters; attack 2: the real driver by its path
	start("attack1", 1<<30, "sleep 3600 | vgpu-attack region 4096")
	start("attack2", 1<<30, "sleep 3600 | vgpu-attack driver 4096")
	// attack 4: own user and mount namespace, /etc/ld.so.preload and
	// /run/vgpu hidden, then the real driver: still the container's cgroup
	// attack 3: the image's own loader skips /etc/ld.so.preload, and
	// libcuda.so.1 on its library path is the real driver
	// (the shared rootfs may hold empty mount points of other driver
	// versions, left by earlier tests: take the file that is not empty)
	start("attack3", 1<<30, "mkdir -p /run/lib && for f in /usr/lib/vgpu/driver/libcuda.so.[0-9]*; do [ -s $f ] && ln -sf $f /run/lib/libcuda.so.1; done; "+
		"sleep 3600 | LD_LIBRARY_PATH=/run/lib /lib64/ld-skip-preload.so.2 /usr/bin/vgpu-attack honest 4096")
	start("attack4", 1<<30, "sleep 3600 | vgpu-attack ns 4096 > /dev/null 2>&1")

	killed := map[string]int{}
	attacks := []string{"attack1", "attack2", "attack3", "attack4"}
	if err := pollAt(90*time.Second, 200*time.Millisecond, func() error {
		r := vgpuStatus(t, cli, e.stateDir)
		for _, id := range attacks {
			c := container(r, id)
			if c == nil || killed[id] != 0 {
				continue
			}
			for _, ev := range c.Enforcement {
				if ev.Kind == "kill" && ev.Reason == "memory" && ev.Limit == 1<<30 && ev.Used > 1<<30+64<<20 && ev.Error == "" {
					killed[id] = ev.PID
				}
			}
		}
		return holds(len(killed) == len(attacks), "killed %v, want %v", killed, attacks)
	}); err != nil {
		t.Fatalf("%v:\n%s", err, statusText(cli, e.stateDir))
	}
	// the offending process is gone: the attacker, not the container's shell
	for id, pid := range killed {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if pidAlive(pid) {
			t.Errorf("%s: pid %d (%s) still alive after its kill", id, pid, b)
		}
	}
	// the honest container: untouched, thirty more rounds of sampling later
	waitRounds(t, url, 30)
	r := vgpuStatus(t, cli, e.stateDir)
	c := container(r, "honest")
	if after := honestPIDs(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("honest container's GPU processes: %v, were %v", after, before)
	}
	for _, pid := range before {
		if !pidAlive(pid) {
			t.Errorf("honest process %d died", pid)
		}
	}
	if c != nil && len(c.Enforcement) != 0 {
		t.Errorf("honest container was acted on: %+v", c.Enforcement)
	}
	// the daemon keeps the honest container's pid map: its three GPU
	// processes under the pids they have in the container's namespace
	if data, err := os.ReadFile(hostpids.Path(e.stateDir, "honest")); err != nil {
		t.Errorf("honest container's pid map: %v", err)
	} else if m, err := hostpids.Parse(data); err != nil || len(m) != len(before) {
		t.Errorf("honest container's pid map %q (%v), want its GPU processes %v", data, err, before)
	} else {
		for _, pid := range before {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			var ns string
			for _, l := range strings.Split(string(st), "\n") {
				if f := strings.Fields(strings.TrimPrefix(l, "NSpid:")); strings.HasPrefix(l, "NSpid:") && len(f) > 1 {
					ns = f[len(f)-1]
				}
			}
			if ns == "" || fmt.Sprint(m[pid]) != ns {
				t.Errorf("pid map gives host pid %d as %d, its NSpid says %q (map %q)", pid, m[pid], ns, data)
			}
		}
	}
	text = statusText(cli, e.stateDir)
	for _, id := range attacks {
		if !strings.Contains(text, fmt.Sprintf("killed pid %d: ", killed[id])) {
			t.Errorf("status text does not show the kill of %s's pid %d:\n%s", id, killed[id], text)
		}
	}
	if !strings.Contains(text, "host enforcement: on") {
		t.Errorf("status text:\n%s", text)
	}
	ms := scrape(t, url)
	for _, id := range attacks {
		if v, ok := metricValue(ms, "vgpu_enforcement_kills_total", map[string]string{"container": id, "reason": "memory"}); !ok || v < 1 {
			t.Errorf("vgpu_enforcement_kills_total of %s: %v (%v)", id, v, ok)
		}
	}
	if _, ok := metricValue(ms, "vgpu_enforcement_kills_total", map[string]string{"container": "honest"}); ok {
		t.Error("a kill counted for the honest container")
	}
	// vgpu metrics' figures are served by the daemon too
	if v, ok := metricValue(ms, "vgpu_memory_limit_bytes", map[string]string{"container": "honest"}); !ok || v != float64(honestLimit) {
		t.Errorf("vgpu_memory_limit_bytes of honest from vgpu node: %v (%v)", v, ok)
	}
}

// A compute bypass (kernels launched through the real driver, under a 25 %
// limit) ends frozen by the cgroup freezer or, when freezing cannot hold
// it, killed; the daemon thaws what it froze when it stops.
func TestNodeThrottlesComputeBypass(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	addAttacker(t, f)
	e := newEnv(t, "node-compute")
	mkStateDir(t, e)
	cli := vgpuCLI(t)
	rt := e.runc(t)
	url, _, stopNode := startNodeStoppable(t, e)
	b := makeBundle(t, filepath.Join(e.dir, "bundle-bypass"), f.rootfs, []string{"/bin/sh", "-c", "vgpu-attack compute 0"},
		[]string{"VGPU_COMPUTE_LIMIT=25", "VGPU_VISIBLE_DEVICES=0"}, nil)
	rt.detach(b, "bypass")
	if err := pollAt(120*time.Second, 500*time.Millisecond, func() error {
		c := container(vgpuStatus(t, cli, e.stateDir), "bypass")
		acted := ""
		if c != nil {
			for _, ev := range c.Enforcement {
				// the cgroup of a container started by `run` is known (the
				// shim makes runc write its pid file): it is frozen first
				if ev.Kind == "kill" && strings.Contains(ev.Detail, "no cgroup") {
					t.Fatalf("the bypass was killed because its cgroup was not found: %+v", ev)
				}
				if ev.Kind == "freeze" && ev.Reason == "compute" && ev.Error == "" && ev.Limit == 25 && ev.Used > 35 {
					acted = ev.Kind
				}
			}
		}
		return holds(acted != "", "not frozen")
	}); err != nil {
		t.Fatalf("compute bypass: %v:\n%s", err, statusText(cli, e.stateDir))
	}
	ms := scrape(t, url)
	v1, _ := metricValue(ms, "vgpu_enforcement_freezes_total", map[string]string{"container": "bypass"})
	v2, _ := metricValue(ms, "vgpu_enforcement_kills_total", map[string]string{"container": "bypass", "reason": "compute"})
	if v1+v2 < 1 {
		t.Errorf("metrics count no freeze or kill of the bypass: %v %v", v1, v2)
	}
	// the daemon's own measure, for a check against the device's utilization
	if _, ok := metricValue(ms, "vgpu_container_compute_share_percent", map[string]string{"container": "bypass"}); !ok {
		t.Errorf("no vgpu_container_compute_share_percent of the bypass")
	}
	// vgpu-node stopped (SIGTERM) while the bypass is frozen thaws it
	// through the real freezer before it exits
	freezeFile, frozen, thawed := bypassFreezer(t, rt, "bypass")
	if err := pollAt(60*time.Second, 20*time.Millisecond, func() error {
		b, _ := os.ReadFile(freezeFile)
		return holds(strings.TrimSpace(string(b)) == frozen, "%s: %s", freezeFile, b)
	}); err != nil {
		t.Fatalf("the bypass was not seen frozen again: %v", err)
	}
	stopNode()
	if b, _ := os.ReadFile(freezeFile); strings.TrimSpace(string(b)) != thawed {
		t.Errorf("vgpu-node stopped with SIGTERM and left the bypass %s (%s)", strings.TrimSpace(string(b)), freezeFile)
		// Clean-up: thawed so that the container can be deleted.
		_ = os.WriteFile(freezeFile, []byte(thawed), 0)
	}
}

// bypassFreezer: the freezer file of runc container id's cgroup (v2 or v1)
// and its frozen and thawed values.
func bypassFreezer(t *testing.T, rt *runtimeRoot, id string) (file, frozen, thawed string) {
	t.Helper()
	status, pid := rt.state(id)
	if pid <= 0 {
		t.Fatalf("runc state %s: %q, pid %d", id, status, pid)
	}
	cg, err := procinfo.CgroupOf("", pid)
	if err != nil {
		t.Fatal(err)
	}
	if cg.Freezer != "" {
		return filepath.Join("/sys/fs/cgroup/freezer", cg.Path(), "freezer.state"), "FROZEN", "THAWED"
	}
	return filepath.Join("/sys/fs/cgroup", cg.Path(), "cgroup.freeze"), "1", "0"
}

// A compute bypass whose kernels last seconds (queued before a freeze, they
// run on while the process is frozen: on the simulated GPU as on a real
// one) is frozen first and then, the share since the first freeze still
// above the limit + 10, killed by the escalation.
func TestNodeEscalatesBypassFreezingCannotHold(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	addAttacker(t, f)
	e := newEnv(t, "node-escalate")
	mkStateDir(t, e)
	cli := vgpuCLI(t)
	url, _ := startNode(t, e)
	b := makeBundle(t, filepath.Join(e.dir, "bundle-long"), f.rootfs, []string{"/bin/sh", "-c", "vgpu-attack compute 0 3000000"},
		[]string{"VGPU_COMPUTE_LIMIT=25", "VGPU_VISIBLE_DEVICES=0"}, nil)
	e.runc(t).detach(b, "long")
	if err := pollAt(180*time.Second, 500*time.Millisecond, func() error {
		froze, killed := false, false
		if c := container(vgpuStatus(t, cli, e.stateDir), "long"); c != nil {
			for _, ev := range c.Enforcement {
				if ev.Kind == "freeze" && ev.Error == "" {
					froze = true
				}
				if ev.Kind == "kill" && ev.Reason == "compute" {
					if !froze || !strings.Contains(ev.Detail, "throttled for") {
						t.Fatalf("killed without the throttle's escalation: %+v", c.Enforcement)
					}
					killed = true
				}
			}
		}
		return holds(killed, "not killed")
	}); err != nil {
		t.Fatalf("a bypass freezing cannot hold: %v:\n%s", err, statusText(cli, e.stateDir))
	}
	ms := scrape(t, url)
	if v, _ := metricValue(ms, "vgpu_enforcement_escalations_total", map[string]string{"container": "long"}); v < 1 {
		t.Errorf("vgpu_enforcement_escalations_total of long: %v", v)
	}
}

// vgpu node on a host of several GPUs acts on the GPU that was bypassed and
// nothing else: a container with host GPUs 0 and 1 (2 GiB on 0, 1 GiB on
// 1) runs an honest holder on GPU 0 and a bypass of GPU 1 (the real driver
// by path, CUDA_VISIBLE_DEVICES=1, 4 GiB); a neighbour holds memory on GPU
// 0. The bypass is killed for GPU 1's limit; the container's GPU 0 process
// and the neighbour live on, with no event of their own.
func TestNodeActsOnTheBypassedGPUOnly(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	addAttacker(t, f)
	e := newEnv4(t, "node-multi")
	mkStateDir(t, e)
	cli := vgpuCLI(t)
	rt := e.runc(t)
	url, _ := startNode(t, e)
	start := func(id, sh string, env ...string) {
		t.Helper()
		b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/sh", "-c", sh}, env, nil)
		rt.create(b, id)
		rt.start(id)
	}
	start("tenant", "sleep 3600 | cuda-fill hold 400 & sleep 1; sleep 3600 | CUDA_VISIBLE_DEVICES=1 vgpu-attack driver 4096 & wait",
		"VGPU_VISIBLE_DEVICES=0,1", "VGPU_MEMORY_LIMIT=0=2Gi,1=1Gi")
	start("neighbour", "sleep 3600 | cuda-fill hold 400", "VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=2Gi")

	// the honest processes, by the libraries' counts: the tenant's on its GPU 0, the neighbour's
	honest := func(r *status.Report) (pids []int) {
		for _, id := range []string{"tenant", "neighbour"} {
			if c := container(r, id); c != nil {
				for _, p := range c.Processes {
					if len(p.Memory) > 0 && p.Memory[0] > 0 {
						pids = append(pids, p.HostPID)
					}
				}
			}
		}
		return pids
	}
	var kill *events.Event
	var before []int
	if err := pollAt(90*time.Second, 200*time.Millisecond, func() error {
		r := vgpuStatus(t, cli, e.stateDir)
		if len(before) < 2 {
			before = honest(r)
		}
		if c := container(r, "tenant"); c != nil {
			for i, ev := range c.Enforcement {
				if ev.Kind == "kill" {
					kill = &c.Enforcement[i]
				}
			}
		}
		return holds(kill != nil && len(before) >= 2, "kill %+v, honest processes %v", kill, before)
	}); err != nil {
		t.Fatalf("%v:\n%s", err, statusText(cli, e.stateDir))
	}
	if kill.GPU != simroot.DefaultUUID(1) || kill.Reason != "memory" || kill.Limit != 1<<30 || kill.Used <= 1<<30 {
		t.Errorf("kill %+v: want memory over GPU 1's 1 GiB limit, on %s", *kill, simroot.DefaultUUID(1))
	}
	for _, pid := range before {
		if pid == kill.PID {
			t.Errorf("the kill took pid %d, an honest process on GPU 0", pid)
		}
	}
	waitRounds(t, url, 30) // rounds of the daemon past the kill, where a wrong one would land
	r := vgpuStatus(t, cli, e.stateDir)
	if pidAlive(kill.PID) {
		t.Errorf("the bypass, pid %d, is alive after its kill", kill.PID)
	}
	for _, pid := range before {
		if !pidAlive(pid) {
			t.Errorf("honest pid %d on GPU 0 died", pid)
		}
	}
	if after := honest(r); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("honest GPU 0 processes %v, were %v", after, before)
	}
	for _, ev := range container(r, "tenant").Enforcement {
		if ev.GPU != simroot.DefaultUUID(1) {
			t.Errorf("the tenant was acted on on another GPU than 1: %+v", ev)
		}
	}
	if c := container(r, "neighbour"); c == nil || len(c.Enforcement) != 0 {
		t.Errorf("the neighbour: %+v", c)
	}
}
