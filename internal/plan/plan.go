// Package plan decides what a limited container gets: one description, the
// Plan, computed by a pure function (New) from the request, the config and
// what discovery found, seam by seam: the devices (devices.go; one device's
// settings in device, where a new per-device setting is read), the device
// nodes (nodes.go), the mounts (mounts.go) and the library's settings
// (library.go). Nothing here does I/O, so its rules are unit tests on an
// in-memory host; internal/state writes the plan's per-container files and
// internal/apply puts the rest into a spec or a rootfs.
package plan

import (
	"bytes"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/config"
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
// New, and applied to a spec or a rootfs by internal/apply.
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

// New resolves req against the host's GPUs. It does no I/O: host is what
// discovery found, and the plan's seams (devices, nodes, mounts, library)
// read nothing else. The container id names the state directory
// (config.ValidID).
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
	p := &Plan{ContainerID: containerID, StateDir: cfg.ContainerStateDir(containerID)}
	places := tenant.Places{Dir: p.StateDir}
	var err error
	if p.Devices, err = devices(req, cfg, host.GPUs); err != nil {
		return nil, err
	}
	if p.Nodes, err = nodes(host.Nodes, p.Devices); err != nil {
		return nil, err
	}
	spatial := spatialDevice(p.Devices)
	if p.Mounts, err = mounts(host, cfg, places, spatial); err != nil {
		return nil, err
	}
	if spatial != nil {
		spatial.MPSPipe = mpsPipe(cfg, spatial, o.onHost)
	}
	// NVIDIA's hooks/runtime must not inject a second time.
	p.Env = []string{"NVIDIA_VISIBLE_DEVICES=void"}
	for _, d := range p.Devices {
		p.Env = append(p.Env, d.Env()...)
	}
	if p.Library, err = library(host, cfg, places, o.onHost); err != nil {
		return nil, err
	}
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
