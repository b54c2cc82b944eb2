//go:build e2e

package e2e

// The driver's own per-cgroup memory limits (internal/driverlimit,
// docs/driver-limits.md) through vgpu-runtime and real runc, on the
// simulated GPU: its r615 build holds a cgroup's hard limit at allocation
// for every process in it, so a process that calls the driver by its path
// (vgpu-attack driver) is refused past the limit; its 580 build has no such
// call, and the library and vgpu node hold the limit as before.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

var bundles int

// attackRun creates and starts container id running `vgpu-attack driver
// 4096` (the driver by its path, around the library) and returns the MiB it
// held; the container stays (sleeping) until the test deletes it.
func attackRun(t *testing.T, e *env, id string, env []string) int {
	t.Helper()
	f := shared(t)
	addAttacker(t, f)
	bundles++
	out := filepath.Join(e.dir, fmt.Sprintf("out-%s-%d", id, bundles))
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	b := makeBundle(t, filepath.Join(e.dir, fmt.Sprintf("bundle-%s-%d", id, bundles)), f.rootfs,
		[]string{"/bin/sh", "-c", "vgpu-attack driver 4096 </dev/null >/out/attack 2>&1; sleep 3600"}, env, nil)
	cfgPath := filepath.Join(b, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	s["mounts"] = append(s["mounts"].([]any), map[string]any{"destination": "/out", "type": "bind", "source": out, "options": []any{"rbind", "rw"}})
	if raw, err = json.Marshal(s); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	rt := e.runc(t).jsonLog()
	rt.deleteAtEnd(id)
	rt.must(60*time.Second, "create", "--bundle", b, id)
	rt.start(id)
	n := 0
	eventually(t, 60*time.Second, "container "+id+": vgpu-attack's held_mib", func() error {
		b, _ := os.ReadFile(filepath.Join(out, "attack"))
		m := regexp.MustCompile(`held_mib=(\d+)`).FindSubmatch(b)
		if m == nil {
			return fmt.Errorf("none printed: %q", b)
		}
		for _, c := range m[1] {
			n = n*10 + int(c-'0')
		}
		return nil
	})
	return n
}

// deleteContainer kills and deletes id through vgpu-runtime.
func deleteContainer(t *testing.T, e *env, id string) {
	t.Helper()
	rt := e.runc(t).jsonLog()
	rt.must(30*time.Second, "kill", id, "KILL")
	eventually(t, 30*time.Second, "container "+id+" stopped", func() error {
		out, _ := rt.cmd(10*time.Second, "state", id)
		return holds(strings.Contains(out, `"stopped"`), "vgpu-runtime state: %s", out)
	})
	rt.must(30*time.Second, "delete", id)
}

func heldBy(t *testing.T, e *env, id string) string {
	t.Helper()
	c := container(vgpuStatus(t, vgpuCLI(t), e.stateDir), id)
	if c == nil || len(c.Devices) != 1 {
		t.Fatalf("vgpu status: container %s with one device not found", id)
	}
	return c.Devices[0].MemoryHeldBy
}

func runtimeLog(e *env) string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "runtime.log"))
	return string(b)
}

// On an r615 driver: set at create on the container's cgroup, a bypass
// refused at allocation by the driver, vgpu status naming the driver, and
// cleared at delete (a later container of the same id and cgroup without a
// limit is not held to it).
func TestDriverLimitsRunc(t *testing.T) {
	need(t, "runc", "gcc")
	e := newEnvSim(t, "drvlim", simroot.Options{R615: true})
	limit := []string{"VGPU_MEMORY_LIMIT=1Gi", "VGPU_VISIBLE_DEVICES=0"}
	// 1 GiB: the context's 256 MiB and three steps of 256 MiB
	if held := attackRun(t, e, "dl", limit); held != 768 {
		t.Errorf("a process calling the r615 driver by its path held %d MiB under a 1 GiB limit, want 768 (the driver refuses the rest)\n%s", held, runtimeLog(e))
	}
	info, err := state.Read(e.stateDir, "dl")
	if err != nil {
		t.Fatal(err)
	}
	// runc without cgroupsPath: /<id> in the host's v2 hierarchy
	// (/sys/fs/cgroup/unified/dl on CI's hybrid host)
	want := filepath.Join(simroot.CgroupV2Root(), "dl")
	if info.DriverLimits == nil || !info.DriverLimits.Set || info.DriverLimits.Cgroup != want {
		t.Errorf("container.json driverLimits %+v, want set on %s", info.DriverLimits, want)
	}
	if by := heldBy(t, e, "dl"); by != driverlimit.ByDriver {
		t.Errorf("vgpu status: memory held by %q, want %q", by, driverlimit.ByDriver)
	}
	// vgpu node reads the driver's own limits back
	_, nodeLog := startNode(t, e)
	waitLog(t, nodeLog, "the driver holds its memory limit on "+want+": hard 1.0 GiB", 30*time.Second)
	deleteContainer(t, e, "dl")
	if held := attackRun(t, e, "dl", []string{"VGPU_VISIBLE_DEVICES=0"}); held != 4096 {
		t.Errorf("after delete, a container of the same cgroup without a limit held %d MiB, want 4096: the limit was not cleared\n%s", held, runtimeLog(e))
	}
	deleteContainer(t, e, "dl")
}

