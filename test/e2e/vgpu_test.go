//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// ---- our binaries and configuration -------------------------------------------

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// binaries returns the directory holding vgpu-runtime and vgpu-hook:
// $VGPU_BUILD/bin (make build), else built here from the module.
func binaries(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if b := os.Getenv("VGPU_BUILD"); b != "" {
			binDir = filepath.Join(b, "bin")
			for _, p := range []string{"vgpu-runtime", "vgpu-hook", "vgpu", "vgpu-node"} {
				if _, err := os.Stat(filepath.Join(binDir, p)); err != nil {
					binErr = fmt.Errorf("VGPU_BUILD=%s: %v (run make build)", b, err)
				}
			}
			return
		}
		binDir, binErr = os.MkdirTemp("", "vgpu-e2e-bin-")
		if binErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "../../cmd/vgpu-runtime", "../../cmd/vgpu-hook", "../../cmd/vgpu-discover", "../../cmd/vgpu", "../../cmd/vgpu-node")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

// env is one test's vgpu installation: config file, state dir, runtime wrapper.
type env struct {
	dir      string
	config   string
	stateDir string
	runtime  string // vgpu-runtime
	hook     string // vgpu-hook
	wrapper  string // a script exec'ing vgpu-runtime with VGPU_CONFIG set (for docker, ctr)
	sim      *simroot.Root
}

func newEnv(t *testing.T, name string) *env {
	t.Helper()
	// The simulated GPU (two devices) stands in for the host's driver.
	return newEnvSim(t, name, simroot.Options{Devices: []simroot.Device{{}, {}}})
}

// newEnvSim is newEnv over a simulated GPU laid out by opts.
func newEnvSim(t *testing.T, name string, opts simroot.Options) *env {
	t.Helper()
	bin := binaries(t)
	dir := privateDir(t, name)
	e := &env{
		dir:      dir,
		config:   filepath.Join(dir, "config.toml"),
		stateDir: filepath.Join(dir, "state"),
		runtime:  filepath.Join(bin, "vgpu-runtime"),
		hook:     filepath.Join(bin, "vgpu-hook"),
		wrapper:  filepath.Join(dir, "vgpu-runtime.sh"),
	}
	sim, err := simroot.Create(filepath.Join(dir, "driver"), opts)
	if err != nil {
		t.Fatal(err)
	}
	e.sim = sim
	simBuild, err := simroot.BuildDir() // <build>/simgpu; the stand-ins are in <build>/lib
	if err != nil {
		t.Fatal(err)
	}
	libDir, err := filepath.Abs(filepath.Join(simBuild, "..", "lib"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`state_dir = %q
[driver]
root = %q
dev_root = %q
ipc_paths = ["run/simgpu"]
[library]
dir = %q
`, e.stateDir, sim.Dir(), sim.Dir(), libDir)
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.wrapper, []byte(fmt.Sprintf("#!/bin/sh\nVGPU_CONFIG=%q exec %q \"$@\"\n", e.config, e.runtime)), 0o755)
	return e
}

func (e *env) vars() []string { return []string{"VGPU_CONFIG=" + e.config} }

// checkLimited asserts what a container limited to GPU 0 with mem bytes sees.
func checkLimited(t *testing.T, r report, mem string) {
	t.Helper()
	if r.QuotaErr != "" {
		t.Fatalf("no quota file in the container: %s (report %+v)", r.QuotaErr, r)
	}
	if v := fmt.Sprintf("vgpu-quota %d\n", contract.QuotaVersionTime); !strings.HasPrefix(r.Quota, v) && !strings.Contains(r.Quota, "\n"+v) {
		t.Errorf("quota file does not start with %s%s", v, r.Quota)
	}
	if !strings.Contains(r.Quota, "\ndevice 0 GPU-") || !strings.Contains(r.Quota, " memory="+mem) {
		t.Errorf("quota file lacks device 0 with memory=%s:\n%s", mem, r.Quota)
	}
	if r.QuotaWrite != "EROFS" {
		t.Errorf("writing the quota file: %s, want EROFS", r.QuotaWrite)
	}
	for _, d := range []string{"/dev/nvidia0", "/dev/nvidiactl"} {
		if got := r.Devs[d]; got != "ENXIO" && got != "ok" {
			t.Errorf("%s: open gives %q, want ENXIO (allowed by the device cgroup)", d, got)
		}
	}
	if _, ok := r.Devs["/dev/nvidia1"]; ok {
		t.Errorf("/dev/nvidia1 is in a container limited to GPU 0: %v", r.Devs)
	}
	for _, f := range []string{"/usr/lib/vgpu/libvgpu-cuda.so", "/usr/lib/vgpu/libvgpu-nvml.so", "/etc/ld.so.preload", "/run/vgpu/shared"} {
		if !r.Files[f] {
			t.Errorf("%s missing in the container", f)
		}
	}
	if !strings.Contains(r.Preload, "/usr/lib/vgpu/libvgpu-cuda.so") {
		t.Errorf("ld.so.preload does not name the stand-in: %q", r.Preload)
	}
	if r.SharedW != "ok" {
		t.Errorf("/run/vgpu/shared not writable: %s", r.SharedW)
	}
}

