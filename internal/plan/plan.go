// Package plan decides what a limited container gets: one description, the
// Plan, computed by a pure function (New) from the request, the config and
// what discovery found. Nothing here does I/O; internal/state writes the
// plan's per-container files and internal/apply puts the rest into a spec or
// a rootfs.
package plan

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Paths inside a limited container (docs/design.md).
const (
	ContainerLibDir    = "/usr/lib/vgpu"
	ContainerDriverDir = "/usr/lib/vgpu/driver"
	ContainerPreload   = "/etc/ld.so.preload"
	ContainerBinDir    = "/usr/bin"
	// ContainerShm: the GPU's MPS shared memory, where clients and their
	// server meet, replaces the container's own /dev/shm.
	ContainerShm = "/dev/shm"

	LibCuda = "libvgpu-cuda.so"
	LibNvml = "libvgpu-nvml.so"
)

// Mount is a bind mount into the container.
type Mount struct {
	Source      string `json:"source"`      // host path
	Destination string `json:"destination"` // container path
	ReadOnly    bool   `json:"readOnly"`
	Dir         bool   `json:"dir"` // a directory (else a file or socket)
}

// Plan is everything a limited container gets. It is computed once, by
// NewPlan, and applied to a spec (ApplyToSpec) or a rootfs (ApplyToRootfs).
type Plan struct {
	ContainerID string                `json:"id"`
	StateDir    string                `json:"stateDir"` // <state_dir>/<id> on the host
	Devices     []tenant.Device       `json:"devices"`
	Nodes       []discover.DeviceNode `json:"nodes"`  // control nodes, then the GPUs'
	Mounts      []Mount               `json:"mounts"` // in mount order
	Env         []string              `json:"env"`    // KEY=value set in the container
	// Library: the quota file's header (internal/quota renders the file
	// from the record, Record).
	Library tenant.Library `json:"-"`
	Hooks   []PlanHook     `json:"hooks,omitempty"`
}

// PlanHook is an OCI hook the shim adds (none by default; reserved).
type PlanHook struct {
	Stage string     `json:"stage"`
	Hook  specs.Hook `json:"hook"`
}

// Option changes what New plans for.
type Option func(*options)

type options struct{ onHost bool }

// OnHost plans for a process that runs on the host, not in a container
// (vgpu exec): the library is told the driver's libraries and the shared
// directory by their host paths. Mounts and nodes are still computed; such a
// caller ignores them.
func OnHost() Option { return func(o *options) { o.onHost = true } }

