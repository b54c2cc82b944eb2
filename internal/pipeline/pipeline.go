// Package pipeline is the one way a container gets GPUs:
//
//	request -> plan -> state -> apply
//
// Every entry point calls Run: vgpu-runtime (the spec), vgpu-hook (the rootfs;
// from hooks.d or from the CDI spec) and `vgpu exec` (a process on the host).
// The device plugin's allocations reach it through FromSpec (container.go).
// Each step produces what the next reads and none rewrites an earlier one's
// output:
//
//  1. the request (internal/request): parsed from the container's env and
//     annotations, or given already trusted (Allocation.Request);
//  2. discovery (internal/discover), unless the caller passes the host, and
//     the driver check (internal/drivercheck): a driver that exports what
//     the stand-ins lack is refused here, before anything is written;
//  3. the plan (internal/plan): pure, everything the container gets;
//  4. the state (internal/state): the container record, derived from the
//     plan; under the state directory's lock its admission and the slots of
//     its paced devices (internal/slots), then container.json, the quota
//     file rendered from the record, ld.so.preload, shared/ and host/, all
//     at once;
//  5. Target.Apply: the spec or rootfs edits (internal/apply), refused
//     there or done; on error the state is removed again, so both are in
//     place or neither.
package pipeline

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/drivercheck"
	"github.com/vgpu-dev/vgpu/internal/mpsdir"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Input is one container's way through the pipeline.
type Input struct {
	Config      *config.Config
	ContainerID string
	// Request is what the container gets, non-nil: from request.Parse /
	// ParseWithDefaults (untrusted env and annotations) or from
	// Allocation.Request (a caller that already trusts its source).
	Request *request.Request
	// Host is what discovery found; nil: discover.Discover(Config).
	Host *discover.Host
	// Recorded in container.json (vgpu status).
	Name, Bundle, PIDFile string
	// PIDFileInState: the runtime was given no pid file (create or run
	// without --pid-file); the record names one in the container's state directory
	// (config.StateInitPID), which the caller passes to the runtime.
	PIDFileInState bool
	// Rootfs is read for the image's own /etc/ld.so.preload ("" = none).
	Rootfs string
	// PIDs and InitStart: the container's init, when it is known before
	// the record is written (vgpu exec: the process itself).
	PIDs      []int
	InitStart uint64
	// OnHost: the process runs on the host, not in a container (vgpu exec):
	// see plan.OnHost.
	OnHost bool
	// Target edits the container; nil: the state alone (vgpu exec).
	Target Target
	// UID is the host user id the container's processes run as (nil:
	// unknown). On a spatial GPU MPS runs one server per user, so the
	// state store refuses a second user there (docs/spatial.md).
	UID *uint32
}

// Target is where the plan goes besides the state directory.
type Target interface {
	// Apply runs once the state directory is in place: it checks what it
	// needs and edits the container; on error it leaves the container as it
	// was and the state directory is removed again, so that nothing changed.
	Apply(p *plan.Plan) error
}

// Result is what Run did.
type Result struct {
	Plan   *plan.Plan
	Record *tenant.Record // the container record as written, phases included
}

// Run takes one container through the pipeline (see the package comment).
// Its errors name the container.
func Run(in Input) (*Result, error) {
	res, err := run(in)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", in.ContainerID, err)
	}
	return res, nil
}