// gpuPrograms is the shell command that runs the probe, then the two GPU
// programs of the test rootfs under the library.
const gpuPrograms = "/bin/probe; nvml-info; cuda-fill fill alloc 256"

// checkGPUPrograms asserts what programs in a container limited to limit bytes
// on one device see: NVML (go-nvml) and the driver API (cuGetProcAddress_v2).
func checkGPUPrograms(t *testing.T, out string, limit uint64) {
	t.Helper()
	kv := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			kv[k] = v
		}
	}
	lim := fmt.Sprint(limit)
	if kv["nvml_count"] != "1" || kv["nvml_total0"] != lim {
		t.Errorf("go-nvml in the container: count %q total %q, want 1 device of %s bytes\n%s", kv["nvml_count"], kv["nvml_total0"], lim, out)
	}
	if kv["before_total"] != lim || kv["before_devtotal"] != lim {
		t.Errorf("cuMemGetInfo_v2 total %q, cuDeviceTotalMem_v2 %q, want %s", kv["before_total"], kv["before_devtotal"], lim)
	}
	// The context's own footprint (256 MiB on the simulator) counts too.
	if want := fmt.Sprint(limit - 256<<20); kv["first_bytes"] != want || kv["first_err"] != "2" {
		t.Errorf("filled %q bytes then error %q, want %s then CUDA_ERROR_OUT_OF_MEMORY (2)\n%s", kv["first_bytes"], kv["first_err"], want, out)
	}
	if kv["second_bytes"] != kv["first_bytes"] {
		t.Errorf("after freeing, filled %q bytes, want %q again", kv["second_bytes"], kv["first_bytes"])
	}
}

// ---- runc ------------------------------------------------------------------------

func TestRuncRequest(t *testing.T) {
	f := shared(t)
	need(t, "runc")
	e := newEnv(t, "runc-req")
	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/sh", "-c", gpuPrograms},
		[]string{"VGPU_MEMORY_LIMIT=2Gi", "VGPU_VISIBLE_DEVICES=0"}, nil)
	out, err := e.runc(t).run(b, "req")
	if err != nil {
		t.Fatalf("vgpu-runtime run: %v\n%s", err, out)
	}
	checkLimited(t, parseReport(t, out), "2147483648")
	checkGPUPrograms(t, out, 2<<30)
	if _, err := os.Stat(filepath.Join(e.stateDir, "req")); !os.IsNotExist(err) {
		t.Errorf("state dir left after run exited: %v", err)
	}
}

func TestRuncNoRequestUntouched(t *testing.T) {
	f := shared(t)
	need(t, "runc")
	e := newEnv(t, "runc-plain")
	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/probe"}, nil, nil)
	p := filepath.Join(b, "config.json")
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(p)
	var st1 syscall.Stat_t
	if err := syscall.Stat(p, &st1); err != nil {
		t.Fatal(err)
	}
	out, err := e.runc(t).run(b, "plain")
	if err != nil {
		t.Fatalf("vgpu-runtime run: %v\n%s", err, out)
	}
	r := parseReport(t, out)
	if r.QuotaErr != "ENOENT" || len(r.Devs) != 0 {
		t.Errorf("a container asking for nothing got something: %+v", r)
	}
	after, _ := os.ReadFile(p)
	var st2 syscall.Stat_t
	if err := syscall.Stat(p, &st2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("config.json changed")
	}
	if st1.Ino != st2.Ino || st1.Mtim != st2.Mtim {
		t.Errorf("config.json rewritten: inode %d→%d, mtime %v→%v", st1.Ino, st2.Ino, st1.Mtim, st2.Mtim)
	}
	if ents, _ := os.ReadDir(e.stateDir); len(ents) != 0 {
		t.Errorf("state written for a container asking for nothing: %v", ents)
	}
}

