//go:build e2e

package e2e

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/cdispec"
	"github.com/vgpu-dev/vgpu/internal/setup"
)

// From package to running container in three commands: make
// install, vgpu setup <engine> (or vgpu cdi generate), then the engine's run.
// The engines here are real (dockerd, containerd, podman) on the simulated GPU.

func vgpu(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, 60*time.Second, nil, vgpuCLI(t), args...)
}

func mustVgpu(t *testing.T, args ...string) string {
	t.Helper()
	out, err := vgpu(t, args...)
	if err != nil {
		t.Fatalf("vgpu %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ---- make install ---------------------------------------------------------------------

func TestMakeInstall(t *testing.T) {
	requireRoot(t)
	need(t, "make")
	repo := repoRoot(t)
	build := os.Getenv("VGPU_BUILD")
	if build == "" {
		build = filepath.Join(repo, "build")
	}
	dest := privateDir(t, "install")
	mk := func(args ...string) string {
		t.Helper()
		return mustRun(t, 8*time.Minute, nil, "make", append([]string{"-C", repo, "--no-print-directory", "BUILD=" + build, "DESTDIR=" + dest}, args...)...)
	}
	mk("install")
	at := func(p string) string { return filepath.Join(dest, p) }

	for _, b := range []string{"vgpu-runtime", "vgpu-discover", "vgpu-hook", "vgpu"} {
		fi, err := os.Stat(at("usr/local/bin/" + b))
		if err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s not installed executable: %v", b, err)
		}
	}
	for _, l := range []struct{ name, soname string }{{"libvgpu-cuda.so", "libcuda.so.1"}, {"libvgpu-nvml.so", "libnvidia-ml.so.1"}} {
		link, err := os.Readlink(at("usr/lib/vgpu/" + l.name))
		if err != nil || !strings.HasPrefix(link, l.name+".") {
			t.Errorf("%s: want a link to the versioned file: %q %v", l.name, link, err)
			continue
		}
		f, err := elf.Open(at("usr/lib/vgpu/" + link))
		if err != nil {
			t.Errorf("%s: %v", link, err)
			continue
		}
		sonames, _ := f.DynString(elf.DT_SONAME)
		f.Close()
		if len(sonames) != 1 || sonames[0] != l.soname {
			t.Errorf("%s: SONAME %v, want %s", link, sonames, l.soname)
		}
	}
	shipped, _ := os.ReadFile(filepath.Join(repo, "configs/config.toml"))
	if got, err := os.ReadFile(at("etc/vgpu/config.toml")); err != nil || !bytes.Equal(got, shipped) {
		t.Errorf("etc/vgpu/config.toml is not configs/config.toml: %v", err)
	}
	// Both hooks directories podman reads without a containers.conf naming
	// one (podman 4 reads only the first); $PREFIX/share/... nobody reads.
	for _, dir := range setup.DefaultHooksDirs {
		for _, f := range setup.HookFiles {
			b, err := os.ReadFile(at(dir + "/" + f.Name))
			if err != nil {
				t.Errorf("hooks.d: %v", err)
				continue
			}
			var h struct {
				Hook struct {
					Path string   `json:"path"`
					Args []string `json:"args"`
				} `json:"hook"`
				Stages []string `json:"stages"`
			}
			if err := json.Unmarshal(b, &h); err != nil || h.Hook.Path != "/usr/local/bin/vgpu-hook" || len(h.Stages) != 1 || h.Stages[0] != f.Stage {
				t.Errorf("%s: %v %+v", f.Name, err, h)
			}
		}
	}
	for _, f := range []string{"runtimeclass.yaml", "node-setup-daemonset.yaml", "node-daemonset.yaml"} {
		if _, err := os.Stat(at("usr/local/share/vgpu/k8s/" + f)); err != nil {
			t.Error(err)
		}
	}
	// The unit where systemd reads units (systemd-analyze unit-paths lists
	// /usr/local/lib/systemd/system), naming files make install wrote.
	unit, err := os.ReadFile(at("usr/local/lib/systemd/system/vgpu-node.service"))
	if err != nil {
		t.Errorf("systemd unit: %v", err)
	}
	for _, line := range strings.Split(string(unit), "\n") {
		k, v, _ := strings.Cut(line, "=")
		var p string
		switch k {
		case "Documentation":
			p = strings.TrimPrefix(v, "file://")
		case "ExecStart", "ExecStopPost":
			p = strings.Fields(v)[0]
		case "Environment":
			p = strings.TrimPrefix(v, "VGPU_CONFIG=")
		default:
			continue
		}
		if _, err := os.Stat(at(p)); err != nil {
			t.Errorf("the unit's %s names %s, which make install did not write: %v", k, p, err)
		}
	}
	// Every program answers --help.
	for _, b := range []string{"vgpu", "vgpu-node", "vgpu-hook", "vgpu-runtime"} {
		out, err := run(t, 30*time.Second, nil, at("usr/local/bin/"+b), "--help")
		if err != nil || !strings.Contains(out, "vgpu") || len(out) < 200 {
			t.Errorf("%s --help: %v\n%s", b, err, out)
		}
	}
	for _, sub := range [][]string{{"setup", "docker"}, {"setup", "containerd"}, {"setup", "podman"}, {"cdi", "generate"}, {"cdi", "list"}, {"node"}, {"metrics"}} {
		out, err := run(t, 30*time.Second, nil, at("usr/local/bin/vgpu"), append(sub, "--help")...)
		if err != nil || !strings.Contains(out, "USAGE") {
			t.Errorf("vgpu %s --help: %v\n%s", strings.Join(sub, " "), err, out)
		}
	}

	// A second install keeps an edited configuration; uninstall leaves it and
	// nothing else.
	cfg := at("etc/vgpu/config.toml")
	writeFile(t, cfg, append(shipped, []byte("\n# mine\n")...), 0o644)
	if out := mk("install"); !strings.Contains(out, "keeping the existing") {
		t.Errorf("second install did not say it kept the config:\n%s", out)
	}
	if b, _ := os.ReadFile(cfg); !bytes.HasSuffix(b, []byte("# mine\n")) {
		t.Error("install overwrote an existing config.toml")
	}
	mk("uninstall")
	var left []string
	_ = filepath.Walk(dest, func(p string, fi os.FileInfo, err error) error { // it returns only what the callback does: nil
		if err == nil && !fi.IsDir() {
			left = append(left, strings.TrimPrefix(p, dest))
		}
		return nil
	})
	if len(left) != 1 || left[0] != "/etc/vgpu/config.toml" {
		t.Errorf("after uninstall: %v, want only the edited /etc/vgpu/config.toml", left)
	}
	if _, err := os.Stat(at("etc/containers")); !os.IsNotExist(err) {
		t.Errorf("uninstall left etc/containers (install made it, empty now): %v", err)
	}

	// PREFIX and the library directory: the config names where the libraries are.
	dest2 := privateDir(t, "install2")
	mustRun(t, 8*time.Minute, nil, "make", "-C", repo, "--no-print-directory", "BUILD="+build, "DESTDIR="+dest2, "PREFIX=/opt/vgpu", "VGPU_LIBDIR=/opt/vgpu/lib", "install")
	if _, err := os.Stat(filepath.Join(dest2, "opt/vgpu/lib/libvgpu-cuda.so")); err != nil {
		t.Error(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest2, "etc/vgpu/config.toml")); !bytes.Contains(b, []byte("\ndir = \"/opt/vgpu/lib\"\n")) {
		t.Errorf("config does not name /opt/vgpu/lib")
	}
	// PREFIX=/usr (a distribution package): the distribution's hooks directory.
	dest3 := privateDir(t, "install3")
	mustRun(t, 8*time.Minute, nil, "make", "-C", repo, "--no-print-directory", "BUILD="+build, "DESTDIR="+dest3, "PREFIX=/usr", "install")
	if _, err := os.Stat(filepath.Join(dest3, "usr/share/containers/oci/hooks.d", setup.HookFiles[0].Name)); err != nil {
		t.Errorf("PREFIX=/usr: %v", err)
	}
}

// ---- docker ------------------------------------------------------------------------------

// startDockerdWith starts a private dockerd reading cfgPath (which must not
// repeat the command-line settings below).
func startDockerdWith(t *testing.T, dir, cfgPath string) *dockerd {
	t.Helper()
	need(t, "dockerd", "docker", "containerd", "runc")
	sock := filepath.Join(dir, "docker.sock")
	d := startDaemon(t, "dockerd", filepath.Join(dir, "dockerd.log"), dir, nil, "dockerd",
		"--config-file", cfgPath,
		"--iptables=false", "--ip6tables=false", "--bridge=none", "--ip-forward=false", "--ip-masq=false",
		"--userland-proxy=false",
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"), "--host", "unix://"+sock,
		"--storage-driver", "overlay2", "--log-level", "warn")
	dd := &dockerd{daemon: d, sock: sock}
	d.waitFor(t, 60*time.Second, func() error {
		_, err := run(t, 5*time.Second, nil, "docker", "-H", "unix://"+sock, "version")
		return err
	})
	return dd
}

// reload sends SIGHUP and waits until docker info shows what ok wants.
func (d *dockerd) reload(t *testing.T, what string, ok func(info string) bool) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := pollAt(30*time.Second, 200*time.Millisecond, func() error {
		info, _ := d.docker(t, "info", "--format", "{{json .Runtimes}} default={{.DefaultRuntime}}")
		return holds(ok(info), "docker info says %s", info)
	}); err != nil {
		t.Fatalf("dockerd did not reload (%s): %v", what, err)
	}
}

const daemonJSON = `{
  "max-concurrent-downloads": 2,
  "runtimes": {
    "other": {
      "path": "runc",
      "runtimeArgs": ["--debug"]
    }
  },
  "features": { "buildkit": false }
}
`

func TestSetupDocker(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "setup-docker")
	dir := privateDir(t, "docker")
	cfg := filepath.Join(dir, "daemon.json")
	writeFile(t, cfg, []byte(daemonJSON), 0o644)
	d := startDockerdWith(t, dir, cfg)
	if out, err := d.docker(t, "import", f.rootfsTar, "vgpu-e2e/bb:1"); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}

	// --dry-run: a diff, no write.
	out := mustVgpu(t, "setup", "docker", "--config", cfg, "--runtime-path", e.wrapper, "--dry-run")
	if !strings.Contains(out, "+    \"vgpu\": {") || !strings.HasPrefix(out, "--- "+cfg) {
		t.Errorf("dry run printed:\n%s", out)
	}
	if b, _ := os.ReadFile(cfg); string(b) != daemonJSON {
		t.Fatal("--dry-run wrote the file")
	}

	out = mustVgpu(t, "setup", "docker", "--config", cfg, "--runtime-path", e.wrapper)
	if !strings.Contains(out, "updated "+cfg) || !strings.Contains(out, "kill -HUP") {
		t.Errorf("setup said:\n%s", out)
	}
	added, _ := os.ReadFile(cfg)
	for _, line := range strings.Split(strings.TrimSpace(daemonJSON), "\n") {
		if !bytes.Contains(added, []byte(strings.TrimSuffix(line, ","))) {
			t.Errorf("line %q of the original is gone:\n%s", line, added)
		}
	}
	if b, _ := os.ReadFile(cfg + setup.BackupSuffix); string(b) != daemonJSON {
		t.Errorf("backup holds %q", b)
	}
	if out := mustVgpu(t, "setup", "docker", "--config", cfg, "--runtime-path", e.wrapper); !strings.Contains(out, "nothing to do") {
		t.Errorf("second run said:\n%s", out)
	}
	if b, _ := os.ReadFile(cfg); !bytes.Equal(b, added) {
		t.Error("second run changed the file")
	}

	d.reload(t, "vgpu runtime added", func(info string) bool { return strings.Contains(info, `"vgpu"`) && strings.Contains(info, `"other"`) })
	t.Run("run", func(t *testing.T) {
		out, err := d.docker(t, "run", "--rm", "--runtime=vgpu", "--network=none",
			"-e", "VGPU_VISIBLE_DEVICES=0", "-e", "VGPU_MEMORY_LIMIT=1Gi", "vgpu-e2e/bb:1", "/bin/sh", "-c", gpuPrograms)
		if err != nil {
			t.Fatalf("docker run: %v\n%s", err, out)
		}
		checkLimited(t, parseReport(t, out), "1073741824")
		checkGPUPrograms(t, out, 1<<30)
	})

	// --remove gives the original back, byte for byte.
	mustVgpu(t, "setup", "docker", "--config", cfg, "--remove")
	if b, _ := os.ReadFile(cfg); string(b) != daemonJSON {
		t.Errorf("after --remove:\n%s\nwant the original:\n%s", b, daemonJSON)
	}
	d.reload(t, "vgpu runtime removed", func(info string) bool {
		return !strings.Contains(info, `"vgpu"`) && strings.Contains(info, `"other"`)
	})
	if out := mustVgpu(t, "setup", "docker", "--config", cfg, "--remove"); !strings.Contains(out, "nothing to do") {
		t.Errorf("second --remove said:\n%s", out)
	}

	t.Run("default", func(t *testing.T) {
		mustVgpu(t, "setup", "docker", "--config", cfg, "--runtime-path", e.wrapper, "--default")
		d.reload(t, "default runtime", func(info string) bool { return strings.Contains(info, "default=vgpu") })
		out, err := d.docker(t, "run", "--rm", "--network=none",
			"-e", "VGPU_VISIBLE_DEVICES=0", "-e", "VGPU_MEMORY_LIMIT=1Gi", "vgpu-e2e/bb:1", "/bin/probe")
		if err != nil {
			t.Fatalf("docker run: %v\n%s", err, out)
		}
		checkLimited(t, parseReport(t, out), "1073741824")
		// --remove: the default goes back to runc (dockerd keeps a removed
		// key's old value on SIGHUP), everything else as it was.
		mustVgpu(t, "setup", "docker", "--config", cfg, "--remove")
		b, _ := os.ReadFile(cfg)
		var got, want map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s after --remove: %v\n%s", cfg, err, b)
		}
		if err := json.Unmarshal([]byte(daemonJSON), &want); err != nil {
			t.Fatal(err)
		}
		want["default-runtime"] = "runc"
		if g, _ := json.Marshal(got); string(g) != func() string { w, _ := json.Marshal(want); return string(w) }() {
			t.Errorf("after --remove:\n%s", b)
		}
		d.reload(t, "vgpu runtime and default removed", func(info string) bool {
			return !strings.Contains(info, `"vgpu"`) && strings.Contains(info, "default=runc")
		})
		out, err = d.docker(t, "run", "--rm", "--network=none", "-e", "VGPU_VISIBLE_DEVICES=0", "vgpu-e2e/bb:1", "/bin/probe")
		if err != nil {
			t.Fatalf("docker run after --remove: %v\n%s", err, out)
		}
		if r := parseReport(t, out); r.QuotaErr != "ENOENT" {
			t.Errorf("vgpu still applied after --remove: %+v", r)
		}
	})
}

