package status

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vgpu-dev/vgpu/internal/node/events"
)

// The GPUs' totals in vgpu node's heartbeat are served as vgpu_gpu_*.
func TestGPUMetrics(t *testing.T) {
	f := newFixture(t)
	w, err := events.NewWriter(f.state)
	if err != nil {
		t.Fatal(err)
	}
	w.Beat(events.Heartbeat{PID: 1, Beat: time.Now(), GPUs: []events.GPU{{Index: 0, UUID: "GPU-a", Name: "sim", MemoryTotal: 80 * gib, MemoryUsed: gib, Busy: 42}}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(&Collector{Options: Options{StateDir: f.state, ProcRoot: f.proc}})
	want := `
# HELP vgpu_gpu_busy_percent Percent of the driver's last sample period a kernel ran on the GPU (present while vgpu node runs).
# TYPE vgpu_gpu_busy_percent gauge
vgpu_gpu_busy_percent{index="0",name="sim",uuid="GPU-a"} 42
# HELP vgpu_gpu_memory_total_bytes A GPU's device memory as the driver reports it (present while vgpu node runs).
# TYPE vgpu_gpu_memory_total_bytes gauge
vgpu_gpu_memory_total_bytes{index="0",name="sim",uuid="GPU-a"} 8.589934592e+10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "vgpu_gpu_busy_percent", "vgpu_gpu_memory_total_bytes"); err != nil {
		t.Error(err)
	}
}
