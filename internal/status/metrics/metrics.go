// Package metrics serves what `vgpu status` reads as Prometheus metrics (vgpu-node's
// /metrics). Apart from status, so that the vgpu CLI links no Prometheus or HTTP server.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vgpu-dev/vgpu/internal/status"
)

// podLabels name a container's Kubernetes namespace, pod and container
// (empty when it has none, or vgpu node has not named it yet): on every
// per-container metric, so that sum by (namespace, pod) needs no join.
// container_name, not container: container is the container id.
var podLabels = []string{"namespace", "pod", "container_name"}

// ctrLabels is a per-container metric's labels: container, the pod labels, more.
func ctrLabels(more ...string) []string {
	return append(append([]string{"container"}, podLabels...), more...)
}

// Metrics names and labels (docs/status.md). Every figure is read afresh at
// each scrape, exactly as `vgpu status` reads it.
var (
	descInfo = prometheus.NewDesc("vgpu_container_info",
		"A vgpu container of the state directory (always 1); state is running or stale.",
		ctrLabels("name", "state"), nil)
	descUp = prometheus.NewDesc("vgpu_container_running",
		"1 when processes are in the container, 0 when only its state is left (stale).",
		ctrLabels(), nil)
	descErrors = prometheus.NewDesc("vgpu_container_errors",
		"Number of problems reading the container's state (missing files, corrupt region).",
		ctrLabels(), nil)
	descHostProcs = prometheus.NewDesc("vgpu_container_host_processes",
		"Host processes found in the container (GPU users or not).",
		ctrLabels(), nil)
	descGPUProcs = prometheus.NewDesc("vgpu_container_gpu_processes",
		"Live processes holding a slot of the container's shared region.",
		ctrLabels(), nil)
	descDeadSlots = prometheus.NewDesc("vgpu_container_dead_slots",
		"Slots of dead processes not reclaimed yet (not counted in the usage).",
		ctrLabels(), nil)
	descPaceWait = prometheus.NewDesc("vgpu_compute_pace_wait_seconds_total",
		"Time in which the container's own pacer held a launch with none of its work queued, all devices together: held to its share or limit (its bucket, its slot, a free run's bound), as a cgroup's CPU throttling (from the region's pace_wait_ms, in whole ms, wrapping after 49 days of waiting; absent before layout 7).",
		ctrLabels(), nil)
	descUnpaced = prometheus.NewDesc("vgpu_compute_unpaced_beside_requests",
		"1 for a device with no compute request or limit (created before any request or priority on its GPU) on a GPU where others are paced: nothing paces it, so their requests and priorities do not hold beside it; recreate it or give it a request (defaults.pace_all paces such tenants from their start). Absent otherwise.",
		ctrLabels("device", "uuid"), nil)
	descMemLimit = prometheus.NewDesc("vgpu_memory_limit_bytes",
		"Device memory limit of the container on the device (absent: no limit).",
		ctrLabels("device", "uuid"), nil)
	descMemUsed = prometheus.NewDesc("vgpu_memory_used_bytes",
		"Device memory the container's live processes use on the device.",
		ctrLabels("device", "uuid"), nil)
	descComputeLimit = prometheus.NewDesc("vgpu_compute_limit_percent",
		"Compute limit of the container on the device in percent (100: no limit).",
		ctrLabels("device", "uuid"), nil)
	descComputeRequest = prometheus.NewDesc("vgpu_compute_request_percent",
		"Compute request of the container on the device in percent: the share guaranteed under contention (the limit when none was given; 0: surplus only).",
		ctrLabels("device", "uuid"), nil)
	descPriority = prometheus.NewDesc("vgpu_compute_priority_info",
		"The device's priority when it is not normal (always 1): high or low orders its work inside the period against the GPU's other tenants (absent: normal).",
		ctrLabels("device", "uuid", "priority"), nil)
	descComputeGrant = prometheus.NewDesc("vgpu_compute_grant_percent",
		"The share the container may use on the device now, in percent; source: arbitration (vgpu node) or admission (held to its request).",
		ctrLabels("device", "uuid", "source"), nil)
	descMemRequest = prometheus.NewDesc("vgpu_memory_request_bytes",
		"Device memory request of the container on the device (absent: none).",
		ctrLabels("device", "uuid"), nil)
	descMemCeiling = prometheus.NewDesc("vgpu_memory_ceiling_bytes",
		"With a memory request below the limit: what the container may hold on the device now (vgpu node's ceiling; the request without vgpu node).",
		ctrLabels("device", "uuid"), nil)
	descMemBorrowed = prometheus.NewDesc("vgpu_memory_borrowed_bytes",
		"Device memory the container holds above its memory request (absent: no request).",
		ctrLabels("device", "uuid"), nil)
	descBusy = prometheus.NewDesc("vgpu_compute_busy_seconds_total",
		"Time the container's work kept the device busy (from the region's busy_ns; absent before layout 2).",
		ctrLabels("device", "uuid"), nil)
	descOrderWait = prometheus.NewDesc("vgpu_compute_order_wait_seconds_total",
		"Time the container's launches waited for another tenant to go first inside the pacing period: a higher priority, or one waking below its request (from the region's order_wait_ms, in whole ms, wrapping after 49 days of waiting; absent before layout 6).",
		ctrLabels("device", "uuid"), nil)
	descShare = prometheus.NewDesc("vgpu_compute_share_ratio",
		"Busy share of the device measured between this scrape and the previous one (0..1).",
		ctrLabels("device", "uuid"), nil)
	descProcMem = prometheus.NewDesc("vgpu_process_memory_used_bytes",
		"Device memory one process of the container uses on the device.",
		ctrLabels("device", "uuid", "host_pid", "pid"), nil)
	descScrape = prometheus.NewDesc("vgpu_status_scrape_duration_seconds",
		"Time taken to read every container's state.", nil, nil)
)

