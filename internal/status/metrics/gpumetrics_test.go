package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// The GPUs' totals that vgpu node's heartbeat carries into the report
// (status's TestNodeFiguresFromHeartbeat) are served as vgpu_gpu_*.
func TestGPUMetrics(t *testing.T) {
	const gib = 1 << 30
	report := &status.Report{GPUs: []events.GPU{{Index: 0, UUID: "GPU-a", Name: "sim", MemoryTotal: 80 * gib, MemoryUsed: gib, Busy: 42}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&Collector{read: func() *status.Report { return report }})
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