// A broken configuration stops create, never state/kill/delete of existing containers.
func TestRuncBadConfigLifecycle(t *testing.T) {
	f := shared(t)
	need(t, "runc")
	e := newEnv(t, "runc-badcfg")
	rt := e.runc(t)
	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/sleep", "60"}, nil, nil)
	vr := func(args ...string) (string, error) { return rt.cmd(30*time.Second, args...) }
	rt.create(b, "c1")
	if err := os.WriteFile(e.config, []byte("this is [not toml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"state", "c1"}, {"list"}, {"start", "c1"}, {"kill", "c1", "KILL"}} {
		if out, err := vr(args...); err != nil {
			t.Errorf("%v with a bad config: %v\n%s", args, err, out)
		}
	}
	// delete without --force wants it stopped; if it is not by then, the
	// delete below says so
	_ = pollAt(10*time.Second, 50*time.Millisecond, func() error {
		status, _ := rt.state("c1")
		return holds(status == "stopped", "c1 is %q", status)
	})
	if out, err := vr("delete", "c1"); err != nil {
		t.Errorf("delete with a bad config: %v\n%s", err, out)
	}
	// and a create with the bad config fails, with the reason in the json log
	logf := filepath.Join(e.dir, "log.json")
	rt.deleteAtEnd("c2")
	out, err := rt.cmd(30*time.Second, "--log", logf, "--log-format", "json", "create", "--bundle", b, "c2")
	if err == nil {
		t.Fatalf("create with a bad config succeeded:\n%s", out)
	}
	lb, _ := os.ReadFile(logf)
	if !bytes.Contains(lb, []byte(`"level":"error"`)) || !strings.Contains(out, "vgpu-runtime:") {
		t.Errorf("error not reported in the log (%s) and on stderr (%s)", lb, out)
	}
}

// delete removes our state even when runc no longer knows the container.
func TestDeleteRemovesState(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	e := newEnv(t, "delete")
	mkdirAll(t, filepath.Join(e.stateDir, "ghost", "shared"), 0o755)
	writeFile(t, filepath.Join(e.stateDir, "ghost", "quota"), []byte("vgpu-quota 1\n"), 0o644)
	out, err := e.runc(t).cmd(30*time.Second, "delete", "ghost")
	if err == nil {
		t.Logf("runc delete of an unknown container succeeded: %s", out)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "ghost")); !os.IsNotExist(err) {
		t.Errorf("state of a container unknown to runc not removed: %v", err)
	}
}

// ---- docker ----------------------------------------------------------------------

func TestDocker(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "docker")
	d := startDockerd(t, map[string]string{"vgpu": e.wrapper})
	if out, err := d.docker(t, "import", f.rootfsTar, "vgpu-e2e/bb:1"); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	t.Run("limited", func(t *testing.T) {
		out, err := d.docker(t, "run", "--rm", "--runtime=vgpu", "--network=none",
			"-e", "VGPU_VISIBLE_DEVICES=0", "-e", "VGPU_MEMORY_LIMIT=1Gi", "vgpu-e2e/bb:1", "/bin/sh", "-c", gpuPrograms)
		if err != nil {
			t.Fatalf("docker run: %v\n%s", err, out)
		}
		checkLimited(t, parseReport(t, out), "1073741824")
		checkGPUPrograms(t, out, 1<<30)
	})
	t.Run("plain", func(t *testing.T) {
		out, err := d.docker(t, "run", "--rm", "--runtime=vgpu", "--network=none", "vgpu-e2e/bb:1", "/bin/probe")
		if err != nil {
			t.Fatalf("docker run: %v\n%s", err, out)
		}
		if r := parseReport(t, out); r.QuotaErr != "ENOENT" {
			t.Errorf("plain container got a quota: %+v", r)
		}
	})
	t.Run("bad-request", func(t *testing.T) {
		out, err := d.docker(t, "run", "--rm", "--runtime=vgpu", "--network=none",
			"-e", "VGPU_VISIBLE_DEVICES=0", "-e", "VGPU_MEMORY_LIMIT=lots", "vgpu-e2e/bb:1", "/bin/probe")
		if err == nil {
			t.Fatalf("docker run with VGPU_MEMORY_LIMIT=lots succeeded:\n%s", out)
		}
		if !strings.Contains(out, "lots") {
			t.Errorf("docker's output does not carry our message:\n%s", out)
		}
	})
}