func TestSetupDockerBadJSON(t *testing.T) {
	requireRoot(t)
	dir := privateDir(t, "docker-bad")
	cfg := filepath.Join(dir, "daemon.json")
	bad := "{\n  \"debug\": true,\n  \"log-level\": \"info\"\n  \"runtimes\": {}\n}\n"
	writeFile(t, cfg, []byte(bad), 0o644)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(cfg, old, old); err != nil {
		t.Fatal(err)
	}
	out, err := vgpu(t, "setup", "docker", "--config", cfg, "--runtime-path", "/usr/bin/vgpu-runtime")
	if err == nil || !strings.Contains(out, "line 4") || !strings.Contains(out, cfg) {
		t.Errorf("err %v, want a failure naming %s line 4:\n%s", err, cfg, out)
	}
	fi, _ := os.Stat(cfg)
	if b, _ := os.ReadFile(cfg); string(b) != bad || !fi.ModTime().Equal(old) {
		t.Error("invalid daemon.json was touched")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files written next to it: %v", ents)
	}
}

// ---- containerd --------------------------------------------------------------------------

const containerdTOML = `# Hand-written; the comments must survive.
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs" # the default

  # runc, with the systemd cgroup driver as kubelet wants
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
`

func TestSetupContainerd(t *testing.T) {
	requireRoot(t)
	need(t, "containerd")
	e := newEnv(t, "setup-ctrd")
	dir := privateDir(t, "ctrd-setup")
	dump := func(cfg string) string {
		t.Helper()
		return mustRun(t, 60*time.Second, nil, "containerd", "--config", cfg, "config", "dump")
	}
	wantRuntime := func(t *testing.T, dumped string) {
		t.Helper()
		for _, s := range []string{
			`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.vgpu]`,
			`runtime_type = "io.containerd.runc.v2"`,
			`BinaryName = "` + e.wrapper + `"`,
			`pod_annotations = ["vgpu.io/*"]`,
		} {
			if !strings.Contains(dumped, s) {
				t.Errorf("containerd config dump lacks %s:\n%s", s, dumped)
			}
		}
	}

	t.Run("missing file", func(t *testing.T) {
		cfg := filepath.Join(dir, "new", "config.toml")
		out := mustVgpu(t, "setup", "containerd", "--config", cfg, "--runtime-path", e.wrapper)
		if !strings.Contains(out, "created "+cfg) || !strings.Contains(out, "restart containerd") {
			t.Errorf("setup said:\n%s", out)
		}
		wantRuntime(t, dump(cfg))
		// containerd's defaults, importing vgpu's drop-in beside it.
		dropIn := filepath.Join(dir, "new", "conf.d", setup.DropInName)
		if !strings.Contains(out, "created "+dropIn) {
			t.Errorf("setup did not say it created %s:\n%s", dropIn, out)
		}
		b, _ := os.ReadFile(cfg)
		if !bytes.Contains(b, []byte(`"`+dropIn+`"`)) || !bytes.Contains(b, []byte("[plugins.")) {
			t.Errorf("the new file is not containerd's defaults importing %s:\n%s", dropIn, b)
		}
	})

	t.Run("existing file", func(t *testing.T) {
		cfg := filepath.Join(dir, "config.toml")
		writeFile(t, cfg, []byte(containerdTOML), 0o644)
		mustVgpu(t, "setup", "containerd", "--config", cfg, "--runtime-path", e.wrapper, "--default")
		dumped := dump(cfg)
		wantRuntime(t, dumped)
		if !strings.Contains(dumped, `default_runtime_name = "vgpu"`) {
			t.Errorf("no default_runtime_name = \"vgpu\":\n%s", dumped)
		}
		b, _ := os.ReadFile(cfg)
		for _, c := range []string{"# Hand-written; the comments must survive.", "# the default", "# runc, with the systemd cgroup driver as kubelet wants"} {
			if !bytes.Contains(b, []byte(c)) {
				t.Errorf("comment %q lost:\n%s", c, b)
			}
		}
		// runc's systemd cgroup driver is followed.
		if !strings.Contains(dumped[strings.Index(dumped, "runtimes.vgpu.options]"):], "SystemdCgroup = true") {
			t.Errorf("vgpu runtime does not follow runc's SystemdCgroup:\n%s", dumped)
		}
		if out := mustVgpu(t, "setup", "containerd", "--config", cfg, "--runtime-path", e.wrapper, "--default"); !strings.Contains(out, "nothing to do") {
			t.Errorf("second run said:\n%s", out)
		}
		if b2, _ := os.ReadFile(cfg); !bytes.Equal(b, b2) {
			t.Error("second run changed the file")
		}
		// --remove (the default runtime goes back to runc, containerd's own default).
		mustVgpu(t, "setup", "containerd", "--config", cfg, "--remove")
		after, _ := os.ReadFile(cfg)
		if strings.Contains(string(after), "vgpu") {
			t.Errorf("vgpu left after --remove:\n%s", after)
		}
		if _, err := os.Stat(filepath.Join(dir, "conf.d", setup.DropInName)); !os.IsNotExist(err) {
			t.Errorf("drop-in left after --remove: %v", err)
		}
		dumped = dump(cfg)
		if strings.Contains(dumped, "runtimes.vgpu") || !strings.Contains(dumped, `default_runtime_name = "runc"`) {
			t.Errorf("after --remove:\n%s", dumped)
		}
		// Without --default, remove restores the file byte for byte.
		writeFile(t, cfg, []byte(containerdTOML), 0o644)
		mustVgpu(t, "setup", "containerd", "--config", cfg, "--runtime-path", e.wrapper)
		mustVgpu(t, "setup", "containerd", "--config", cfg, "--remove")
		if b, _ := os.ReadFile(cfg); string(b) != containerdTOML {
			t.Errorf("after --remove:\n%s\nwant:\n%s", b, containerdTOML)
		}
	})
}

