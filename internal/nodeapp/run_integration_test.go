//go:build cgo && integration

package nodeapp

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func get(addr, path string) (int, string, error) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metric is the value of the sample named exactly name in a Prometheus
// text exposition (-1: absent).
func metric(body, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// Run as vgpu-node runs it, past NVML: the simulated GPU's libnvidia-ml is
// found under the configured driver root (no --nvml), the daemon's rounds
// read it without error, its metrics and /healthz are served on --listen,
// and an ended context stops it cleanly.
func TestRunServesRoundsFromTheDriver(t *testing.T) {
	sim, err := simroot.Create(filepath.Join(t.TempDir(), "driver"), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SIMGPU_DIR", sim.SimDir())
	withConfig(t, "[driver]\nroot = \""+sim.Dir()+"\"\n")
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.CgroupRoot = t.TempDir()
	cfg.PodResourcesSocket = ""
	cfg.Interval = 50 * time.Millisecond
	cfg.Listen = freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("stopped: %v", err)
			}
		}
	})

	// Generous: a loaded 2-core machine may take seconds to start it.
	var body string
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("Run returned before it was stopped: %v", err)
		default:
		}
		code, health, herr := get(cfg.Listen, "/healthz")
		if herr == nil && code == http.StatusOK {
			if !strings.HasPrefix(health, "ok: last round ") {
				t.Errorf("/healthz: %q, want \"ok: last round ...\"", health)
			}
			var merr error
			if code, body, merr = get(cfg.Listen, "/metrics"); merr == nil && code == http.StatusOK && metric(body, "vgpu_node_rounds_total") >= 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two rounds served in 60 s: /healthz %d %q %v\n%s", code, health, herr, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v := metric(body, "vgpu_node_up"); v != 1 {
		t.Errorf("vgpu_node_up %v, want 1", v)
	}
	if v := metric(body, "vgpu_node_round_errors_total"); v != 0 {
		t.Errorf("vgpu_node_round_errors_total %v, want 0: the rounds could not read the driver\n%s", v, body)
	}

	cancel()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("stopped: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of its context ending")
	}
	if _, _, err := get(cfg.Listen, "/metrics"); err == nil {
		t.Error("metrics still served after Run returned")
	}
}