// A driver that does not hold the limits: one line in the runtime's log
// saying so, the library and vgpu node hold the limit instead, nothing is
// refused, and a bypass is not held by the driver (vgpu node is not
// running here). The two cases below are its rows.
type driverNotHolding struct {
	name string          // the env's
	sim  simroot.Options // the simulated driver
	id   string          // the container's
	why  string          // what the runtime's one log line holds
	// whyRecorded: container.json says the limit was not set, and why
	whyRecorded bool
}

func checkDriverNotHolding(t *testing.T, c driverNotHolding) {
	t.Helper()
	e := newEnvSim(t, c.name, c.sim)
	if held := attackRun(t, e, c.id, []string{"VGPU_MEMORY_LIMIT=1Gi", "VGPU_VISIBLE_DEVICES=0"}); held != 4096 {
		t.Errorf("a bypass held %d MiB, want 4096 (no driver limit; vgpu node is not running here)", held)
	}
	log := runtimeLog(e)
	if n := strings.Count(log, "does not hold its memory limits"); n != 1 || !strings.Contains(log, c.why) {
		t.Errorf("runtime log: %d line(s) saying the driver does not hold the limits, want 1 with %q:\n%s", n, c.why, log)
	}
	if by := heldBy(t, e, c.id); by != driverlimit.ByLibrary {
		t.Errorf("vgpu status: memory held by %q, want %q", by, driverlimit.ByLibrary)
	}
	if c.whyRecorded {
		info, err := state.Read(e.stateDir, c.id)
		if err != nil || info.DriverLimits == nil || info.DriverLimits.Set || info.DriverLimits.Why == "" {
			t.Errorf("container.json driverLimits (%v): want not set with why", err)
		}
	}
	deleteContainer(t, e, c.id)
}

// A driver without the call (580).
func TestDriverLimitsAbsent(t *testing.T) {
	need(t, "runc", "gcc")
	checkDriverNotHolding(t, driverNotHolding{name: "drvlim-580", id: "dl580", why: "has no " + driverlimit.SetSymbol})
}

// A driver that refuses the call on this host's cgroups (cgroup-v2-only on
// a hybrid host, as CI's): the container runs.
func TestDriverLimitsRefused(t *testing.T) {
	need(t, "runc", "gcc")
	if simroot.CgroupV2Root() == "/sys/fs/cgroup" {
		t.Fatal("this host is in cgroup v2 unified mode: the refusal this test needs comes from a hybrid host (CI's)")
	}
	checkDriverNotHolding(t, driverNotHolding{name: "drvlim-v1", sim: simroot.Options{R615: true, CgroupV2Only: true},
		id: "dlv1", why: "Not Supported", whyRecorded: true})
}

// podman with vgpu-hook from hooks.d: the createContainer hook sets the
// limit on its own cgroup, the container's, and the driver refuses a bypass.
func TestDriverLimitsPodmanHook(t *testing.T) {
	f := shared(t)
	need(t, "podman", "gcc")
	addAttacker(t, f)
	e := newEnvSim(t, "drvlim-podman", simroot.Options{R615: true, Devices: []simroot.Device{{}, {}}})
	p := podmanWithHooks(t, e, f)
	args := []string{"run", "--rm", "--network=none", "-v", filepath.Join(f.rootfs, "usr/bin/vgpu-attack") + ":/usr/bin/vgpu-attack:ro"}
	args = append(args, simDeviceArgs(e)...)
	args = append(args, "--annotation", "vgpu.io/memory-limit=1Gi", "--annotation", "vgpu.io/visible-devices=0",
		imageRef, "/bin/sh", "-c", "vgpu-attack driver 4096 </dev/null")
	out, err := p.podman(t, args...)
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "held_mib=768\n") {
		t.Errorf("under podman's hook a process calling the r615 driver by its path, limit 1 GiB: %q, want held_mib=768", out)
	}
}

