package nodeapp

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// withConfig points VGPU_CONFIG at a file with body (none: the file does
// not exist, so the defaults hold).
func withConfig(t *testing.T, body string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if body != "" {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(config.PathEnv, p)
}

// A bad flag is refused before anything starts, naming the flag, the value
// and what would do; a value on the bound is accepted (Run then goes on to
// the configuration, here a broken one, so the error is that one's).
func TestRunRefusesBadFlags(t *testing.T) {
	withConfig(t, "this is not toml =\n")
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"tolerance", func(c *Config) { c.MemoryTolerance = "lots" }, `--memory-tolerance "lots"`},
		{"interval 0", func(c *Config) { c.Interval = 0 }, "--interval 0s: want more than 0 and at most 10s"},
		{"interval negative", func(c *Config) { c.Interval = -time.Second }, "--interval -1s"},
		{"interval over 10s", func(c *Config) { c.Interval = 10*time.Second + time.Nanosecond }, "--interval 10.000000001s: want more than 0 and at most 10s"},
		{"interval 10s", func(c *Config) { c.Interval = 10 * time.Second }, "config.toml"},
		{"interval 1ns", func(c *Config) { c.Interval = time.Nanosecond }, "config.toml"},
	} {
		cfg := DefaultConfig()
		cfg.StateDir = t.TempDir()
		c.edit(&cfg)
		err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
		if c.name == "tolerance" && !strings.Contains(err.Error(), "e.g. 128Mi") {
			t.Errorf("%s: %v gives no example", c.name, err)
		}
	}
}

// The device plugin's unit is checked with the same care, before the
// daemon starts.
func TestRunRefusesBadMemoryUnit(t *testing.T) {
	withConfig(t, "")
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	dp := DefaultDevicePlugin
	dp.MemoryUnit = "a lot"
	cfg.DevicePlugin = &dp
	err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "--memory-unit a lot") || !strings.Contains(err.Error(), "e.g. 1Gi, 512Mi") {
		t.Errorf("%v; want the flag, the value and an example", err)
	}
}

// Without --nvml, a driver root with the driver's libcuda but no
// libnvidia-ml of its version is refused before anything starts, naming
// the library and where it was looked for.
func TestRunNeedsNVML(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libcuda.so.580.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	withConfig(t, "[driver]\nroot = \""+root+"\"\n")
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "libnvidia-ml.so.580.1 not found in "+lib) {
		t.Fatalf("%v; want libnvidia-ml.so.580.1 and %s named", err, lib)
	}
}

// --thaw (the unit's ExecStopPost) thaws what was recorded and returns,
// starting nothing: with nothing recorded it thaws nothing.
func TestRunThawOnly(t *testing.T) {
	withConfig(t, "this is not toml =\n") // never read: thaw needs no configuration
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.CgroupRoot = t.TempDir()
	cfg.Thaw = true
	cfg.Interval = 0 // never checked either
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

// The liveness probe fails before the daemon exists.
func TestHealthzStarting(t *testing.T) {
	w := httptest.NewRecorder()
	healthz(w, nil)
	if w.Code != 503 || !strings.Contains(w.Body.String(), "starting") {
		t.Errorf("%d %q; want 503 starting", w.Code, w.Body.String())
	}
}

// The service manager hears READY=1 once, after the first round, and
// WATCHDOG=1 after every round.
func TestWatchdogNotifies(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	round := watchdog()
	var got []string
	buf := make([]byte, 256)
	for range 2 {
		round()
	}
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(buf[:n]))
	}
	if want := []string{"READY=1", "WATCHDOG=1", "WATCHDOG=1"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("notifications %q, want %q", got, want)
	}
}

type listSource struct {
	gpus []nvmlfeed.GPU
	err  error
}

func (listSource) Read() ([]nvmlfeed.Sample, error) { return nil, nil }
func (listSource) Close() error                     { return nil }
func (s listSource) GPUs() ([]nvmlfeed.GPU, error)  { return s.gpus, s.err }

type readOnlySource struct{}

func (readOnlySource) Read() ([]nvmlfeed.Sample, error) { return nil, nil }
func (readOnlySource) Close() error                     { return nil }

// One MPS supervisor per spatial GPU, named by UUID or host index; a GPU
// the host does not have is refused naming it and how to name one.
func TestMPSSupervisors(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	none := func(string, string, string) {}
	if sups, err := mpsSupervisors(cfg, t.TempDir(), readOnlySource{}, none); err != nil || sups != nil {
		t.Errorf("no spatial GPU: %v, %v; want none", sups, err)
	}
	cfg.Spatial.MPSControl = bin
	host := listSource{gpus: []nvmlfeed.GPU{{Index: 0, UUID: "GPU-aaa"}, {Index: 1, UUID: "GPU-bbb"}}}

	cfg.Spatial.GPUs = []string{"1", "GPU-aaa"}
	sups, err := mpsSupervisors(cfg, t.TempDir(), host, none)
	if err != nil || len(sups) != 2 || sups["GPU-aaa"] == nil || sups["GPU-bbb"] == nil {
		t.Errorf("by index and UUID: %v, %v; want GPU-aaa and GPU-bbb", sups, err)
	}

	cfg.Spatial.GPUs = []string{"GPU-ccc"}
	_, err = mpsSupervisors(cfg, t.TempDir(), host, none)
	if err == nil || !strings.Contains(err.Error(), `"GPU-ccc": no such GPU on this host (2 GPU(s); name one by its UUID or host index)`) {
		t.Errorf("unknown GPU: %v", err)
	}

	cfg.Spatial.GPUs = []string{"0"}
	if _, err = mpsSupervisors(cfg, t.TempDir(), readOnlySource{}, none); err == nil || !strings.Contains(err.Error(), "lists no GPUs") {
		t.Errorf("source without a GPU list: %v", err)
	}
	broken := errors.New("nvml: uninitialized")
	if _, err = mpsSupervisors(cfg, t.TempDir(), listSource{err: broken}, none); !errors.Is(err, broken) || !strings.Contains(err.Error(), "spatial.gpus") {
		t.Errorf("listing fails: %v", err)
	}
	cfg.Spatial.MPSControl = filepath.Join(t.TempDir(), "missing")
	if _, err = mpsSupervisors(cfg, t.TempDir(), host, none); err == nil || !strings.Contains(err.Error(), "spatial.mps_control") {
		t.Errorf("no MPS control: %v", err)
	}
}

// The DRA driver outside a pod needs --kubeconfig, and says so.
func TestDRANeedsKubeconfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	_, err := newDRADriver(DefaultDRA, config.Default(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "--dra: Kubernetes client") || !strings.Contains(err.Error(), "set --kubeconfig outside a pod") {
		t.Errorf("%v; want the flag to set", err)
	}
	c := DefaultDRA
	c.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	if _, err = newDRADriver(c, config.Default(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing kubeconfig: %v; want its path", err)
	}
}

// The metrics server alone refuses a state directory that is not one, and
// otherwise serves until its context ends.
func TestServeMetrics(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// bounded: were the state directory not checked, it would serve
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := ServeMetrics(ctx, "127.0.0.1:0", file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("state dir a file: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ServeMetrics(ctx, "127.0.0.1:0", t.TempDir()); err != nil {
		t.Errorf("ended context: %v", err)
	}
}
