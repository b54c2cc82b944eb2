package hook

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/config"
)

// withStateDir points the hook at a configuration whose state_dir is a
// fresh temporary directory, and returns that directory.
func withStateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, []byte("state_dir = \""+state+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(config.PathEnv, conf)
	return state
}

// bundle writes config.json into a fresh bundle directory.
func bundle(t *testing.T, doc string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func stateJSON(t *testing.T, id, bundle string) string {
	t.Helper()
	b, err := json.Marshal(specs.State{Version: "1.2.0", ID: id, Bundle: bundle, Pid: 1})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runHook runs vgpu-hook's Main and returns its exit code and stderr.
func runHook(args []string, stdin string) (int, string) {
	var stderr strings.Builder
	code := Main(args, strings.NewReader(stdin), &stderr)
	return code, stderr.String()
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// Bad invocations exit non-zero with one line that says what is wrong.
func TestMainRefusesBadInvocations(t *testing.T) {
	withStateDir(t)
	good := stateJSON(t, "c1", t.TempDir())
	for _, c := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"no stage", nil, good, "usage: vgpu-hook"},
		{"two args, not --cdi", []string{"createContainer", "--other"}, good, "usage: vgpu-hook"},
		{"not JSON", []string{"poststop"}, "{", "reading the OCI state from stdin"},
		{"no id", []string{"poststop"}, `{"bundle":"/b"}`, "without id or bundle"},
		{"no bundle", []string{"poststop"}, `{"id":"c1"}`, "without id or bundle"},
		{"unknown stage", []string{"prestop"}, good, `unknown stage "prestop"`},
		{"id with a slash", []string{"poststop"}, stateJSON(t, "a/b", "/b"), `bad container id "a/b"`},
		{"id ..", []string{"poststop"}, stateJSON(t, "..", "/b"), `bad container id ".."`},
	} {
		code, stderr := runHook(c.args, c.stdin)
		if code == 0 || !strings.HasPrefix(stderr, "vgpu-hook: ") || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want non-zero and one line with %q", c.name, code, stderr, c.want)
		}
	}
}

// poststop removes the container's own state directory, under the
// configured state_dir, and nothing beside it.
func TestPoststopRemovesOwnState(t *testing.T) {
	state := withStateDir(t)
	for _, id := range []string{"c1", "c2"} {
		if err := os.MkdirAll(filepath.Join(state, id, "shared"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if code, stderr := runHook([]string{"poststop"}, stateJSON(t, "c1", "/b")); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := entries(t, state); len(got) != 1 || got[0] != "c2" {
		t.Errorf("state_dir holds %q, want only c2", got)
	}
	// Again (the engine may run poststop twice): nothing there is no error.
	if code, stderr := runHook([]string{"poststop"}, stateJSON(t, "c1", "/b")); code != 0 {
		t.Errorf("second poststop: exit %d: %s", code, stderr)
	}
}

// createContainer for a container that asks for no GPU, or whose spec the
// CDI hook or vgpu-runtime handles, does nothing and lets it start.
func TestCreateNothingToDo(t *testing.T) {
	state := withStateDir(t)
	cdi := `{"ociVersion":"1.2.0","process":{"env":["VGPU_MEMORY_LIMIT=lots"]},"root":{"path":"rootfs"},
	  "hooks":{"createContainer":[{"path":"/usr/bin/vgpu-hook","args":["vgpu-hook","createContainer","--cdi"]}]}}`
	for name, doc := range map[string]string{
		"no GPU asked":         `{"ociVersion":"1.2.0","process":{"env":["PATH=/bin"]},"root":{"path":"rootfs"}}`,
		"edited by the shim":   `{"ociVersion":"1.2.0","process":{"env":["VGPU_MEMORY_LIMIT=lots"]},"root":{"path":"rootfs"},"annotations":{"vgpu.io/injected":"c1"}}`,
		"the CDI hook does it": cdi,
	} {
		if code, stderr := runHook([]string{"createContainer"}, stateJSON(t, "c1", bundle(t, doc))); code != 0 {
			t.Errorf("%s: exit %d: %s", name, code, stderr)
		}
	}
	if got := entries(t, state); len(got) != 0 {
		t.Errorf("state_dir holds %q, want nothing", got)
	}
}

// A spec vgpu edited for another container, or a bad request, is refused
// naming what is wrong, and no state is written.
func TestCreateRefuses(t *testing.T) {
	state := withStateDir(t)
	for _, c := range []struct{ name, doc, want string }{
		{"another container's spec", `{"ociVersion":"1.2.0","root":{"path":"rootfs"},"annotations":{"vgpu.io/injected":"c0"}}`,
			"already edited by vgpu for container c0; give each container a fresh bundle"},
		{"bad memory limit", `{"ociVersion":"1.2.0","process":{"env":["VGPU_MEMORY_LIMIT=lots"]},"root":{"path":"rootfs"}}`,
			"bad GPU request"},
	} {
		code, stderr := runHook([]string{"createContainer"}, stateJSON(t, "c1", bundle(t, c.doc)))
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want %q", c.name, code, stderr, c.want)
		}
		if c.name == "bad memory limit" && !(strings.Contains(stderr, `VGPU_MEMORY_LIMIT="lots"`) && strings.Contains(stderr, "e.g. 4Gi")) {
			t.Errorf("%s: %q does not name the field, the value and a fix", c.name, stderr)
		}
	}
	if got := entries(t, state); len(got) != 0 {
		t.Errorf("state_dir holds %q, want nothing", got)
	}
}

// The driver-limits stages of a container vgpu has no state for (not a
// vgpu container, or already gone) do nothing and never fail the runtime.
func TestDriverLimitsStagesWithoutState(t *testing.T) {
	state := withStateDir(t)
	log := filepath.Join(t.TempDir(), "runtime.log")
	for _, stage := range []string{DriverLimitsStage, DriverLimitsClearStage} {
		code, stderr := runHook([]string{stage, "--log", log, "--log-format", "json"}, stateJSON(t, "c1", "/b"))
		if code != 0 {
			t.Errorf("%s: exit %d: %s", stage, code, stderr)
		}
	}
	if got := entries(t, state); len(got) != 0 {
		t.Errorf("state_dir holds %q, want nothing", got)
	}
}

// ownLimits of a container with no state writes nothing, warns of nothing.
func TestOwnLimitsWithoutState(t *testing.T) {
	state := withStateDir(t)
	cfg, err := config.Load(config.Path())
	if err != nil {
		t.Fatal(err)
	}
	var warn bytes.Buffer
	ownLimits(cfg, "c1", &warn)
	if warn.Len() != 0 || len(entries(t, state)) != 0 {
		t.Errorf("warned %q, state %q", warn.String(), entries(t, state))
	}
}

// The runtime's log arguments after the stage are honoured.
func TestLogger(t *testing.T) {
	l := logger([]string{"--root", "/r", "--log", "/var/log/../log/runc.log", "--log-format", "json"})
	if l.Path != "/var/log/runc.log" || l.Format != "json" {
		t.Errorf("logger %+v", l)
	}
	if l := logger([]string{"--log"}); l.Path != "" {
		t.Errorf("--log without a value gave %q", l.Path)
	}
}