// ---- podman hooks.d ----------------------------------------------------------------------

func TestSetupPodman(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "setup-podman")
	p := newPodman(t)
	out := mustVgpu(t, "setup", "podman", "--hooks-dir", p.hooks, "--hook-path", e.hook, "--vgpu-config", e.config)
	if !strings.Contains(out, "created") {
		t.Errorf("setup said:\n%s", out)
	}
	if out := mustVgpu(t, "setup", "podman", "--hooks-dir", p.hooks, "--hook-path", e.hook, "--vgpu-config", e.config); !strings.Contains(out, "nothing to do") {
		t.Errorf("second run said:\n%s", out)
	}
	if out, err := p.podman(t, "import", f.rootfsTar, imageRef); err != nil {
		t.Fatalf("podman import: %v\n%s", err, out)
	}
	args := []string{"run", "--rm", "--network=none", "--annotation", "vgpu.io/visible-devices=0", "--annotation", "vgpu.io/memory-limit=1Gi"}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0"} {
		args = append(args, "--device", filepath.Join(e.sim.DevDir(), n)+":/dev/"+n)
	}
	out, err := p.podman(t, append(args, imageRef, "/bin/sh", "-c", gpuPrograms)...)
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	checkLimited(t, parseReport(t, out), "1073741824")
	checkGPUPrograms(t, out, 1<<30)
	if ents := stateLeft(e.stateDir); len(ents) != 0 {
		t.Errorf("poststop left state: %v", ents)
	}
	// A container without the annotation is not touched.
	out, err = p.podman(t, "run", "--rm", "--network=none", "-e", "VGPU_VISIBLE_DEVICES=0", imageRef, "/bin/probe")
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	if r := parseReport(t, out); r.QuotaErr != "ENOENT" {
		t.Errorf("unannotated container got a quota: %+v", r)
	}
	mustVgpu(t, "setup", "podman", "--hooks-dir", p.hooks, "--remove")
	for _, h := range setup.HookFiles {
		if _, err := os.Stat(filepath.Join(p.hooks, h.Name)); !os.IsNotExist(err) {
			t.Errorf("%s left after --remove: %v", h.Name, err)
		}
	}
	out, err = p.podman(t, append(args, imageRef, "/bin/probe")...)
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	if r := parseReport(t, out); r.QuotaErr != "ENOENT" {
		t.Errorf("hooks still run after --remove: %+v", r)
	}
}

