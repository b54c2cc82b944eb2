//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ---- dockerd ---------------------------------------------------------------

type dockerd struct {
	*daemon
	sock string
}

// startDockerd starts a private dockerd with the given extra runtimes
// (name → path) and waits until it answers.
func startDockerd(t *testing.T, runtimes map[string]string) *dockerd {
	t.Helper()
	need(t, "dockerd", "docker", "containerd", "runc")
	dir := privateDir(t, "docker")
	rt := map[string]any{}
	for name, path := range runtimes {
		rt[name] = map[string]any{"path": path}
	}
	cfg, _ := json.Marshal(map[string]any{"runtimes": rt})
	cfgPath := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return startDockerdWith(t, dir, cfgPath)
}

func (d *dockerd) docker(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, 90*time.Second, nil, "docker", append([]string{"-H", "unix://" + d.sock}, args...)...)
}

// ---- containerd ------------------------------------------------------------

type containerd struct {
	*daemon
	addr string
}

func startContainerd(t *testing.T) *containerd {
	t.Helper()
	need(t, "containerd", "ctr", "runc")
	dir := privateDir(t, "ctrd")
	addr := filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = %q
[metrics]
  address = ""
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), addr, addr+".ttrpc", filepath.Join(dir, "debug.sock"))
	cfgPath := filepath.Join(dir, "config.toml")
	writeFile(t, cfgPath, []byte(cfg), 0o644)
	d := startDaemon(t, "containerd", filepath.Join(dir, "containerd.log"), dir, nil, "containerd", "--config", cfgPath)
	c := &containerd{daemon: d, addr: addr}
	d.waitFor(t, 60*time.Second, func() error {
		_, err := run(t, 5*time.Second, nil, "ctr", "--address", addr, "version")
		return err
	})
	return c
}

func (c *containerd) ctr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, 90*time.Second, nil, "ctr", append([]string{"--address", c.addr, "--namespace", "vgpu-e2e"}, args...)...)
}

// ---- podman ----------------------------------------------------------------

type podman struct {
	dir   string
	env   []string
	hooks string
}

// newPodman gives podman private storage and a containers.conf with
// default_ulimits = [] (the default nofile limit is above this machine's).
func newPodman(t *testing.T) *podman {
	t.Helper()
	need(t, "podman", "runc")
	dir := privateDir(t, "podman")
	conf := filepath.Join(dir, "containers.conf")
	writeFile(t, conf, []byte("[containers]\ndefault_ulimits = []\n[engine]\nevents_logger = \"file\"\ncgroup_manager = \"cgroupfs\"\n"), 0o644)
	hooks := filepath.Join(dir, "hooks.d")
	mkdirAll(t, hooks, 0o755)
	p := &podman{dir: dir, env: []string{"CONTAINERS_CONF=" + conf, "TMPDIR=" + filepath.Join(dir, "tmp")}, hooks: hooks}
	mkdirAll(t, filepath.Join(dir, "tmp"), 0o755)
	t.Cleanup(func() {
		// Clean-up: what podman cannot remove goes with the directory
		// (privateDir unmounts and removes it).
		_, _ = run(t, 60*time.Second, p.env, "podman", p.global("rm", "-a", "-f")...)
		_, _ = run(t, 60*time.Second, p.env, "podman", p.global("system", "reset", "-f")...)
		killStragglers(dir)
	})
	return p
}

func (p *podman) global(args ...string) []string {
	return append([]string{
		"--root", filepath.Join(p.dir, "root"), "--runroot", filepath.Join(p.dir, "runroot"),
		"--tmpdir", filepath.Join(p.dir, "tmp"),
		"--storage-driver", "vfs", "--runtime", "runc", "--hooks-dir", p.hooks,
		"--cgroup-manager", "cgroupfs", "--events-backend", "file",
	}, args...)
}

func (p *podman) podman(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, 120*time.Second, p.env, "podman", p.global(args...)...)
}

// ---- plain engines: the harness itself works --------------------------------

func TestPlainEngines(t *testing.T) {
	f := shared(t)
	t.Run("runc", func(t *testing.T) {
		need(t, "runc")
		dir := privateDir(t, "runc")
		b := makeBundle(t, filepath.Join(dir, "bundle"), f.rootfs, []string{"/bin/probe"}, nil, nil)
		out := mustRun(t, 60*time.Second, nil, "runc", "--root", filepath.Join(dir, "state"), "run", "-b", b, "plain-runc")
		r := parseReport(t, out)
		if r.QuotaErr != "ENOENT" {
			t.Errorf("quota: %+v", r)
		}
	})
	t.Run("docker", func(t *testing.T) {
		d := startDockerd(t, nil)
		if out, err := d.docker(t, "import", f.rootfsTar, "vgpu-e2e/bb:1"); err != nil {
			t.Fatalf("docker import: %v\n%s", err, out)
		}
		out, err := d.docker(t, "run", "--rm", "--network=none", "vgpu-e2e/bb:1", "/bin/probe")
		if err != nil {
			t.Fatalf("docker run: %v\n%s", err, out)
		}
		parseReport(t, out)
	})
	t.Run("containerd", func(t *testing.T) {
		c := startContainerd(t)
		if out, err := c.ctr(t, "image", "import", "--no-unpack=false", f.archive); err != nil {
			t.Fatalf("ctr import: %v\n%s", err, out)
		}
		out, err := c.ctr(t, "run", "--rm", imageRef, "plain-ctr", "/bin/probe")
		if err != nil {
			t.Fatalf("ctr run: %v\n%s", err, out)
		}
		parseReport(t, out)
	})
	t.Run("podman", func(t *testing.T) {
		p := newPodman(t)
		if out, err := p.podman(t, "import", f.rootfsTar, imageRef); err != nil {
			t.Fatalf("podman import: %v\n%s", err, out)
		}
		out, err := p.podman(t, "run", "--rm", "--network=none", imageRef, "/bin/probe")
		if err != nil {
			t.Fatalf("podman run: %v\n%s", err, out)
		}
		parseReport(t, out)
	})
}

var _ = strings.TrimSpace
