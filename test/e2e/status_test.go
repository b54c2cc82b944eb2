//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// `vgpu status` and `vgpu metrics` (docs/status.md) against real
// containers whose processes hold device memory on the simulated GPU: the
// test rootfs's cuda-fill (lib/cudahook/testdata/client.c) allocates and
// holds until its stdin closes; `sleep | cuda-fill` keeps it open.

// holder is the shell command of a container process holding mib MiB.
func holder(mib int) string { return fmt.Sprintf("sleep 3600 | cuda-fill hold %d", mib) }

// holdersInTurn starts holders one after another, each once the one before
// holds its memory. The library measures what a context costs as the device's
// free memory before and after creating it (lib/cudahook memory.c), so another
// process's allocation on that GPU in between would be counted in it; the
// tests that check exact usage start the processes on one GPU in turn.
func holdersInTurn(mibs ...int) string {
	var b strings.Builder
	for i, m := range mibs {
		f := fmt.Sprintf("/tmp/hold%d", i)
		fmt.Fprintf(&b, "%s > %s & until grep -q hold_rc %s 2>/dev/null; do sleep 0.1; done; ", holder(m), f, f)
	}
	b.WriteString("wait")
	return b.String()
}

// vgpuCLI is the vgpu binary ($VGPU_BUILD/bin, else built here).
func vgpuCLI(t *testing.T) string {
	t.Helper()
	return filepath.Join(binaries(t), "vgpu")
}

// vgpuNode is the host daemon's program, beside vgpu.
func vgpuNode(t *testing.T) string {
	t.Helper()
	return filepath.Join(binaries(t), "vgpu-node")
}

func vgpuStatus(t *testing.T, cli, stateDir string) *status.Report {
	t.Helper()
	out, err := exec.Command(cli, "status", "--json", "--state-dir", stateDir).Output()
	if err != nil {
		t.Fatalf("vgpu status --json: %v\n%s", err, out)
	}
	var r status.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("vgpu status --json: %v\n%s", err, out)
	}
	return &r
}

func container(r *status.Report, id string) *status.Container {
	for i := range r.Containers {
		if r.Containers[i].ID == id {
			return &r.Containers[i]
		}
	}
	return nil
}

// want is what one container must show.
type want struct {
	limit   uint64   // device 0's memory limit
	compute int      // device 0's compute limit (100: none)
	holds   []uint64 // bytes each GPU process holds (its context included)
}

func (w want) used() uint64 {
	var s uint64
	for _, h := range w.holds {
		s += h
	}
	return s
}

// checkContainer compares one container of the report with w; "" when it matches.
func checkContainer(c *status.Container, w want) string {
	if c == nil {
		return "not listed"
	}
	if c.State != status.Running || len(c.Errors) != 0 {
		return fmt.Sprintf("state %s, errors %v", c.State, c.Errors)
	}
	if len(c.Devices) != 1 || c.Devices[0].MemoryLimit != w.limit || c.Devices[0].ComputeLimit != w.compute ||
		c.Devices[0].MemoryUsed != w.used() || !strings.HasPrefix(c.Devices[0].UUID, "GPU-") {
		return fmt.Sprintf("devices %+v, want limit %d compute %d used %d", c.Devices, w.limit, w.compute, w.used())
	}
	if len(c.Processes) != len(w.holds) {
		return fmt.Sprintf("%d GPU processes, want %d: %+v", len(c.Processes), len(w.holds), c.Processes)
	}
	got := map[uint64]int{}
	for _, p := range c.Processes {
		got[p.Memory[0]]++
		if p.HostPID <= 0 || p.PID <= 0 || p.Name != "cuda-fill" {
			return fmt.Sprintf("process %+v: want host pid, pid and name cuda-fill", p)
		}
		// the host pid is the process whose innermost pid is the slot's
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.HostPID))
		if err != nil || !regexp.MustCompile(`(?m)^NSpid:.*\s`+strconv.Itoa(p.PID)+`$`).Match(b) {
			return fmt.Sprintf("process %+v: host pid %d does not have NSpid ending in %d", p, p.HostPID, p.PID)
		}
	}
	for _, h := range w.holds {
		if got[h]--; got[h] < 0 {
			return fmt.Sprintf("processes %+v, want holdings %v", c.Processes, w.holds)
		}
	}
	return ""
}

// waitStatus polls vgpu status until every container matches (the holders
// allocate after their container started).
func waitStatus(t *testing.T, cli, stateDir string, wants map[string]want) *status.Report {
	t.Helper()
	var r *status.Report
	if err := pollAt(30*time.Second, 200*time.Millisecond, func() error {
		r = vgpuStatus(t, cli, stateDir)
		var bad []string
		for id, w := range wants {
			if msg := checkContainer(container(r, id), w); msg != "" {
				bad = append(bad, id+": "+msg)
			}
		}
		return holds(len(bad) == 0, "%s", strings.Join(bad, "\n"))
	}); err != nil {
		t.Fatalf("vgpu status: %v\n%s", err, statusText(cli, stateDir))
	}
	return r
}

