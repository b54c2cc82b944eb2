package inject

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// Paths inside a limited container (docs/design.md).
const (
	ContainerQuota     = "/run/vgpu/quota"
	ContainerShared    = "/run/vgpu/shared"
	ContainerLibDir    = "/usr/lib/vgpu"
	ContainerDriverDir = "/usr/lib/vgpu/driver"
	ContainerPreload   = "/etc/ld.so.preload"
	ContainerBinDir    = "/usr/bin"

	LibCuda = "libvgpu-cuda.so"
	LibNvml = "libvgpu-nvml.so"
)

// Names inside the per-container state directory.
const (
	StateQuota     = "quota"
	StatePreload   = "ld.so.preload"
	StateShared    = "shared"
	StateContainer = "container.json"
)

// PlanDevice is one GPU of the container.
type PlanDevice struct {
	Index   int    `json:"index"` // inside the container
	GPU     GPU    `json:"gpu"`
	Memory  uint64 `json:"memory,omitempty"`  // bytes, 0 = none
	Compute int    `json:"compute,omitempty"` // percent, 0 = none
}

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
	ContainerID string       `json:"id"`
	StateDir    string       `json:"stateDir"` // <state_dir>/<id> on the host
	Devices     []PlanDevice `json:"devices"`
	Nodes       []DeviceNode `json:"nodes"`  // control nodes, then the GPUs'
	Mounts      []Mount      `json:"mounts"` // in mount order
	Env         []string     `json:"env"`    // KEY=value set in the container
	Quota       Quota        `json:"-"`
	Hooks       []PlanHook   `json:"hooks,omitempty"`
	// Filled in by the caller for container.json; not used otherwise.
	Name    string `json:"name,omitempty"`
	Bundle  string `json:"bundle,omitempty"`
	PIDFile string `json:"pidFile,omitempty"`
}

// PlanHook is an OCI hook the shim adds (none by default; reserved).
type PlanHook struct {
	Stage string     `json:"stage"`
	Hook  specs.Hook `json:"hook"`
}