// ---- containerd ------------------------------------------------------------------

func TestContainerd(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "ctrd")
	c := startContainerd(t)
	if out, err := c.ctr(t, "image", "import", f.archive); err != nil {
		t.Fatalf("ctr import: %v\n%s", err, out)
	}
	out, err := c.ctr(t, "run", "--rm", "--runc-binary", e.wrapper,
		"--env", "VGPU_VISIBLE_DEVICES=0", "--env", "VGPU_MEMORY_LIMIT=1Gi", imageRef, "limited", "/bin/sh", "-c", gpuPrograms)
	if err != nil {
		t.Fatalf("ctr run: %v\n%s", err, out)
	}
	checkLimited(t, parseReport(t, out), "1073741824")
	checkGPUPrograms(t, out, 1<<30)
}

// ---- podman + hooks.d ---------------------------------------------------------------

// podmanWithHooks starts a private podman whose hooks.d runs vgpu-hook at
// createContainer and poststop with e's config, and imports the test image.
func podmanWithHooks(t *testing.T, e *env, f *fixture) *podman {
	t.Helper()
	p := newPodman(t)
	for _, stage := range []string{"createContainer", "poststop"} {
		hook := fmt.Sprintf(`{"version":"1.0.0","hook":{"path":%q,"args":["vgpu-hook",%q],"env":["VGPU_CONFIG=%s"],"timeout":30},"when":{"always":true},"stages":[%q]}`,
			e.hook, stage, e.config, stage)
		writeFile(t, filepath.Join(p.hooks, "vgpu-"+stage+".json"), []byte(hook), 0o644)
	}
	if out, err := p.podman(t, "import", f.rootfsTar, imageRef); err != nil {
		t.Fatalf("podman import: %v\n%s", err, out)
	}
	return p
}

// simDeviceArgs are podman's --device flags for the nodes of e's simulated GPU 0.
func simDeviceArgs(e *env) []string {
	var args []string
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0"} {
		args = append(args, "--device", filepath.Join(e.sim.DevDir(), n)+":/dev/"+n)
	}
	return args
}

func TestPodmanHook(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "podman")
	p := podmanWithHooks(t, e, f)
	ann := []string{"--annotation", "vgpu.io/memory-limit=1Gi", "--annotation", "vgpu.io/visible-devices=0"}
	// Without --device the hook refuses, naming the flags: it cannot add
	// cgroup rules that survive a systemd reload.
	out, err := p.podman(t, append(append([]string{"run", "--rm", "--network=none"}, ann...), imageRef, "/bin/probe")...)
	if err == nil || !strings.Contains(out, "--device /dev/nvidiactl") {
		t.Fatalf("podman run without --device: err %v, want our refusal naming --device /dev/nvidiactl:\n%s", err, out)
	}
	// The device cgroup is podman's: --device grants it (docs/runtime.md).
	args := []string{"run", "--rm", "--network=none"}
	args = append(args, simDeviceArgs(e)...)
	out, err = p.podman(t, append(append(args, ann...), imageRef, "/bin/sh", "-c", gpuPrograms)...)
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	checkLimited(t, parseReport(t, out), "1073741824")
	checkGPUPrograms(t, out, 1<<30)
	if ents := stateLeft(e.stateDir); len(ents) != 0 {
		t.Errorf("poststop left state: %v", ents)
	}
}