// vgpu exec as root in a cgroup of its own sets the driver's limit there for
// its command (a process calling the driver by its path, without the
// library, is held to it) and clears it at exit; not alone in its cgroup it
// says so and the library holds the limit.
func TestDriverLimitsExec(t *testing.T) {
	f := shared(t)
	e := newEnvSim(t, "drvlim-exec", simroot.Options{R615: true})
	cli := vgpuCLI(t)
	// the bypass: cuda-fill on the simulated driver's libcuda.so.1, no preload
	bypass := "env -u LD_PRELOAD LD_LIBRARY_PATH=" + e.sim.LibDir() + " " + filepath.Join(f.rootfs, "usr/bin/cuda-fill") + " fill alloc 256"
	dir, err := os.MkdirTemp(simroot.CgroupV2Root(), "vgpu-e2e-exec-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	inCgroup := func(args ...string) string {
		t.Helper()
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = syscall.Close(fd) }() // clean-up: a directory opened for reading
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), e.vars()...)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	first := func(out string) string {
		m := regexp.MustCompile(`first_bytes=(\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no first_bytes in %q", out)
		}
		return m[1]
	}
	out := inCgroup(cli, "exec", "--memory-limit", "1Gi", "--devices", "0", "--", "sh", "-c", bypass)
	if !strings.Contains(out, "the driver holds the memory limit on cgroup "+dir) {
		t.Errorf("vgpu exec in a cgroup of its own does not say the driver holds the limit:\n%s", out)
	}
	if got := first(out); got != fmt.Sprint(768<<20) {
		t.Errorf("a bypass under vgpu exec's driver limit of 1 GiB filled %s bytes, want %d (1 GiB less the context)", got, 768<<20)
	}
	if got := first(inCgroup("sh", "-c", bypass)); got != fmt.Sprint(16<<30-256<<20) {
		t.Errorf("after vgpu exec exited, a bypass in its cgroup filled %s bytes, want the whole device less the context: the limit was not cleared", got)
	}
	out, err = run(t, 60*time.Second, e.vars(), cli, "exec", "--memory-limit", "1Gi", "--devices", "0", "--", "sh", "-c", "true")
	if err != nil || !strings.Contains(out, "not alone in its cgroup") {
		t.Errorf("vgpu exec not alone in its cgroup: %v, want it to say so:\n%s", err, out)
	}
}

// CDI (the path of DRA claims' containers too): the hook the vgpu.io/gpu
// spec runs sets the limit on its own cgroup, the container's.
func TestDriverLimitsCDI(t *testing.T) {
	f := shared(t)
	need(t, "podman", "gcc")
	addAttacker(t, f)
	e := newEnvSim(t, "drvlim-cdi", simroot.Options{R615: true, Devices: []simroot.Device{{}, {}}})
	p := newPodman(t)
	name := fmt.Sprintf("vgpu-e2e-dl-%d.yaml", os.Getpid())
	if err := os.MkdirAll(cdiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mustVgpu(t, "cdi", "generate", "--vgpu-config", e.config, "--hook-path", e.hook, "--output", filepath.Join(cdiDir, name))
	t.Cleanup(func() { os.Remove(filepath.Join(cdiDir, name)) })
	if out, err := p.podman(t, "import", f.rootfsTar, imageRef); err != nil {
		t.Fatalf("podman import: %v\n%s", err, out)
	}
	out, err := p.podman(t, "run", "--rm", "--network=none", "--device", "vgpu.io/gpu=0", "-e", "VGPU_MEMORY_LIMIT=1Gi",
		"-v", filepath.Join(f.rootfs, "usr/bin/vgpu-attack")+":/usr/bin/vgpu-attack:ro",
		imageRef, "/bin/sh", "-c", "vgpu-attack driver 4096 </dev/null")
	if err != nil {
		t.Fatalf("podman run --device vgpu.io/gpu=0: %v\n%s", err, out)
	}
	if !strings.Contains(out, "held_mib=768\n") {
		t.Errorf("through CDI, a process calling the r615 driver by its path, limit 1 GiB: %q, want held_mib=768", out)
	}
}
