//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/setup"
)

// What a new user meets on the engines of this machine as installed, with
// their shipped configuration: podman's own hooks directories (no
// --hooks-dir), containerd's shipped config.toml with the CRI plugin on.

// defaultHooksLock serialises the tests that write podman's real hooks
// directories, across test binaries (other worktrees' e2e runs too).
const defaultHooksLock = "/run/vgpu-e2e-default-hooks.lock"

// lockDefaultHooks takes defaultHooksLock for the rest of the test and puts
// back, when the test ends, whatever the hooks files held before (an installed
// vgpu's hooks stay as they were; directories the test made go).
func lockDefaultHooks(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(defaultHooksLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	type saved struct {
		path string
		data []byte // nil: absent
	}
	var files []saved
	var madeDirs []string
	for _, dir := range setup.DefaultHooksDirs {
		for d := dir; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
				madeDirs = append(madeDirs, d) // deepest first
			}
		}
		for _, h := range setup.HookFiles {
			for _, p := range []string{filepath.Join(dir, h.Name), filepath.Join(dir, h.Name+setup.BackupSuffix)} {
				b, err := os.ReadFile(p)
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
				files = append(files, saved{p, b})
			}
		}
	}
	t.Cleanup(func() {
		for _, s := range files {
			if s.data == nil {
				os.Remove(s.path)
			} else if err := os.WriteFile(s.path, s.data, 0o644); err != nil {
				t.Errorf("restoring %s: %v", s.path, err)
			}
		}
		for _, d := range madeDirs {
			os.Remove(d) // only when empty
		}
		// Clean-up: closing the file below releases the lock anyway.
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// podman as installed reads its own hooks directories: vgpu setup podman
// with no --hooks-dir must put the hook where this podman runs it, and the
// annotated container must see its GPU. Other tests' podman runs pass
// --hooks-dir (which replaces the defaults) and the hook runs only for the
// annotation, so they do not see it.
func TestSetupPodmanDefaultHooksDir(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "setup-podman-default")
	p := newPodman(t)
	lockDefaultHooks(t)
	// The containers.conf podman reads here names no hooks_dir (newPodman's),
	// so vgpu setup falls back on the defaults, as on a fresh Debian 12.
	out, err := run(t, 60*time.Second, p.env, vgpuCLI(t), "setup", "podman", "--hook-path", e.hook, "--vgpu-config", e.config)
	if err != nil {
		t.Fatalf("vgpu setup podman: %v\n%s", err, out)
	}
	for _, dir := range setup.DefaultHooksDirs {
		if !strings.Contains(out, filepath.Join(dir, setup.HookFiles[0].Name)) {
			t.Errorf("setup did not write into %s:\n%s", dir, out)
		}
	}
	// podman without --hooks-dir.
	global := p.global()
	for i := 0; i < len(global); i++ {
		if global[i] == "--hooks-dir" {
			global = append(global[:i:i], global[i+2:]...)
			break
		}
	}
	pm := func(args ...string) (string, error) {
		return run(t, 120*time.Second, p.env, "podman", append(append([]string(nil), global...), args...)...)
	}
	if out, err := pm("import", f.rootfsTar, imageRef); err != nil {
		t.Fatalf("podman import: %v\n%s", err, out)
	}
	args := []string{"run", "--rm", "--network=none", "--annotation", "vgpu.io/visible-devices=0", "--annotation", "vgpu.io/memory-limit=1Gi"}
	// The nodes the docs list, from the simulated GPU's directory.
	for _, n := range strings.Fields(strings.ReplaceAll(discover.DeviceFlags(0), "--device", "")) {
		args = append(args, "--device", filepath.Join(e.sim.DevDir(), filepath.Base(n))+":"+n)
	}
	out, err = pm(append(args, imageRef, "/bin/probe")...)
	if err != nil {
		t.Fatalf("podman run (its own hooks directories): %v\n%s", err, out)
	}
	checkLimited(t, parseReport(t, out), "1073741824")

	out, err = run(t, 60*time.Second, p.env, vgpuCLI(t), "setup", "podman", "--remove")
	if err != nil {
		t.Fatalf("vgpu setup podman --remove: %v\n%s", err, out)
	}
	for _, dir := range setup.DefaultHooksDirs {
		for _, h := range setup.HookFiles {
			if _, err := os.Stat(filepath.Join(dir, h.Name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s left in %s after --remove: %v", h.Name, dir, err)
			}
		}
	}
}

// containerd as installed, on the config.toml its package ships (Debian 12's
// 1.6, which leaves the runc runtime to containerd's built-in defaults):
// after vgpu setup containerd the CRI plugin still loads, with the runtime
// class vgpu beside runc; after --remove too.
func TestSetupContainerdKeepsCRI(t *testing.T) {
	requireRoot(t)
	need(t, "containerd", "ctr")
	e := newEnv(t, "setup-ctrd-cri")
	shipped, err := os.ReadFile("../../internal/setup/testdata/containerd/debian12-1.6.in.toml")
	if err != nil {
		t.Fatal(err)
	}
	version, rest, ok := bytes.Cut(shipped, []byte("\n"))
	if !ok || string(version) != "version = 2" {
		t.Fatalf("the shipped config does not start with version = 2:\n%s", shipped)
	}
	dir := privateDir(t, "ctrd-cri")
	addr := filepath.Join(dir, "containerd.sock")
	// The shipped file, with this test's own paths and sockets.
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = %q
[metrics]
  address = ""
%s`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), addr, addr+".ttrpc", filepath.Join(dir, "debug.sock"), rest)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	criOK := func(t *testing.T, when string, wantVgpu bool) {
		t.Helper()
		d := startDaemon(t, "containerd", filepath.Join(dir, "containerd-"+strings.ReplaceAll(when, " ", "-")+".log"), dir, nil, "containerd", "--config", cfgPath)
		d.waitFor(t, 60*time.Second, func() error {
			_, err := run(t, 5*time.Second, nil, "ctr", "--address", addr, "version")
			return err
		})
		out := mustRun(t, 30*time.Second, nil, "ctr", "--address", addr, "plugins", "ls")
		var line string
		for _, l := range strings.Split(out, "\n") {
			// TYPE ID PLATFORMS STATUS
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "io.containerd.grpc.v1" && f[1] == "cri" {
				line = l
			}
		}
		if f := strings.Fields(line); len(f) < 3 || f[len(f)-1] != "ok" {
			b, _ := os.ReadFile(d.log)
			t.Errorf("%s: the CRI plugin is not ok: %q\n%s", when, line, b)
		}
		dumped := mustRun(t, 30*time.Second, nil, "containerd", "--config", cfgPath, "config", "dump")
		for _, rt := range []string{"runc", setup.RuntimeName} {
			has := strings.Contains(dumped, `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.`+rt+`]`)
			if want := rt == "runc" || wantVgpu; has != want {
				t.Errorf("%s: runtime %s in the config: %v, want %v", when, rt, has, want)
			}
		}
		d.stop(t)
	}
	criOK(t, "before setup", false)
	mustVgpu(t, "setup", "containerd", "--config", cfgPath, "--runtime-path", e.wrapper)
	criOK(t, "after setup", true)
	mustVgpu(t, "setup", "containerd", "--config", cfgPath, "--remove")
	criOK(t, "after remove", false)
}

// Messages a new user meets when a step before was missed: each names the
// setting or path, the value and the fix, at the command that can say so.
func TestNewcomerMessages(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, "newcomer-msgs")
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, text []byte) string {
		p := filepath.Join(e.dir, name)
		if err := os.WriteFile(p, text, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// vgpu cdi generate with no stand-in libraries where library.dir says:
	// refused at once, not at the first container's start in runc.
	noLib := write("nolib.toml", bytes.Replace(cfg, []byte("[library]\ndir = "), []byte("[library]\ndir = \"/nonexistent/vgpu\"\n#"), 1))
	out, err := vgpu(t, "cdi", "generate", "--vgpu-config", noLib, "--hook-path", e.hook, "-o", "-")
	if err == nil || !strings.Contains(out, `library.dir = "/nonexistent/vgpu"`) || !strings.Contains(out, noLib) || !strings.Contains(out, "make install") {
		t.Errorf("cdi generate with a missing library.dir: %v\n%s", err, out)
	}
	// A host without the driver's nodes: the message names the node and the fix.
	noDev := write("nodev.toml", bytes.Replace(cfg, []byte("dev_root = "), []byte("dev_root = \"/nonexistent/dev\"\n#"), 1))
	out, err = vgpu(t, "cdi", "generate", "--vgpu-config", noDev, "--hook-path", e.hook, "-o", "-")
	if err == nil || !strings.Contains(out, "/nonexistent/dev") || !strings.Contains(out, "nvidiactl") || !strings.Contains(out, "driver loaded") {
		t.Errorf("cdi generate without device nodes: %v\n%s", err, out)
	}
}