func run(in Input) (*Result, error) {
	if in.Request == nil {
		return nil, fmt.Errorf("no GPU request: a container that asks for none is passed through, not planned")
	}
	if err := config.ValidID(in.ContainerID); err != nil {
		return nil, err // before discovery: an id the engine made up costs nothing
	}
	host := in.Host
	if host == nil {
		var err error
		if host, err = discover.Discover(in.Config); err != nil {
			return nil, fmt.Errorf("asks for a GPU: %w", err)
		}
	}
	if err := checkDriver(host, in.Config); err != nil {
		return nil, fmt.Errorf("asks for a GPU: %w", err)
	}
	var opts []plan.Option
	if in.OnHost {
		opts = append(opts, plan.OnHost())
	}
	p, err := plan.New(in.Request, in.Config, host, in.ContainerID, opts...)
	if err != nil {
		return nil, err
	}
	for _, d := range p.Devices {
		if !d.Mode.IsSpatial() {
			continue
		}
		// the pipe directory is mounted and its daemon is the container's
		// only way to the GPU: without it every CUDA call would fail
		dirs := mpsdir.Of(in.Config, d.GPU.UUID)
		if _, ok := dirs.Live(); !ok {
			return nil, fmt.Errorf("GPU %d (%s) is spatial (config spatial.gpus) but its MPS control daemon is not running (no live pid in %s): start vgpu node, which runs it", d.GPU.Index, d.GPU.UUID, filepath.Join(dirs.Pipe, mpsdir.PIDFile))
		}
	}
	image, err := ImagePreload(in.Rootfs)
	if err != nil {
		return nil, err
	}
	rec := p.Record()
	rec.Name, rec.Bundle, rec.PIDFile, rec.PIDs, rec.InitStart, rec.UID, rec.OnHost = in.Name, in.Bundle, in.PIDFile, in.PIDs, in.InitStart, in.UID, in.OnHost
	if in.PIDFileInState {
		rec.PIDFile = filepath.Join(p.StateDir, config.StateInitPID)
	}
	written, err := state.Create(in.Config.StateDir, rec, plan.PreloadContent(image))
	if err != nil {
		return nil, err
	}
	if in.Target != nil {
		if err := in.Target.Apply(p); err != nil {
			if rerr := state.Remove(in.Config.StateDir, in.ContainerID); rerr != nil {
				return nil, fmt.Errorf("%w (and removing %s: %v)", err, p.StateDir, rerr)
			}
			return nil, err
		}
	}
	return &Result{Plan: p, Record: written}, nil
}

// DriverCheckFile is where a driver whose exports the stand-ins cover is
// remembered, in the state directory (dot files are not containers).
const DriverCheckFile = ".driver-checked"

// checkDriver is checkDriverExports; the unit tests' fake driver roots hold
// no ELF files and replace it.
var checkDriver = checkDriverExports

// checkDriverExports refuses a driver that exports functions the stand-ins
// in cfg.Library.Dir lack (a newer driver than their symbol lists): every
// entry point gets the check, since each one preloads the stand-ins.
func checkDriverExports(host *discover.Host, cfg *config.Config) error {
	var pairs []drivercheck.Pair
	for _, l := range []struct{ driver, standIn string }{{"libcuda.so.", plan.LibCuda}, {"libnvidia-ml.so.", plan.LibNvml}} {
		for _, f := range host.Libraries {
			if strings.HasPrefix(f.Name, l.driver) {
				pairs = append(pairs, drivercheck.Pair{Driver: f.Path, StandIn: filepath.Join(cfg.Library.Dir, l.standIn)})
			}
		}
	}
	return drivercheck.Check(pairs, host.DriverVersion, filepath.Join(cfg.StateDir, DriverCheckFile))
}

// Allocation is an allocation from a caller that already trusts its source
// (a device plugin's Allocate, a DRA claim): host GPUs by UUID and a limit
// per device. It is not parsed from anything the container controls.
type Allocation struct {
	UUIDs   []string // host GPUs, in the container's order
	Memory  []uint64 // bytes per device (same order); missing or 0: the config's default, else none
	Compute []int    // percent per device 1..100 (100 = no limit); missing or 0: the config's default
	// ComputeRequest: percent per device guaranteed under contention (the
	// Kubernetes cores); missing or 0: none (the request is the limit).
	ComputeRequest []int
	// MemoryRequest: bytes per device guaranteed (the Kubernetes memory);
	// missing or 0: none (the request is the limit).
	MemoryRequest []uint64
	// Priority of every device: high, normal or low, from the host (a
	// DeviceClass's config, the host's PriorityClass table); "": the
	// config's default.
	Priority string
	Source   string // names the allocation in messages, e.g. "claim default/train-gpu"
}