// ---- CDI ---------------------------------------------------------------------------------

// cdiDir is where podman 4.3 reads CDI specs from (it has no setting for it);
// the test's spec goes there under a name of its own and is removed after.
const cdiDir = "/var/run/cdi"

func TestCDI(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "cdi")
	p := newPodman(t)

	// Generate to a private file first: the CDI library must accept it.
	priv := filepath.Join(e.dir, "cdi", "vgpu.yaml")
	mustVgpu(t, "cdi", "generate", "--vgpu-config", e.config, "--hook-path", e.hook, "--output", priv)
	s, err := cdispec.Validate(priv)
	if err != nil {
		t.Fatalf("the CDI library rejects the generated spec: %v", err)
	}
	for _, name := range []string{"0", "1", "all", e.sim.Devices()[0].UUID} {
		if name == "" {
			continue
		}
		if s.GetDevice(name) == nil {
			t.Errorf("no device %q in the spec", name)
		}
	}
	stdout := mustVgpu(t, "cdi", "generate", "--vgpu-config", e.config, "--hook-path", e.hook, "-o", "-")
	if b, _ := os.ReadFile(priv); stdout != string(b) {
		t.Errorf("-o - differs from the file")
	}

	createdDir := false
	if _, err := os.Stat(cdiDir); os.IsNotExist(err) {
		createdDir = true
	}
	name := fmt.Sprintf("vgpu-e2e-%d.yaml", os.Getpid())
	mustVgpu(t, "cdi", "generate", "--vgpu-config", e.config, "--hook-path", e.hook, "--output", filepath.Join(cdiDir, name))
	t.Cleanup(func() {
		os.Remove(filepath.Join(cdiDir, name))
		if createdDir {
			os.Remove(cdiDir) // only when empty
		}
	})
	list := mustVgpu(t, "cdi", "list", "--spec-dir", cdiDir)
	for _, d := range []string{"vgpu.io/gpu=0", "vgpu.io/gpu=1", "vgpu.io/gpu=all"} {
		if !strings.Contains(list, d) || !strings.Contains(list, name) {
			t.Errorf("vgpu cdi list lacks %s in %s:\n%s", d, name, list)
		}
	}

	if out, err := p.podman(t, "import", f.rootfsTar, imageRef); err != nil {
		t.Fatalf("podman import: %v\n%s", err, out)
	}
	t.Run("gpu0", func(t *testing.T) {
		out, err := p.podman(t, "run", "--rm", "--network=none", "--device", "vgpu.io/gpu=0",
			"-e", "VGPU_MEMORY_LIMIT=1Gi", imageRef, "/bin/sh", "-c", gpuPrograms)
		if err != nil {
			t.Fatalf("podman run --device vgpu.io/gpu=0: %v\n%s", err, out)
		}
		checkLimited(t, parseReport(t, out), "1073741824")
		checkGPUPrograms(t, out, 1<<30)
	})
	t.Run("all-annotation", func(t *testing.T) {
		// (podman splits --annotation values at commas: per-device limits go in env.)
		out, err := p.podman(t, "run", "--rm", "--network=none", "--device", "vgpu.io/gpu=all",
			"-e", "VGPU_MEMORY_LIMIT=0=1Gi,1=2Gi", "--annotation", "vgpu.io/compute-limit=50", imageRef, "/bin/probe")
		if err != nil {
			t.Fatalf("podman run --device vgpu.io/gpu=all: %v\n%s", err, out)
		}
		r := parseReport(t, out)
		if !strings.Contains(r.Quota, "\ndevice 0 GPU-") || !strings.Contains(r.Quota, " memory=1073741824 compute=50 phase=0\n") ||
			!strings.Contains(r.Quota, "\ndevice 1 GPU-") || !strings.Contains(r.Quota, " memory=2147483648 compute=50 phase=0\n") {
			t.Errorf("quota:\n%s", r.Quota)
		}
		for _, d := range []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"} {
			if got := r.Devs[d]; got != "ENXIO" && got != "ok" {
				t.Errorf("%s: %q", d, got)
			}
		}
	})
	t.Run("conflicting-selection", func(t *testing.T) {
		out, err := p.podman(t, "run", "--rm", "--network=none", "--device", "vgpu.io/gpu=0",
			"-e", "VGPU_VISIBLE_DEVICES=1", imageRef, "/bin/probe")
		// The hook refuses: GPU 1 is not the one CDI gave (under the hook's
		// device cgroup the simulator does not even show GPU 1).
		if err == nil || !strings.Contains(out, "vgpu-hook:") || !strings.Contains(out, `VGPU_VISIBLE_DEVICES="1"`) {
			t.Errorf("err %v, want the hook's refusal:\n%s", err, out)
		}
	})
	if ents := stateLeft(e.stateDir); len(ents) != 0 {
		t.Errorf("poststop left state: %v", ents)
	}
}
