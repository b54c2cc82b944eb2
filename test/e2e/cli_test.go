//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// What a newcomer types first. Every binary answers
// --version; a wrong command line gets one line and status 2.

// runCLI runs bin with args and VGPU_CONFIG=config; it returns stdout, stderr
// and the exit status.
func runCLI(t *testing.T, config, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "VGPU_CONFIG="+config)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return out.String(), errb.String(), code
}

func TestVersion(t *testing.T) {
	e := newEnv(t, "version")
	bin := binaries(t)
	built := os.Getenv("VGPU_BUILD") != "" // make build sets version and commit
	commit := ""                           // the checkout's, when it is one (make build falls back to "unknown")
	if out, err := exec.Command("git", "-C", repoRoot(t), "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	driver := "driver: " + simroot.DriverVersion + " (libcuda.so." + simroot.DriverVersion + " under driver root " + e.sim.Dir() + ")"
	for _, c := range []struct {
		prog string
		args []string
		then string // what follows our lines
	}{
		{"vgpu", []string{"--version"}, "runtime: "},
		{"vgpu", []string{"version"}, "runtime: "},
		{"vgpu-runtime", []string{"--version"}, "runc version "}, // runc's own, after ours
		{"vgpu-hook", []string{"--version"}, ""},
		{"vgpu-node", []string{"--version"}, ""},
		{"vgpu-node", []string{"version"}, ""},
		{"vgpu-discover", []string{"--version"}, ""},
	} {
		p := filepath.Join(bin, c.prog)
		if c.prog == "vgpu" {
			p = vgpuCLI(t)
		}
		out, stderr, code := runCLI(t, e.config, p, c.args...)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if code != 0 || len(lines) < 2 {
			t.Errorf("%s %v: status %d\n%s%s", c.prog, c.args, code, out, stderr)
			continue
		}
		if !strings.HasPrefix(lines[0], c.prog+" ") || !strings.Contains(lines[0], "(commit ") {
			t.Errorf("%s %v: first line %q, want %q", c.prog, c.args, lines[0], c.prog+" VERSION (commit …)")
		}
		if built && (strings.HasPrefix(lines[0], c.prog+" unknown ") || (commit != "" && !strings.Contains(lines[0], "(commit "+commit))) {
			t.Errorf("%s %v: %q: make build sets the version and the commit (%s)", c.prog, c.args, lines[0], commit)
		}
		if lines[1] != driver {
			t.Errorf("%s %v: second line %q, want %q", c.prog, c.args, lines[1], driver)
		}
		if c.then != "" && (len(lines) < 3 || !strings.Contains(lines[2], c.then)) {
			t.Errorf("%s %v: third line should hold %q:\n%s", c.prog, c.args, c.then, out)
		}
	}
	// `vgpu node` is vgpu-node, for units and DaemonSets written before it.
	if out, stderr, code := runCLI(t, e.config, vgpuCLI(t), "node", "--version"); code != 0 || !strings.HasPrefix(out, "vgpu-node ") {
		t.Errorf("vgpu node --version: status %d, %q %q: want vgpu-node's version", code, out, stderr)
	}
	// Without a driver the version still comes, with the reason.
	noDriver := filepath.Join(t.TempDir(), "config.toml")
	writeFile(t, noDriver, []byte("[driver]\nroot = \"/nonexistent\"\n"), 0o644)
	out, _, code := runCLI(t, noDriver, vgpuCLI(t), "version")
	if code != 0 || !strings.Contains(out, "\ndriver: none found (no libcuda.so.<version> under driver root /nonexistent") {
		t.Errorf("vgpu version without a driver: status %d\n%s", code, out)
	}
}

func TestCLIUsageErrors(t *testing.T) {
	e := newEnv(t, "usage")
	cli := vgpuCLI(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "vgpu: unknown flag --bogus (see vgpu --help)"},
		{[]string{"bogus"}, `vgpu: no command "bogus"; commands: exec, status`},
		{[]string{"setup", "bogus"}, `vgpu setup: no command "bogus"; commands: docker, containerd, podman (see vgpu setup --help)`},
		{[]string{"setup", "docker", "--bogus"}, "vgpu setup docker: unknown flag --bogus (see vgpu setup docker --help)"},
		{[]string{"status", "--interval", "soon"}, `vgpu status: invalid value "soon" for flag -interval`},
		{[]string{"exec", "--memory-limit"}, "vgpu exec: flag needs an argument: -memory-limit"},
		{[]string{"version", "extra"}, "vgpu version: takes no arguments"},
		{[]string{"help", "bogus"}, `vgpu: no help topic "bogus" (see vgpu --help)`},
		{[]string{"setup", "help", "bogus"}, `vgpu setup: no help topic "bogus" (see vgpu setup --help)`},
	} {
		out, stderr, code := runCLI(t, e.config, cli, c.args...)
		if code != 2 || out != "" || !strings.HasPrefix(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("vgpu %v: status %d (want 2), stdout %q, stderr %q: want one line starting %q", c.args, code, out, stderr, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "vgpu-node: unknown flag --bogus (see vgpu-node --help)"},
		{[]string{"bogus"}, `vgpu-node: no command "bogus"; commands: device-plugin, metrics, version`},
		{[]string{"--interval", "soon"}, `vgpu-node: invalid value "soon" for flag -interval`},
		{[]string{"metrics", "--bogus"}, "vgpu-node metrics: unknown flag --bogus (see vgpu-node metrics --help)"},
	} {
		out, stderr, code := runCLI(t, e.config, vgpuNode(t), c.args...)
		if code != 2 || out != "" || !strings.HasPrefix(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("vgpu-node %v: status %d (want 2), stdout %q, stderr %q: want one line starting %q", c.args, code, out, stderr, c.want)
		}
	}
	// A state directory that is not there is an error, not "no containers".
	_, stderr, code := runCLI(t, e.config, cli, "status", "--state-dir", "/nonexistent")
	if code != 1 || !strings.Contains(stderr, "--state-dir /nonexistent: no such file or directory") {
		t.Errorf("vgpu status --state-dir /nonexistent: status %d, %q", code, stderr)
	}
}

func TestCLIHelpTexts(t *testing.T) {
	e := newEnv(t, "help")
	cli := vgpuCLI(t)
	help := func(bin string, args ...string) string {
		t.Helper()
		out, stderr, code := runCLI(t, e.config, bin, append(args, "--help")...)
		if code != 0 {
			t.Fatalf("%s %v --help: status %d: %s", bin, args, code, stderr)
		}
		return out
	}
	if h := help(cli, "exec"); strings.Contains(h, "(default: none) (default: 0)") || !strings.Contains(h, "take turns (default: one from the state directory)") || !strings.Contains(h, "Examples:\n      vgpu exec --memory-limit") {
		t.Errorf("vgpu exec --help:\n%s", h)
	}
	if h := help(cli, "status"); !strings.Contains(h, "Examples:\n      vgpu status") {
		t.Errorf("vgpu status --help has no examples:\n%s", h)
	}
	// A backticked word in a flag's usage is urfave/cli's placeholder syntax.
	if h := help(cli, "setup", "containerd"); !strings.Contains(h, `--containerd value    containerd binary, to run "containerd config default"`) {
		t.Errorf("vgpu setup containerd --help:\n%s", h)
	}
	hook := help(filepath.Join(binaries(t), "vgpu-hook"))
	for _, stage := range []string{"createContainer", "createRuntime", "prestart", "poststop", "--version"} {
		if !strings.Contains(hook, "\n  "+stage) && !strings.Contains(hook, stage+" ") {
			t.Errorf("vgpu-hook --help does not document %s:\n%s", stage, hook)
		}
	}
	if h := help(cli); !strings.Contains(h, "Exit status: 0 done; 1 the command failed; 2 the command line is wrong") {
		t.Errorf("vgpu --help does not state the exit statuses:\n%s", h)
	}
}
