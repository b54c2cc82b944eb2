//go:build e2e

package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/setup"
)

// vgpu setup docker --remove tells the truth about what
// dockerd does. When vgpu was the only runtime, --remove takes the
// "runtimes" key out of daemon.json, and on SIGHUP dockerd keeps the old
// value of a key that is gone from the file: the runtime stays registered.
// This test pins that behaviour of the installed dockerd (20.10.24 on
// Debian 12): if a newer dockerd drops the runtime on reload, the message
// (setup.DockerRestart) must change with it.
func TestSetupDockerRemoveLastRuntime(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, "docker-remove")
	dir := privateDir(t, "docker-remove")
	cfg := filepath.Join(dir, "daemon.json")
	writeFile(t, cfg, []byte("{\n  \"debug\": false\n}\n"), 0o644)
	d := startDockerdWith(t, dir, cfg)

	if out := mustVgpu(t, "setup", "docker", "--config", cfg, "--runtime-path", e.wrapper); !strings.Contains(out, "kill -HUP") {
		t.Errorf("setup said:\n%s", out)
	}
	d.reload(t, "vgpu runtime added", func(info string) bool { return strings.Contains(info, `"vgpu"`) })

	out := mustVgpu(t, "setup", "docker", "--config", cfg, "--remove")
	if !strings.Contains(out, setup.DockerRestart) {
		t.Errorf("--remove of the last runtime did not say a restart is needed:\n%s", out)
	}
	// What the message says: a reload keeps the runtime …
	d.reload(t, "reloaded without a runtimes key", func(info string) bool { return strings.Contains(info, "default=runc") })
	if info, _ := d.docker(t, "info", "--format", "{{json .Runtimes}}"); !strings.Contains(info, `"vgpu"`) {
		t.Errorf("dockerd dropped the runtime on reload (%s): setup.DockerRestart is wrong for this dockerd", info)
	}
	// … and the way out it names without a restart works.
	writeFile(t, cfg, []byte("{\n  \"debug\": false,\n  \"runtimes\": {}\n}\n"), 0o644)
	d.reload(t, `"runtimes": {}`, func(info string) bool { return !strings.Contains(info, `"vgpu"`) })
}
