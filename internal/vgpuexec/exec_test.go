//go:build integration

package vgpuexec

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
	"golang.org/x/sys/unix"
)

func libDir(t *testing.T) string {
	b := os.Getenv("VGPU_BUILD")
	if b == "" {
		t.Fatal("VGPU_BUILD is not set: run `make c-build` and VGPU_BUILD=$PWD/build go test")
	}
	return filepath.Join(b, "lib")
}

// One simulated root (two GPUs) for the package: GPU discovery loads its NVML
// into this test process, and a process can hold only one simulator.
var shared *simroot.Root

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vgpuexec-test-")
	if err != nil {
		panic(err)
	}
	// The host's own configuration must not leak in: the defaults, but for a
	// state directory of the test's own (vgpu exec registers there).
	stateDir = filepath.Join(dir, "state")
	empty := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(empty, []byte(fmt.Sprintf("state_dir = %q\n", stateDir)), 0o644); err != nil {
		panic(err)
	}
	if err := os.Setenv("VGPU_CONFIG", empty); err != nil {
		panic(err)
	}
	shared, err = simroot.Create(dir, simroot.Options{Devices: make([]simroot.Device, 2)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, kv := range shared.Env() {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The command's entry is one of the state directory, root's alone, with
// the quota file its library reads.
func TestPrepareWritesQuota(t *testing.T) {
	root := shared
	phase := 40
	p, err := Prepare(Options{MemoryLimit: "4Gi", ComputeLimit: 30, ComputePhase: &phase, Devices: "1", DriverRoot: root.Dir(), LibDir: libDir(t),
		Args: []string{"true"}, Env: []string{"PATH=/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Remove(); err != nil {
			t.Error(err)
		}
	})
	dir := filepath.Join(stateDir, p.ID)
	if p.StateDir != stateDir || p.Private != nil || p.QuotaPath != filepath.Join(dir, "quota") {
		t.Errorf("entry %s in %s (private: %v), quota %s; want an entry of %s", p.ID, p.StateDir, p.Private, p.QuotaPath, stateDir)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("entry %v mode %v, want 0700", err, fi.Mode())
	}
	q, err := os.ReadFile(p.QuotaPath)
	if err != nil {
		t.Fatal(err)
	}
	want := "device 0 " + simroot.DefaultUUID(1) + " memory=4294967296 compute=30 phase=40\n"
	if !strings.Contains(string(q), want) || strings.Contains(string(q), simroot.DefaultUUID(0)) {
		t.Errorf("quota:\n%s\nwant only %q", q, want)
	}
	if !strings.Contains(string(q), "driver-cuda "+filepath.Join(root.LibDir(), "libcuda.so."+simroot.DriverVersion)) {
		t.Errorf("quota does not name the real libcuda:\n%s", q)
	}
	env := strings.Join(p.Env, "\n")
	for _, w := range []string{"VGPU_QUOTA_FILE=" + p.QuotaPath,
		"LD_PRELOAD=" + filepath.Join(libDir(t), "libvgpu-cuda.so") + ":" + filepath.Join(libDir(t), "libvgpu-nvml.so"),
		"CUDA_VISIBLE_DEVICES=" + simroot.DefaultUUID(1)} {
		if !strings.Contains(env, w) {
			t.Errorf("environment lacks %s:\n%s", w, env)
		}
	}
}

func TestPrepareErrors(t *testing.T) {
	root := shared
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{MemoryLimit: "lots"}, `--memory-limit="lots"`},
		{Options{ComputeLimit: 101}, "--compute-limit"},
		// More than the GPU has is refused, as vgpu-runtime refuses it.
		{Options{MemoryLimit: "1Ti"}, "is more than GPU 0"},
		{Options{MemoryLimit: "1Ti", Devices: "1"}, "is more than GPU 1"},
		{Options{ComputeLimit: 30, ComputePhase: &[]int{100}[0]}, "--compute-phase 100"},
		{Options{Devices: "7"}, `--devices="7": no GPU with index 7`},
		{Options{LibDir: "/nonexistent"}, "not found"},
	} {
		c.o.DriverRoot = root.Dir()
		if c.o.LibDir == "" {
			c.o.LibDir = libDir(t)
		}
		if _, err := Prepare(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Prepare(%+v) = %v, want %q", c.o, err, c.want)
		}
	}
	if _, err := Prepare(Options{DriverRoot: t.TempDir(), LibDir: libDir(t)}); err == nil {
		t.Error("a driver root without libcuda was accepted")
	}
}

// End to end: the simulator's nvidia-smi run by vgpu exec shows the limit,
// the exit status comes back and the private directory is gone afterwards.
func TestRunNvidiaSmiSeesLimit(t *testing.T) {
	root := shared
	var out, errb bytes.Buffer
	tmp := t.TempDir()
	code, err := Run(Options{MemoryLimit: "4Gi", DriverRoot: root.Dir(), LibDir: libDir(t),
		Args:   []string{"sh", "-c", `nvidia-smi; echo "quota=$VGPU_QUOTA_FILE"; exit 7`},
		Env:    []string{"PATH=" + filepath.Join(root.Dir(), "usr", "bin") + ":/usr/bin:/bin", "TMPDIR=" + tmp},
		Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if code != 7 {
		t.Errorf("exit status %d, want 7\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "4096MiB") {
		t.Errorf("nvidia-smi under vgpu exec does not show 4096MiB:\n%s\n%s", out.String(), errb.String())
	}
	var q string
	for _, l := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "quota="); ok {
			q = v
		}
	}
	if q == "" {
		t.Fatalf("VGPU_QUOTA_FILE not set in the command")
	}
	if _, err := os.Stat(filepath.Dir(q)); !os.IsNotExist(err) {
		t.Errorf("%s left behind after exit (%v)", filepath.Dir(q), err)
	}
}

// An entry vgpu exec cannot remove is reported, naming it, and the
// command's exit status stands. The command holds its entry: a mount on a
// directory of it (as root) keeps the removal from finishing.
func TestRunReportsAnEntryItCannotRemove(t *testing.T) {
	var out, errb bytes.Buffer
	code, err := Run(Options{MemoryLimit: "1Gi", DriverRoot: shared.Dir(), LibDir: libDir(t),
		Args: []string{"sh", "-c", `host=$(dirname "$VGPU_QUOTA_FILE")/host && mount -t tmpfs vgpu-exec-test "$host" && echo "entry=${host%/host}"; exit 3`},
		Env:  []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Stdout: &out, Stderr: &errb})
	t.Cleanup(func() {
		// the mount moved with the entry's renamed directory
		mounts, _ := filepath.Glob(filepath.Join(stateDir, ".rm-exec-*", "host"))
		for _, m := range mounts {
			_ = unix.Unmount(m, unix.MNT_DETACH) // best effort: the test's own mount
			_ = os.RemoveAll(filepath.Dir(m))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	entry := ""
	for _, l := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "entry="); ok {
			entry = v
		}
	}
	if entry == "" {
		t.Fatalf("the command did not mount on its entry:\n%s%s", out.String(), errb.String())
	}
	if code != 3 {
		t.Errorf("exit status %d, want the command's 3", code)
	}
	if msg := errb.String(); !strings.Contains(msg, "vgpu exec: removing its entry "+entry) || !strings.Contains(msg, "busy") {
		t.Errorf("stderr %q, want it to say the entry %s could not be removed, and why", msg, entry)
	}
}

// The flags are checked before the driver is looked for, with the runtime's
// size error; a relative --driver-root is made absolute.
func TestPrepareChecksFlagsFirst(t *testing.T) {
	_, err := Prepare(Options{MemoryLimit: "4Xi", DriverRoot: "/nonexistent", LibDir: libDir(t)})
	if err == nil || !strings.Contains(err.Error(), `--memory-limit="4Xi"`) || !strings.Contains(err.Error(), "use bytes or a number with Ki, Mi, Gi, Ti") {
		t.Errorf("bad size on a host without a driver: %v, want the size error", err)
	}
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, shared.Dir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := Prepare(Options{MemoryLimit: "1Gi", DriverRoot: rel, LibDir: libDir(t), Env: []string{}})
	if err != nil {
		t.Fatalf("relative --driver-root %s: %v", rel, err)
	}
	if err := p.Remove(); err != nil {
		t.Error(err)
	}
	if cuda := p.Record.Library.DriverCuda; !strings.HasPrefix(cuda, shared.Dir()+"/") {
		t.Errorf("driver-cuda %s is not under %s", cuda, shared.Dir())
	}
	if _, err := Prepare(Options{DriverRoot: "no/such/dir", LibDir: libDir(t)}); err == nil || !strings.Contains(err.Error(), `--driver-root "no/such/dir"`) {
		t.Errorf("missing relative driver root: %v", err)
	}
}

// vgpu exec reads the configuration ($VGPU_CONFIG) as the other host tools do.
func TestPrepareReadsConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.toml")
	body := fmt.Sprintf("state_dir = %q\n\n[driver]\nroot = %q\ndev_root = %q\n\n[library]\ndir = %q\nlog_level = \"debug\"\ncompute_period = \"250ms\"\n\n[defaults]\nmemory_limit = \"2Gi\"\n",
		stateDir, shared.Dir(), shared.Dir(), libDir(t))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VGPU_CONFIG", cfg)
	p, err := Prepare(Options{Devices: "0", Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Remove(); err != nil {
			t.Error(err)
		}
	})
	q, _ := os.ReadFile(p.QuotaPath)
	for _, w := range []string{"log-level debug\n", "compute-period 250\n", " memory=2147483648", "driver-cuda " + shared.Dir() + "/"} {
		if !strings.Contains(string(q), w) {
			t.Errorf("quota lacks %q (from %s):\n%s", w, cfg, q)
		}
	}
	if err := os.WriteFile(cfg, []byte("[driver]\nbogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(Options{Devices: "0", Env: []string{}}); err == nil || !strings.Contains(err.Error(), cfg) {
		t.Errorf("a broken configuration: %v, want an error naming %s", err, cfg)
	}
}

var stateDir string

// Two `vgpu exec` on one GPU, limited to 30 % without a phase, take turns:
// each registers in the state directory and gets the slot next to the
// other's; once one is done its slot is free again.
func TestExecsTakeTurns(t *testing.T) {
	prep := func() *Plan {
		p, err := Prepare(Options{ComputeLimit: 30, Devices: "0", DriverRoot: shared.Dir(), LibDir: libDir(t),
			Args: []string{"true"}, Env: []string{"PATH=/bin"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.Remove(); err != nil {
				t.Error(err)
			}
		})
		return p
	}
	phaseOf := func(p *Plan) string {
		q, err := os.ReadFile(p.QuotaPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(string(q)) {
			if strings.HasPrefix(f, "phase=") {
				return f
			}
		}
		return "no phase"
	}
	a, b := prep(), prep()
	if pa, pb := phaseOf(a), phaseOf(b); pa != "phase=0" || pb != "phase=30" {
		t.Errorf("two execs at 30 %%: %s and %s, want phase=0 and phase=30", pa, pb)
	}
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 2 {
		t.Errorf("state directory holds %d entries, want the two execs", len(entries))
	}
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	c := prep()
	if pc := phaseOf(c); pc != "phase=0" {
		t.Errorf("after the first exec ended: %s, want phase=0 (its slot is free)", pc)
	}
	// b killed without removing its entry: it stays, with a pid that is gone
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := state.SetPIDs(stateDir, b.ID, []int{dead.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	d := prep()
	if pd := phaseOf(d); pd != "phase=30" {
		t.Errorf("beside an exec whose process is gone: %s, want phase=30 (its slot is free)", pd)
	}
}

// Where the state directory cannot be written, the command runs from a
// private one of its own, removed with it, and says so.
func TestPrepareFallsBackToPrivateStateDir(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("state_dir = \"/dev/null/state\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VGPU_CONFIG", cfg)
	p, err := Prepare(Options{ComputeLimit: 30, Devices: "0", DriverRoot: shared.Dir(), LibDir: libDir(t), Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Private == nil || !strings.Contains(p.Private.Error(), "/dev/null/state") || !strings.HasPrefix(p.QuotaPath, p.StateDir+"/") {
		t.Errorf("private state directory %s (%v), quota %s", p.StateDir, p.Private, p.QuotaPath)
	}
	if err := p.Remove(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(p.StateDir); !os.IsNotExist(err) {
		t.Errorf("private state directory %s left behind (%v)", p.StateDir, err)
	}
}

// The driver limits vgpu exec asks for: hard = the memory limit, soft = the
// memory request where one below it is given (else the limit: nothing
// borrowed); devices without a memory limit get none.
func TestExecDriverLimits(t *testing.T) {
	const gi = uint64(1 << 30)
	r := &tenant.Record{Devices: []tenant.Device{
		{Index: 0, GPU: tenant.GPU{UUID: "GPU-a"}, Memory: 8 * gi, MemoryRequest: 2 * gi},
		{Index: 1, GPU: tenant.GPU{UUID: "GPU-b"}, Memory: 4 * gi},
		{Index: 2, GPU: tenant.GPU{UUID: "GPU-c"}, MemoryRequest: gi},
	}}
	ls, uuids := execLimits(r)
	if len(ls) != 2 || ls[0] != (driverlimit.Limit{UUID: "GPU-a", Soft: 2 * gi, Hard: 8 * gi}) ||
		ls[1] != (driverlimit.Limit{UUID: "GPU-b", Soft: 4 * gi, Hard: 4 * gi}) || len(uuids) != 2 || uuids[1] != "GPU-b" {
		t.Errorf("driver limits %+v on %v; want GPU-a soft 2 GiB hard 8 GiB, GPU-b 4 GiB both", ls, uuids)
	}
}

// A vgpu exec killed outright (SIGKILL: it cannot forward the signal or
// remove its entry) takes its command with it: a command left running
// would use the GPU with no entry attributing it to its limits.
func TestKilledExecKillsItsCommand(t *testing.T) {
	bin := filepath.Join(filepath.Dir(libDir(t)), "bin", "vgpu")
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(bin, "exec", "--memory-limit", "1Gi", "--driver-root", shared.Dir(), "--lib-dir", libDir(t), "--",
		"sh", "-c", `echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 60`, pidFile)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait() //nolint:errcheck // killed below
	child := 0
	for deadline := time.Now().Add(30 * time.Second); child == 0; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil {
			if _, err := fmt.Sscan(string(b), &child); err != nil {
				t.Fatalf("the command's pid file holds %q: %v", b, err)
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the command did not start in 30 s: %s", errb.String())
		}
	}
	defer unix.Kill(child, unix.SIGKILL) //nolint:errcheck // only if the test failed
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// gone, or a zombie not reaped yet (its parent was killed)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("vgpu exec was killed; its command (pid %d) still runs 10 s later", child)
		}
	}
}