// MemoryAsRequests makes the allocation's memory the amounts a scheduler counted:
// they become the requests, and the limits follow the host's policy (config
// kubernetes.memory_limit, or a DeviceClass's memoryLimit): equal to the
// request ("request", the default); "none": no limit from the allocation, so the
// limit of any request-only tenant holds (defaults.memory_limit if set, else
// the GPU's memory); a size: that limit, never below the request. Never from
// what the pod's author writes. A policy that does not parse: an error
// naming it, and the allocation is unchanged.
func (g *Allocation) MemoryAsRequests(policy string) error {
	size, err := config.MemoryLimitSize(policy)
	if err != nil {
		return fmt.Errorf("%s: memory limit policy %w", g.Source, err)
	}
	g.MemoryRequest = append([]uint64(nil), g.Memory...)
	for i, m := range g.Memory {
		switch {
		case policy == config.MemoryLimitNone:
			g.Memory[i] = 0
		case size > 0:
			g.Memory[i] = max(size, m)
		}
	}
	return nil
}

// CoresAsRequests makes the allocation's compute the cores a scheduler counted:
// they become the requests, and the limits follow the host's policy
// (config kubernetes.cores_limit): equal to the request ("request", the
// default), or none ("none": the idle GPU is the tenant's to use). Never
// from what the pod's author writes.
func (g *Allocation) CoresAsRequests(policy string) {
	g.ComputeRequest = append([]int(nil), g.Compute...)
	if policy == config.CoresLimitNone {
		for i := range g.Compute {
			g.Compute[i] = 100
		}
	}
}

// Request is the allocation as the pipeline's typed request.
func (g Allocation) Request() (*request.Request, error) {
	if len(g.UUIDs) == 0 {
		return nil, fmt.Errorf("%s: allocates no GPU", g.Source)
	}
	if len(g.Memory) > len(g.UUIDs) || len(g.Compute) > len(g.UUIDs) || len(g.ComputeRequest) > len(g.UUIDs) || len(g.MemoryRequest) > len(g.UUIDs) {
		return nil, fmt.Errorf("%s: more limits than GPUs", g.Source)
	}
	r := &request.Request{DeviceSource: g.Source}
	for _, u := range g.UUIDs {
		if !strings.HasPrefix(u, "GPU-") && !strings.HasPrefix(u, "MIG-") {
			return nil, fmt.Errorf("%s: %q is not a GPU UUID", g.Source, u)
		}
		r.Devices = append(r.Devices, request.DeviceRef{Index: -1, UUID: u})
	}
	r.Memory.Source, r.Compute.Source = g.Source, g.Source
	for i, m := range g.Memory {
		if m > 0 {
			if r.Memory.PerDevice == nil {
				r.Memory.PerDevice = map[int]uint64{}
			}
			r.Memory.PerDevice[i] = m
		}
	}
	for i, c := range g.Compute {
		if c < 0 || c > 100 {
			return nil, fmt.Errorf("%s: compute %d for device %d: use 1..100", g.Source, c, i)
		}
		if c > 0 {
			if r.Compute.PerDevice == nil {
				r.Compute.PerDevice = map[int]uint64{}
			}
			r.Compute.PerDevice[i] = uint64(c)
		}
	}
	r.ComputeRequest.Source = g.Source
	for i, c := range g.ComputeRequest {
		if c < 0 || c > 100 || i < len(g.Compute) && g.Compute[i] > 0 && c > g.Compute[i] {
			return nil, fmt.Errorf("%s: compute request %d for device %d: use 1..100, at most the limit", g.Source, c, i)
		}
		if c > 0 {
			if r.ComputeRequest.PerDevice == nil {
				r.ComputeRequest.PerDevice = map[int]uint64{}
			}
			r.ComputeRequest.PerDevice[i] = uint64(c)
		}
	}
	if g.Priority != "" {
		v, err := request.ParsePriorityValue(g.Priority)
		if err != nil {
			return nil, fmt.Errorf("%s: priority %q: use high, normal or low", g.Source, g.Priority)
		}
		r.Priority = request.Limit{All: v, Source: g.Source}
	}
	r.MemoryRequest.Source = g.Source
	for i, m := range g.MemoryRequest {
		if i < len(g.Memory) && g.Memory[i] > 0 && m > g.Memory[i] {
			return nil, fmt.Errorf("%s: memory request %s for device %d is above its limit %s: a request is at most its limit; lower the request or raise the limit", g.Source, request.FormatSize(m), i, request.FormatSize(g.Memory[i]))
		}
		if m > 0 {
			if r.MemoryRequest.PerDevice == nil {
				r.MemoryRequest.PerDevice = map[int]uint64{}
			}
			r.MemoryRequest.PerDevice[i] = m
		}
	}
	return r, nil
}