// Collector is a prometheus.Collector over one state directory.
type Collector struct {
	Options status.Options
	read    func() *status.Report // status.Collect(Options) unless a test sets it
	mu      sync.Mutex
	prev    *status.Report
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	describeGPUs(ch)
	for _, d := range []*prometheus.Desc{descInfo, descUp, descErrors, descHostProcs, descGPUProcs, descDeadSlots, descPaceWait,
		descMemLimit, descMemUsed, descComputeLimit, descComputeRequest, descPriority, descComputeGrant, descUnpaced, descMemRequest, descMemCeiling, descMemBorrowed, descBusy, descOrderWait, descShare, descProcMem, descScrape} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	var r *status.Report
	if c.read != nil {
		r = c.read()
	} else {
		r = status.Collect(c.Options)
	}
	c.mu.Lock()
	if c.prev != nil {
		status.MeasureShares(c.prev, r)
	}
	c.prev = r
	c.mu.Unlock()
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	for _, ct := range r.Containers {
		// The container's own labels, then what each metric adds.
		cl := func(more ...string) []string {
			l := []string{ct.ID, "", "", ""}
			if p := ct.Pod; p != nil {
				l[1], l[2], l[3] = p.Namespace, p.Name, p.Container
			}
			return append(l, more...)
		}
		g(descInfo, 1, cl(ct.Name, ct.State)...)
		up := 0.0
		if ct.State == status.Running {
			up = 1
		}
		g(descUp, up, cl()...)
		g(descErrors, float64(len(ct.Errors)), cl()...)
		g(descHostProcs, float64(ct.HostProcesses), cl()...)
		g(descGPUProcs, float64(len(ct.Processes)), cl()...)
		g(descDeadSlots, float64(ct.DeadSlots), cl()...)
		if ct.PaceWaitMS != nil {
			ch <- prometheus.MustNewConstMetric(descPaceWait, prometheus.CounterValue, float64(*ct.PaceWaitMS)/1e3, cl()...)
		}
		for di, d := range ct.Devices {
			idx := strconv.Itoa(d.Index)
			if d.MemoryLimit > 0 {
				g(descMemLimit, float64(d.MemoryLimit), cl(idx, d.UUID)...)
			}
			g(descMemUsed, float64(d.MemoryUsed), cl(idx, d.UUID)...)
			g(descComputeLimit, float64(d.ComputeLimit), cl(idx, d.UUID)...)
			g(descComputeRequest, float64(d.ComputeRequest), cl(idx, d.UUID)...)
			if d.Priority != "" {
				g(descPriority, 1, cl(idx, d.UUID, d.Priority)...)
			}
			if d.ComputeGrant != nil {
				g(descComputeGrant, *d.ComputeGrant, cl(idx, d.UUID, d.GrantSource)...)
			}
			if d.UnpacedBesideRequests {
				g(descUnpaced, 1, cl(idx, d.UUID)...)
			}
			if d.MemoryRequest > 0 {
				g(descMemRequest, float64(d.MemoryRequest), cl(idx, d.UUID)...)
				g(descMemBorrowed, float64(d.MemoryBorrowed()), cl(idx, d.UUID)...)
			}
			if d.MemoryCeiling > 0 {
				g(descMemCeiling, float64(d.MemoryCeiling), cl(idx, d.UUID)...)
			}
			if d.BusyNs != nil {
				ch <- prometheus.MustNewConstMetric(descBusy, prometheus.CounterValue, float64(*d.BusyNs)/1e9, cl(idx, d.UUID)...)
			}
			if d.OrderWaitMS != nil {
				ch <- prometheus.MustNewConstMetric(descOrderWait, prometheus.CounterValue, float64(*d.OrderWaitMS)/1e3, cl(idx, d.UUID)...)
			}
			if d.ComputeShare != nil {
				g(descShare, *d.ComputeShare, cl(idx, d.UUID)...)
			}
			for _, p := range ct.Processes {
				if di < len(p.Memory) {
					g(descProcMem, float64(p.Memory[di]), cl(idx, d.UUID, strconv.Itoa(p.HostPID), strconv.Itoa(p.PID))...)
				}
			}
		}
	}
	gpuMetrics(r, g)
	g(descScrape, time.Since(start).Seconds())
}