// metricsServer starts `vgpu-node metrics` on a free loopback port.
func metricsServer(t *testing.T, stateDir string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(vgpuNode(t), "metrics", "--listen", addr, "--state-dir", stateDir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := "http://" + addr + "/metrics"
	for i := 0; ; i++ {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return url
		}
		if i > 100 {
			t.Fatalf("vgpu metrics does not answer on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$`)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape GETs the metrics: name → samples (labels, value).
type sample struct {
	labels map[string]string
	value  float64
}

func scrape(t *testing.T, url string) map[string][]sample {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	out := map[string][]sample{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := sampleRE.FindStringSubmatch(sc.Text())
		if m == nil || strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		s := sample{labels: map[string]string{}}
		for _, l := range labelRE.FindAllStringSubmatch(m[3], -1) {
			s.labels[l[1]] = l[2]
		}
		s.value, _ = strconv.ParseFloat(m[4], 64)
		out[m[1]] = append(out[m[1]], s)
	}
	return out
}

func metricValue(ms map[string][]sample, name string, labels map[string]string) (float64, bool) {
outer:
	for _, s := range ms[name] {
		for k, v := range labels {
			if s.labels[k] != v {
				continue outer
			}
		}
		return s.value, true
	}
	return 0, false
}

// checkMetrics: the endpoint's numbers are the report's, container by container.
func checkMetrics(t *testing.T, url string, r *status.Report, ids ...string) {
	t.Helper()
	ms := scrape(t, url)
	for _, id := range ids {
		c := container(r, id)
		for _, d := range c.Devices {
			l := map[string]string{"container": id, "device": strconv.Itoa(d.Index), "uuid": d.UUID}
			if v, ok := metricValue(ms, "vgpu_memory_used_bytes", l); !ok || uint64(v) != d.MemoryUsed {
				t.Errorf("%s: vgpu_memory_used_bytes %v (%v), status says %d", id, v, ok, d.MemoryUsed)
			}
			if v, ok := metricValue(ms, "vgpu_memory_limit_bytes", l); !ok || uint64(v) != d.MemoryLimit {
				t.Errorf("%s: vgpu_memory_limit_bytes %v (%v), status says %d", id, v, ok, d.MemoryLimit)
			}
			if v, ok := metricValue(ms, "vgpu_compute_limit_percent", l); !ok || int(v) != d.ComputeLimit {
				t.Errorf("%s: vgpu_compute_limit_percent %v (%v), status says %d", id, v, ok, d.ComputeLimit)
			}
			for _, p := range c.Processes {
				pl := map[string]string{"container": id, "device": strconv.Itoa(d.Index), "host_pid": strconv.Itoa(p.HostPID), "pid": strconv.Itoa(p.PID)}
				if v, ok := metricValue(ms, "vgpu_process_memory_used_bytes", pl); !ok || uint64(v) != p.Memory[0] {
					t.Errorf("%s: vgpu_process_memory_used_bytes %v for %v, status says %d", id, v, pl, p.Memory[0])
				}
			}
		}
		if v, ok := metricValue(ms, "vgpu_container_running", map[string]string{"container": id}); !ok || v != 1 {
			t.Errorf("%s: vgpu_container_running %v (%v)", id, v, ok)
		}
		if v, ok := metricValue(ms, "vgpu_container_gpu_processes", map[string]string{"container": id}); !ok || int(v) != len(c.Processes) {
			t.Errorf("%s: vgpu_container_gpu_processes %v, status lists %d", id, v, len(c.Processes))
		}
	}
}

// Two containers of docker --runtime=vgpu, one GPU process in one, two in
// the other: status shows both with their limits and usage, and GET /metrics
// the same numbers.
func TestStatusDocker(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "status-docker")
	cli := vgpuCLI(t)
	d := startDockerd(t, map[string]string{"vgpu": e.wrapper})
	if out, err := d.docker(t, "import", f.rootfsTar, "vgpu-e2e/bb:1"); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	runC := func(name string, env []string, cmd string) string {
		args := []string{"run", "-d", "--runtime=vgpu", "--network=none", "--name", name}
		for _, e := range env {
			args = append(args, "-e", e)
		}
		out, err := d.docker(t, append(args, "vgpu-e2e/bb:1", "/bin/sh", "-c", cmd)...)
		if err != nil {
			t.Fatalf("docker run %s: %v\n%s", name, err, out)
		}
		id := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
		t.Cleanup(func() { _, _ = d.docker(t, "rm", "-f", id) }) // clean-up: dockerd's end removes what is left
		return id
	}
	a := runC("status-a", []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=2Gi"}, holder(512))
	b := runC("status-b", []string{"VGPU_VISIBLE_DEVICES=1", "VGPU_MEMORY_LIMIT=1Gi", "VGPU_COMPUTE_LIMIT=30"},
		holdersInTurn(128, 64))
	wants := map[string]want{
		a: {limit: 2 << 30, compute: 100, holds: []uint64{ctxBytes + 512<<20}},
		b: {limit: 1 << 30, compute: 30, holds: []uint64{ctxBytes + 128<<20, ctxBytes + 64<<20}},
	}
	waitStatus(t, cli, e.stateDir, wants) // b's processes hold before c's start on GPU 1 (holdersInTurn)
	c70 := runC("status-c", []string{"VGPU_VISIBLE_DEVICES=1", "VGPU_MEMORY_LIMIT=1Gi", "VGPU_COMPUTE_LIMIT=70"}, holder(32))
	wants[c70] = want{limit: 1 << 30, compute: 70, holds: []uint64{ctxBytes + 32<<20}}
	r := waitStatus(t, cli, e.stateDir, wants)
	// The two paced containers on GPU 1 take turns: slots 0-30 and 30-100.
	pb, pc := container(r, b).Devices[0].ComputePhase, container(r, c70).Devices[0].ComputePhase
	if pb == nil || pc == nil || *pb != 0 || *pc != 30 || container(r, a).Devices[0].ComputePhase != nil {
		show := func(p *int) string {
			if p == nil {
				return "none"
			}
			return strconv.Itoa(*p)
		}
		t.Errorf("phases: 30 %% container %s, 70 %% container %s (want 0 and 30), unlimited %s (want none)",
			show(pb), show(pc), show(container(r, a).Devices[0].ComputePhase))
	}
	for _, id := range []string{a, b} {
		c := container(r, id)
		if c.InitPID <= 0 || !c.InitAlive {
			t.Errorf("%s: init pid %d (alive %v): the shim did not record it at start", id, c.InitPID, c.InitAlive)
		}
		if c.HostProcesses < 3 { // sh, sleep, cuda-fill
			t.Errorf("%s: %d host processes", id, c.HostProcesses)
		}
	}
	url := metricsServer(t, e.stateDir)
	checkMetrics(t, url, r, a, b)
	text, _ := exec.Command(cli, "status", "--state-dir", e.stateDir).CombinedOutput()
	t.Logf("vgpu status:\n%s", text)
}

// Through vgpu-runtime create/start (runc bundles): the init pid is recorded
// at start from create's --pid-file; a container killed but not deleted is
// shown stale with nothing counted; its metrics say so too.
func TestStatusRuncStale(t *testing.T) {
	f := shared(t)
	need(t, "runc")
	e := newEnv(t, "status-runc")
	cli := vgpuCLI(t)
	rt := e.runc(t)
	ids := map[string]want{
		"keep": {limit: 1 << 30, compute: 100, holds: []uint64{ctxBytes + 100<<20}},
		"gone": {limit: 2 << 30, compute: 100, holds: []uint64{ctxBytes + 200<<20}},
	}
	for id, w := range ids {
		b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/sh", "-c", holder(int((w.holds[0] - ctxBytes) >> 20))},
			[]string{fmt.Sprintf("VGPU_MEMORY_LIMIT=%d", w.limit), "VGPU_VISIBLE_DEVICES=0"}, nil)
		pidFile := filepath.Join(e.dir, id+".pid")
		rt.createStart(b, id)
		waitStatus(t, cli, e.stateDir, map[string]want{id: w}) // in turn on GPU 0 (holdersInTurn)
		info, err := state.Read(e.stateDir, id)
		pid, _ := os.ReadFile(pidFile)
		if err != nil || len(info.PIDs) != 1 || strconv.Itoa(info.PIDs[0]) != strings.TrimSpace(string(pid)) || info.PIDFile != pidFile {
			t.Errorf("%s: container.json %+v (%v), want pids [%s] from %s", id, info, err, pid, pidFile)
		}
	}
	r := waitStatus(t, cli, e.stateDir, ids)
	url := metricsServer(t, e.stateDir)
	checkMetrics(t, url, r, "keep", "gone")

	rt.must(30*time.Second, "kill", "gone", "KILL")
	var c *status.Container
	eventually(t, 10*time.Second, "the killed container shown stale", func() error {
		c = container(vgpuStatus(t, cli, e.stateDir), "gone")
		return holds(c != nil && c.State == status.Stale, "%+v", c)
	})
	if c.InitAlive || c.HostProcesses != 0 || len(c.Processes) != 0 || c.Devices[0].MemoryUsed != 0 || len(c.Errors) != 0 {
		t.Errorf("stale container: %+v", c)
	}
	if msg := checkContainer(container(vgpuStatus(t, cli, e.stateDir), "keep"), ids["keep"]); msg != "" {
		t.Errorf("the other container: %s", msg)
	}
	ms := scrape(t, url)
	if v, ok := metricValue(ms, "vgpu_container_running", map[string]string{"container": "gone"}); !ok || v != 0 {
		t.Errorf("vgpu_container_running of the stale container: %v (%v)", v, ok)
	}
	if v, ok := metricValue(ms, "vgpu_memory_used_bytes", map[string]string{"container": "gone"}); !ok || v != 0 {
		t.Errorf("vgpu_memory_used_bytes of the stale container: %v (%v)", v, ok)
	}
	if text := statusText(cli, e.stateDir); !strings.Contains(text, "CONTAINER gone  name -  STALE") {
		t.Errorf("text output does not show the stale container:\n%s", text)
	}
	rt.must(30*time.Second, "delete", "gone")
	rt.must(30*time.Second, "kill", "keep", "KILL")
}
