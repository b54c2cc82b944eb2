package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// What status.Collect reads from a state directory (its own tests) becomes
// these lines on /metrics.
func TestMetrics(t *testing.T) {
	const gib = 1 << 30
	uuid := "GPU-5e3b6a2e-0000-4000-8000-000000000000"
	busy, waited, paced := uint64(1500000000), uint64(2500), uint64(7250)
	report := &status.Report{Containers: []status.Container{{
		ID: "m", Name: "db", State: status.Running, HostProcesses: 1, PaceWaitMS: &paced,
		Devices:   []status.Device{{Index: 0, UUID: uuid, MemoryLimit: 2 * gib, MemoryUsed: 300 << 20, ComputeLimit: 100, BusyNs: &busy, OrderWaitMS: &waited, Priority: "high"}},
		Processes: []status.Process{{HostPID: 2001, PID: 5, Slot: 3, Memory: []uint64{300 << 20}, MemoryTotal: 300 << 20}},
	}, {
		// k is a Kubernetes container vgpu node has named (pods.json).
		ID: "k", Name: "train-0/main", State: status.Stale,
		Devices: []status.Device{{Index: 0, UUID: uuid, MemoryLimit: gib, ComputeLimit: 100, UnpacedBesideRequests: true}},
		Pod:     &events.Pod{Namespace: "ml", Name: "train-0", Container: "main"},
	}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&Collector{read: func() *status.Report { return report }})
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// (client_golang writes labels in name order; an empty one means "none")
	none := `container_name="",`
	for _, s := range []string{
		`vgpu_container_info{container="m",` + none + `name="db",namespace="",pod="",state="running"} 1`,
		`vgpu_container_running{container="m",` + none + `namespace="",pod=""} 1`,
		`vgpu_memory_limit_bytes{container="m",` + none + `device="0",namespace="",pod="",uuid="` + uuid + `"} 2.147483648e+09`,
		`vgpu_memory_used_bytes{container="m",` + none + `device="0",namespace="",pod="",uuid="` + uuid + `"} 3.145728e+08`,
		`vgpu_compute_limit_percent{container="m",` + none + `device="0",namespace="",pod="",uuid="` + uuid + `"} 100`,
		`vgpu_compute_priority_info{container="m",` + none + `device="0",namespace="",pod="",priority="high",uuid="` + uuid + `"} 1`,
		`vgpu_compute_busy_seconds_total{container="m",` + none + `device="0",namespace="",pod="",uuid="` + uuid + `"} 1.5`,
		`vgpu_compute_order_wait_seconds_total{container="m",` + none + `device="0",namespace="",pod="",uuid="` + uuid + `"} 2.5`,
		`vgpu_process_memory_used_bytes{container="m",` + none + `device="0",host_pid="2001",namespace="",pid="5",pod="",uuid="` + uuid + `"} 3.145728e+08`,
		`vgpu_container_gpu_processes{container="m",` + none + `namespace="",pod=""} 1`,
		`vgpu_compute_pace_wait_seconds_total{container="m",` + none + `namespace="",pod=""} 7.25`,
		`vgpu_container_info{container="k",container_name="main",name="train-0/main",namespace="ml",pod="train-0",state="stale"} 1`,
		`vgpu_container_running{container="k",container_name="main",namespace="ml",pod="train-0"} 0`,
		`vgpu_memory_limit_bytes{container="k",container_name="main",device="0",namespace="ml",pod="train-0",uuid="` + uuid + `"} 1.073741824e+09`,
		`vgpu_compute_unpaced_beside_requests{container="k",container_name="main",device="0",namespace="ml",pod="train-0",uuid="` + uuid + `"} 1`,
	} {
		if !strings.Contains(string(body), s) {
			t.Errorf("metrics lack %s:\n%s", s, body)
		}
	}
	// a container whose region has no pace wait (before layout 7) has no series
	if n := strings.Count(string(body), "vgpu_compute_pace_wait_seconds_total{"); n != 1 {
		t.Errorf("%d pace wait series, want 1 (none for k):\n%s", n, body)
	}
	// one unpaced series, for the device nothing paces beside requests
	if n := strings.Count(string(body), "vgpu_compute_unpaced_beside_requests{"); n != 1 {
		t.Errorf("%d unpaced series, want 1 (none for m):\n%s", n, body)
	}
	// one priority series, for the device that is not normal
	if n := strings.Count(string(body), "vgpu_compute_priority_info{"); n != 1 {
		t.Errorf("%d priority series, want 1 (none for a normal device):\n%s", n, body)
	}
}