// New resolves req against the host's GPUs. It does no I/O. The container
// id names the state directory (config.ValidID).
func New(req *request.Request, cfg *config.Config, host *discover.Host, containerID string, opts ...Option) (*Plan, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if req == nil {
		return nil, fmt.Errorf("plan.New: no request (the container asked for no GPU)")
	}
	if err := config.ValidID(containerID); err != nil {
		return nil, err
	}
	gpus, err := Select(req, host.GPUs)
	if err != nil {
		return nil, err
	}
	n := len(gpus)
	for _, l := range []request.Limit{req.Memory, req.Compute, req.ComputeRequest, req.MemoryRequest, req.Priority} {
		if m := l.MaxIndex(); m >= n {
			return nil, fmt.Errorf("%s: device index %d is out of range: the container has %d device(s) (%s), indices 0..%d", l.Source, m, n, req.DeviceSource, n-1)
		}
	}
	if n > contract.MaxDevices {
		return nil, fmt.Errorf("%s: %d GPUs; a vgpu container takes at most %d", req.DeviceSource, n, contract.MaxDevices)
	}
	p := &Plan{ContainerID: containerID, StateDir: cfg.ContainerStateDir(containerID)}
	places := tenant.Places{Dir: p.StateDir}
	memDefault := cfg.MemoryDefault()
	for i, g := range gpus {
		// 0 in the request: not given, the config's default applies; 0
		// there: no limit, whose one form is ComputeUnlimited.
		d := tenant.Device{Index: i, GPU: tenant.GPU(g), Memory: req.Memory.For(i), Compute: int(req.Compute.For(i))}
		if d.Memory == 0 {
			d.Memory = memDefault
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
				return nil, fmt.Errorf("compute request %d%% with limit %d%% on container device %d (%s): GPU %d (%s) is spatial (MPS): a container there holds a fixed share of the SMs, its compute limit, and cannot borrow; give the share as the limit alone (e.g. VGPU_COMPUTE_LIMIT=%d), or use a time-sliced GPU", creq, d.Compute, i, orConfig(req.ComputeRequest, "defaults.compute_request"), g.Index, g.UUID, creq)
			}
			creq = 0
		}
		if creq > 0 {
			if creq > d.Compute {
				return nil, fmt.Errorf("compute request %d%% is above its limit %d%% on container device %d (%s, %s): a request is at most its limit; lower the request or raise the limit", creq, d.Compute, i, orConfig(req.ComputeRequest, "defaults.compute_request"), orConfig(req.Compute, "defaults.compute_limit"))
			}
			d.ComputeRequest = &creq
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
			return nil, fmt.Errorf("memory request %s is above its limit %s on container device %d (%s, %s): a request is at most its limit; lower the request or raise the limit", size(d.MemoryRequest), size(d.Memory), i, orConfig(req.MemoryRequest, "defaults.memory_request"), orConfig(req.Memory, "defaults.memory_limit"))
		}
		if d.Memory > g.MemoryBytes && g.MemoryBytes > 0 {
			return nil, fmt.Errorf("%s: memory limit %s for container device %d is more than GPU %d (%s) has: %s", limitSource(req.Memory, cfg), size(d.Memory), i, g.Index, g.UUID, size(g.MemoryBytes))
		}
		p.Devices = append(p.Devices, d)
	}
	// Limits follow the request's order (0=… is the first GPU named); the
	// container numbers its GPUs in the host's order, as the driver's CUDA
	// enumeration does, so that NVML, nvidia-smi and CUDA agree on device 0.
	sort.SliceStable(p.Devices, func(i, j int) bool { return p.Devices[i].GPU.Index < p.Devices[j].GPU.Index })
	for i := range p.Devices {
		p.Devices[i].Index = i
	}
	var spatial *tenant.Device
	for i, d := range p.Devices {
		if d.Mode.IsSpatial() {
			spatial = &p.Devices[i]
		}
	}
	// One MPS client reaches one control daemon (CUDA_MPS_PIPE_DIRECTORY
	// is per process), and through it only that daemon's GPU.
	if spatial != nil && len(p.Devices) > 1 {
		return nil, fmt.Errorf("%s: GPU %d (%s) is spatial (MPS, config spatial.gpus) and the container asks for %d GPUs: a container on a spatial GPU takes that GPU alone; ask for it alone, or for time-sliced GPUs only", req.DeviceSource, spatial.GPU.Index, spatial.GPU.UUID, len(p.Devices))
	}

	// Device nodes: control nodes, then one per selected GPU.
	byPath := map[string]discover.DeviceNode{}
	for _, nd := range host.Nodes {
		byPath[nd.Path] = nd
	}
	for _, c := range discover.ControlNodes {
		if nd, ok := byPath["/dev/"+c.Name]; ok {
			p.Nodes = append(p.Nodes, nd)
		} else if c.Required {
			return nil, fmt.Errorf("host has no /dev/%s", c.Name)
		}
	}
	for _, d := range p.Devices {
		g := d.GPU
		nd, ok := byPath[fmt.Sprintf("/dev/nvidia%d", g.Minor)]
		if !ok {
			return nil, fmt.Errorf("GPU %d (%s): no device node /dev/nvidia%d", g.Index, g.UUID, g.Minor)
		}
		p.Nodes = append(p.Nodes, nd)
	}

	// Mounts, in order: driver libraries, stand-ins, tools, state files, IPC.
	cuda, nvml := host.Library("libcuda"), host.Library("libnvidia-ml")
	if cuda == nil || nvml == nil {
		return nil, fmt.Errorf("driver %s: libcuda or libnvidia-ml missing", host.DriverVersion)
	}
	for _, l := range host.Libraries {
		p.Mounts = append(p.Mounts, Mount{Source: l.Path, Destination: ContainerDriverDir + "/" + l.Name, ReadOnly: true})
	}
	for _, l := range []string{LibCuda, LibNvml} {
		p.Mounts = append(p.Mounts, Mount{Source: filepath.Join(cfg.Library.Dir, l), Destination: ContainerLibDir + "/" + l, ReadOnly: true})
	}
	for _, b := range host.Binaries {
		p.Mounts = append(p.Mounts, Mount{Source: b.Path, Destination: ContainerBinDir + "/" + b.Name, ReadOnly: true})
	}
	p.Mounts = append(p.Mounts,
		Mount{Source: places.Quota(), Destination: contract.QuotaPath, ReadOnly: true},
		Mount{Source: places.Shared(), Destination: tenant.ContainerShared, Dir: true},
		Mount{Source: places.Host(), Destination: tenant.ContainerHost, ReadOnly: true, Dir: true},
		Mount{Source: places.Preload(), Destination: ContainerPreload, ReadOnly: true},
	)
	for _, ipc := range host.IPCPaths {
		dst := "/" + strings.TrimPrefix(filepath.ToSlash(ipc.Rel), "/")
		p.Mounts = append(p.Mounts, Mount{Source: cfg.DriverPath(ipc.Rel), Destination: dst, Dir: ipc.Dir})
	}
	mpsPipe := contract.MPSPipeDir
	if spatial != nil {
		dir := cfg.MPSDir(spatial.GPU.UUID)
		if o.onHost {
			mpsPipe = filepath.Join(dir, config.MPSPipe)
		}
		p.Mounts = append(p.Mounts,
			Mount{Source: filepath.Join(dir, config.MPSPipe), Destination: contract.MPSPipeDir, ReadOnly: true, Dir: true},
			Mount{Source: filepath.Join(dir, config.MPSShm), Destination: ContainerShm, Dir: true})
	}

	// NVIDIA's hooks/runtime must not inject a second time.
	p.Env = []string{"NVIDIA_VISIBLE_DEVICES=void"}
	for i := range p.Devices {
		if p.Devices[i].Mode.IsSpatial() {
			p.Devices[i].MPSPipe = mpsPipe
		}
		p.Env = append(p.Env, p.Devices[i].Env()...)
	}

	p.Library = tenant.Library{
		DriverCuda: ContainerDriverDir + "/" + cuda.Name,
		DriverNvml: ContainerDriverDir + "/" + nvml.Name,
		SharedDir:  tenant.ContainerShared,
		LogLevel:   cfg.Library.LogLevel,
	}
	if o.onHost {
		p.Library.DriverCuda, p.Library.DriverNvml = cuda.Path, nvml.Path
		p.Library.SharedDir = places.Shared()
	}
	period, err := config.ParseComputePeriod(cfg.Library.ComputePeriod)
	if err != nil {
		return nil, fmt.Errorf("library.compute_period: %w", err)
	}
	p.Library.ComputePeriodMS = period
	// What the state store will write must be writable: refuse now, before
	// anything is created (phases, added later, are in range by construction).
	rec := p.Record()
	if err := quota.Render(&rec).Validate(); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	return p, nil
}

// Record is the tenant record the plan describes: its devices and the
// library's settings. The caller adds what is not the plan's (name,
// bundle, pid file); internal/state assigns the phases.
func (p *Plan) Record() tenant.Record {
	lib := p.Library
	return tenant.Record{ID: p.ContainerID, Devices: append([]tenant.Device{}, p.Devices...), Library: &lib}
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

// limitSource names where a memory limit came from, for messages.
// orConfig names where a value came from: the request, else the config key.
func orConfig(l request.Limit, key string) string {
	if l.Source != "" {
		return l.Source
	}
	return key + " (config)"
}

func limitSource(l request.Limit, cfg *config.Config) string {
	if l.Source != "" {
		return l.Source
	}
	return fmt.Sprintf("defaults.memory_limit=%q (config)", cfg.Defaults.MemoryLimit)
}

// PreloadContent is the container's /etc/ld.so.preload: the image's entries, then ours.
func PreloadContent(image []string) []byte {
	var b bytes.Buffer
	for _, l := range image {
		b.WriteString(l + "\n")
	}
	b.WriteString(ContainerLibDir + "/" + LibCuda + "\n")
	b.WriteString(ContainerLibDir + "/" + LibNvml + "\n")
	return b.Bytes()
}
