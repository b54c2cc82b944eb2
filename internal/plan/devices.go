package plan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// devices resolves the request against the host's GPUs: which GPUs, each
// one's settings (device), in the host's order, and the refusals that
// concern the set as a whole.
func devices(req *request.Request, cfg *config.Config, gpus []discover.GPU) ([]tenant.Device, error) {
	sel, err := Select(req, gpus)
	if err != nil {
		return nil, err
	}
	n := len(sel)
	for _, l := range []request.Limit{req.Memory, req.Compute, req.ComputeRequest, req.MemoryRequest, req.Priority} {
		if m := l.MaxIndex(); m >= n {
			return nil, fmt.Errorf("%s: device index %d is out of range: the container has %d device(s) (%s), indices 0..%d", l.Source, m, n, req.DeviceSource, n-1)
		}
	}
	if n > contract.MaxDevices {
		return nil, fmt.Errorf("%s: %d GPUs; a vgpu container takes at most %d", req.DeviceSource, n, contract.MaxDevices)
	}
	devs := make([]tenant.Device, 0, n)
	for i, g := range sel {
		d, err := device(req, cfg, i, g)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	// Limits follow the request's order (0=… is the first GPU named); the
	// container numbers its GPUs in the host's order, as the driver's CUDA
	// enumeration does, so that NVML, nvidia-smi and CUDA agree on device 0.
	sort.SliceStable(devs, func(i, j int) bool { return devs[i].GPU.Index < devs[j].GPU.Index })
	for i := range devs {
		devs[i].Index = i
	}
	// One MPS client reaches one control daemon (CUDA_MPS_PIPE_DIRECTORY
	// is per process), and through it only that daemon's GPU.
	if s := spatialDevice(devs); s != nil && len(devs) > 1 {
		return nil, fmt.Errorf("%s: GPU %d (%s) is spatial (MPS, config spatial.gpus) and the container asks for %d GPUs: a container on a spatial GPU takes that GPU alone; ask for it alone, or for time-sliced GPUs only", req.DeviceSource, s.GPU.Index, s.GPU.UUID, len(devs))
	}
	return devs, nil
}

// device is the i-th device the request names, on GPU g: its limits,
// requests and mode from the request, else the config's defaults. A new
// per-device setting is read here, from req's value for i and the
// config's default, and refused here when it cannot hold on g.
func device(req *request.Request, cfg *config.Config, i int, g discover.GPU) (tenant.Device, error) {
	// 0 in the request: not given, the config's default applies; 0
	// there: no limit, whose one form is ComputeUnlimited.
	d := tenant.Device{Index: i, GPU: tenant.GPU(g), Memory: req.Memory.For(i), Compute: int(req.Compute.For(i))}
	if d.Memory == 0 {
		d.Memory = cfg.MemoryDefault()
	}
	if d.Priority = cfg.DefaultPriority(); req.PriorityFor(i) != "" {
		d.Priority, _ = tenant.ParsePriority(req.PriorityFor(i)) // the parser checked it
	}
	// Requests: a container's own setting wins over every default;
	// only a limit: the request is the limit (nil); only a request:
	// no cap (100).
	creq := int(req.ComputeRequest.For(i))
	if cfg.IsSpatial(g.Index, g.UUID) {
		d.Mode = tenant.Spatial
	}
	if d.Compute == 0 && creq == 0 {
		d.Compute, creq = cfg.Defaults.ComputeLimit, cfg.Defaults.ComputeRequest
		if !d.Mode.Borrows() {
			creq = 0 // MPS holds fixed shares: the default limit alone applies
		}
	}
	if d.Compute == 0 {
		d.Compute = contract.ComputeUnlimited
	}
	if d.Mode.IsSpatial() && creq > 0 {
		// Taken as the limit when they agree (a Kubernetes grant's cores
		// with cores_limit "request"); a request below the limit would
		// promise borrowing, which a fixed MPS share cannot give.
		if req.Compute.For(i) == 0 && creq <= d.Compute {
			d.Compute = creq
		}
		if creq != d.Compute {
			return d, fmt.Errorf("compute request %d%% with limit %d%% on container device %d (%s): GPU %d (%s) is spatial (MPS): a container there holds a fixed share of the SMs, its compute limit, and cannot borrow; give the share as the limit alone (e.g. VGPU_COMPUTE_LIMIT=%d), or use a time-sliced GPU", creq, d.Compute, i, orConfig(req.ComputeRequest, "defaults.compute_request"), g.Index, g.UUID, creq)
		}
		creq = 0
	}
	if creq > 0 {
		if creq > d.Compute {
			return d, fmt.Errorf("compute request %d%% is above its limit %d%% on container device %d (%s, %s): a request is at most its limit; lower the request or raise the limit", creq, d.Compute, i, orConfig(req.ComputeRequest, "defaults.compute_request"), orConfig(req.Compute, "defaults.compute_limit"))
		}
		d.ComputeRequest = &creq
	}
	if d.NoComputeSetting() && cfg.Defaults.PaceAll && periodic(cfg) {
		// paced from the start, surplus only, as admission paces it beside
		// requests: a request given later on its GPU holds beside it
		zero := 0
		d.ComputeRequest = &zero
	}
	if req.ComputePhase != nil && d.Paced() {
		ph := *req.ComputePhase
		d.Phase = &ph
	}
	d.MemoryRequest = req.MemoryRequest.For(i)
	if d.MemoryRequest == 0 {
		d.MemoryRequest = cfg.MemoryRequestDefault()
	}
	if d.Memory == 0 && d.MemoryRequest > 0 {
		// only a request: it may borrow up to the whole GPU
		d.Memory = g.MemoryBytes
	}
	if d.Memory > 0 && d.MemoryRequest > d.Memory {
		return d, fmt.Errorf("memory request %s is above its limit %s on container device %d (%s, %s): a request is at most its limit; lower the request or raise the limit", size(d.MemoryRequest), size(d.Memory), i, orConfig(req.MemoryRequest, "defaults.memory_request"), orConfig(req.Memory, "defaults.memory_limit"))
	}
	if d.Memory > g.MemoryBytes && g.MemoryBytes > 0 {
		return d, fmt.Errorf("%s: memory limit %s for container device %d is more than GPU %d (%s) has: %s", limitSource(req.Memory, cfg), size(d.Memory), i, g.Index, g.UUID, size(g.MemoryBytes))
	}
	return d, nil
}

// periodic: the library paces in periods (library.compute_period is not
// "0", launch by launch, where a request-0 device has no periods to take
// what the others leave from). A bad period is library's error to report.
func periodic(cfg *config.Config) bool {
	p, err := config.ParseComputePeriod(cfg.Library.ComputePeriod)
	return err == nil && (p == nil || *p > 0)
}

// spatialDevice is the plan's device on a spatial GPU, if any (at most one:
// devices refuses more).
func spatialDevice(devs []tenant.Device) *tenant.Device {
	var s *tenant.Device
	for i := range devs {
		if devs[i].Mode.IsSpatial() {
			s = &devs[i]
		}
	}
	return s
}

// Select returns the host GPUs req names, in the request's order.
func Select(req *request.Request, all []discover.GPU) ([]discover.GPU, error) {
	if req.All {
		if len(all) == 0 {
			return nil, fmt.Errorf("%s: the host has no GPU", req.DeviceSource)
		}
		return append([]discover.GPU(nil), all...), nil
	}
	var out []discover.GPU
	seen := map[string]bool{}
	for _, ref := range req.Devices {
		var g *discover.GPU
		for i := range all {
			if ref.UUID != "" && strings.EqualFold(all[i].UUID, ref.UUID) || ref.UUID == "" && all[i].Index == ref.Index {
				g = &all[i]
				break
			}
		}
		if g == nil {
			kind := "index"
			if ref.UUID != "" {
				kind = "UUID"
			}
			return nil, fmt.Errorf("%s: no GPU with %s %s; this host has %s", req.DeviceSource, kind, ref, describeGPUs(all))
		}
		if seen[g.UUID] {
			return nil, fmt.Errorf("%s: GPU %d (%s) is named twice", req.DeviceSource, g.Index, g.UUID)
		}
		seen[g.UUID] = true
		out = append(out, *g)
	}
	return out, nil
}

func describeGPUs(all []discover.GPU) string {
	if len(all) == 0 {
		return "no GPU"
	}
	var parts []string
	for _, g := range all {
		// "GPU 0 (GPU-5e3b…, NVIDIA H200)": a bare leading index read as a count.
		parts = append(parts, fmt.Sprintf("GPU %d (%s, %s)", g.Index, g.UUID, g.Name))
	}
	return strings.Join(parts, ", ")
}

// size writes n bytes as the request syntax would (4Gi), exact.
func size(n uint64) string { return request.FormatSize(n) }

// orConfig names where a value came from: the request, else the config key.
func orConfig(l request.Limit, key string) string {
	if l.Source != "" {
		return l.Source
	}
	return key + " (config)"
}

// limitSource names where a memory limit came from, for messages.
func limitSource(l request.Limit, cfg *config.Config) string {
	if l.Source != "" {
		return l.Source
	}
	return fmt.Sprintf("defaults.memory_limit=%q (config)", cfg.Defaults.MemoryLimit)
}