// validIDChars: letters, digits, _ . - (a counted regexp repetition would
// cost every runtime start half a millisecond of compilation).
func validIDChars(id string) bool {
	if len(id) == 0 || len(id) > 254 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// ValidID checks that a container id is usable as a directory name.
func ValidID(id string) error {
	if !validIDChars(id) {
		return fmt.Errorf("container id %q: want letters, digits, _ . - (at most 254, not starting with . _ -)", id)
	}
	return nil
}

// NewPlan resolves req against the host's GPUs. It does no I/O.
func NewPlan(req *spec.Request, cfg *config.Config, host *Host, containerID string) (*Plan, error) {
	if req == nil {
		return nil, fmt.Errorf("NewPlan: no request (the container asked for no GPU)")
	}
	if err := ValidID(containerID); err != nil {
		return nil, err
	}
	gpus, err := selectGPUs(req, host.GPUs)
	if err != nil {
		return nil, err
	}
	n := len(gpus)
	for _, l := range []spec.Limit{req.Memory, req.Compute} {
		if m := l.MaxIndex(); m >= n {
			return nil, fmt.Errorf("%s: device index %d is out of range: the container has %d device(s) (%s), indices 0..%d", l.Source, m, n, req.DeviceSource, n-1)
		}
	}
	if n > maxQuotaDevices {
		return nil, fmt.Errorf("%s: %d GPUs; a vgpu container takes at most %d", req.DeviceSource, n, maxQuotaDevices)
	}
	p := &Plan{ContainerID: containerID, StateDir: filepath.Join(cfg.StateDir, containerID)}
	memDefault := cfg.MemoryDefault()
	for i, g := range gpus {
		d := PlanDevice{Index: i, GPU: g, Memory: req.Memory.For(i), Compute: int(req.Compute.For(i))}
		if d.Memory == 0 {
			d.Memory = memDefault
		}
		if d.Compute == 0 {
			d.Compute = cfg.Defaults.ComputeLimit
		}
		if d.Compute >= 100 {
			d.Compute = 0
		}
		if d.Memory > g.MemoryBytes && g.MemoryBytes > 0 {
			return nil, fmt.Errorf("memory limit %d bytes for container device %d is more than GPU %d (%s) has: %d bytes", d.Memory, i, g.Index, g.UUID, g.MemoryBytes)
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
	gpus = gpus[:0]
	for _, d := range p.Devices {
		gpus = append(gpus, d.GPU)
	}

	// Device nodes: control nodes, then one per selected GPU.
	byPath := map[string]DeviceNode{}
	for _, nd := range host.Nodes {
		byPath[nd.Path] = nd
	}
	for _, c := range ControlNodes {
		if nd, ok := byPath["/dev/"+c.Name]; ok {
			p.Nodes = append(p.Nodes, nd)
		} else if c.Required {
			return nil, fmt.Errorf("host has no /dev/%s", c.Name)
		}
	}
	for _, g := range gpus {
		nd, ok := byPath[fmt.Sprintf("/dev/nvidia%d", g.Minor)]
		if !ok {
			return nil, fmt.Errorf("GPU %d (%s): no device node /dev/nvidia%d", g.Index, g.UUID, g.Minor)
		}
		p.Nodes = append(p.Nodes, nd)
	}

	// Mounts, in order: driver libraries, stand-ins, tools, state files, IPC.
	cuda, nvml := host.library("libcuda"), host.library("libnvidia-ml")
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
		Mount{Source: filepath.Join(p.StateDir, StateQuota), Destination: ContainerQuota, ReadOnly: true},
		Mount{Source: filepath.Join(p.StateDir, StateShared), Destination: ContainerShared, Dir: true},
		Mount{Source: filepath.Join(p.StateDir, StatePreload), Destination: ContainerPreload, ReadOnly: true},
	)
	for _, ipc := range host.IPCPaths {
		dst := "/" + strings.TrimPrefix(filepath.ToSlash(ipc.Rel), "/")
		p.Mounts = append(p.Mounts, Mount{Source: cfg.DriverPath(ipc.Rel), Destination: dst, Dir: ipc.Dir})
	}

	// NVIDIA's hooks/runtime must not inject a second time.
	p.Env = []string{"NVIDIA_VISIBLE_DEVICES=void"}

	p.Quota = Quota{
		DriverCuda: ContainerDriverDir + "/" + cuda.Name,
		DriverNvml: ContainerDriverDir + "/" + nvml.Name,
		SharedDir:  ContainerShared,
		LogLevel:   cfg.Library.LogLevel,
	}
	period, err := config.ParseComputePeriod(cfg.Library.ComputePeriod)
	if err != nil {
		return nil, fmt.Errorf("library.compute_period: %w", err)
	}
	p.Quota.ComputePeriodMS = period
	for _, d := range p.Devices {
		p.Quota.Devices = append(p.Quota.Devices, QuotaDevice{Index: d.Index, UUID: d.GPU.UUID, Memory: d.Memory, Compute: d.Compute})
	}
	if _, err := p.Quota.Marshal(); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	return p, nil
}

func selectGPUs(req *spec.Request, all []GPU) ([]GPU, error) {
	if req.All {
		if len(all) == 0 {
			return nil, fmt.Errorf("%s: the host has no GPU", req.DeviceSource)
		}
		return append([]GPU(nil), all...), nil
	}
	var out []GPU
	seen := map[string]bool{}
	for _, ref := range req.Devices {
		var g *GPU
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

func describeGPUs(all []GPU) string {
	if len(all) == 0 {
		return "no GPU"
	}
	var parts []string
	for _, g := range all {
		parts = append(parts, fmt.Sprintf("%d %s (%s)", g.Index, g.UUID, g.Name))
	}
	return strings.Join(parts, ", ")
}