// Handler serves the metrics of the state directory (GET /metrics).
func Handler(o status.Options) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&Collector{Options: o})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// GPU totals as metrics (from a running vgpu node's heartbeat).
var (
	descGPUMemTotal = prometheus.NewDesc("vgpu_gpu_memory_total_bytes",
		"A GPU's device memory as the driver reports it (present while vgpu node runs).", []string{"index", "uuid", "name"}, nil)
	descGPUMemUsed = prometheus.NewDesc("vgpu_gpu_memory_used_bytes",
		"Device memory in use on a GPU, every process's, as the driver reports it (present while vgpu node runs).", []string{"index", "uuid", "name"}, nil)
	descGPUBusy = prometheus.NewDesc("vgpu_gpu_busy_percent",
		"Percent of the driver's last sample period a kernel ran on the GPU (present while vgpu node runs).", []string{"index", "uuid", "name"}, nil)
)

func describeGPUs(ch chan<- *prometheus.Desc) {
	ch <- descGPUMemTotal
	ch <- descGPUMemUsed
	ch <- descGPUBusy
}

func gpuMetrics(r *status.Report, g func(d *prometheus.Desc, v float64, l ...string)) {
	for _, x := range r.GPUs {
		l := []string{strconv.Itoa(x.Index), x.UUID, x.Name}
		g(descGPUMemTotal, float64(x.MemoryTotal), l...)
		g(descGPUMemUsed, float64(x.MemoryUsed), l...)
		if x.Busy >= 0 {
			g(descGPUBusy, float64(x.Busy), l...)
		}
	}
}
