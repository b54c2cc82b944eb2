package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/quota"
)

// InfoVersion is the version of container.json this release writes:
//
//   - 0 (no "version" member, release 0.1.0) and 1: who the container is
//     and its limits; the phases and the library's settings are in the
//     quota file alone, and Read takes them (and the limits) from there;
//   - 2: the whole record; the quota file is rendered from it (Info.Quota)
//     and never read back.
const InfoVersion = 2

// Info is the container record, container.json: the one description of a
// container on the host. The plan gives it (FromPlan), Create assigns its
// slots and writes it together with the quota file rendered from it, and
// every reader takes it from Read or List. Its members are its own, never
// another package's type, so that the file changes only with this version.
type Info struct {
	Version int       `json:"version,omitempty"`
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Bundle  string    `json:"bundle,omitempty"`
	Created time.Time `json:"created"`
	PIDs    []int     `json:"pids,omitempty"`    // host pids, when known
	PIDFile string    `json:"pidFile,omitempty"` // where the runtime writes the init pid (create --pid-file)
	// InitStart: the init's start time (clock ticks after boot, field 22 of
	// /proc/<pid>/stat): with PIDs[0] it names the init for good, never a
	// process that reused its pid.
	InitStart uint64 `json:"initStart,omitempty"`
	// Cgroup: the container's cgroup on the host (the v1 freezer's path on
	// a v1 host, else the unified one), recorded at create before the
	// container's own code ran. Every process in it or below belongs to the
	// container, whatever it sees or hides (internal/node/procmap).
	Cgroup  string   `json:"cgroup,omitempty"`
	Devices []Device `json:"devices"`
	// Library: what the quota file tells the library besides the devices.
	Library *Library `json:"library,omitempty"`
	// DriverLimits: which holds the memory limits (internal/driverlimit);
	// nil: the library and vgpu node, as before the driver had a limit.
	DriverLimits *DriverLimits `json:"driverLimits,omitempty"`
	// UID: the host user id of the container's processes, when known (a
	// spatial GPU takes one user: admitMode).
	UID *uint32 `json:"uid,omitempty"`
	// OnHost: a process on the host (vgpu exec), not a container: the
	// cgroup it runs in is its caller's (a login session, a service, vgpu
	// node's own), never the record's to claim.
	OnHost bool `json:"onHost,omitempty"`
}

// Library is the quota file's header: where the library finds the driver
// and its shared directory, its log level and pacing period.
type Library struct {
	DriverCuda string `json:"driverCuda"`
	DriverNvml string `json:"driverNvml"`
	SharedDir  string `json:"sharedDir"`
	LogLevel   string `json:"logLevel,omitempty"`
	// ComputePeriodMS: nil = the library's default; 0 = launch by launch.
	ComputePeriodMS *int `json:"computePeriodMs,omitempty"`
}

// DriverLimits records the driver's per-cgroup memory limits of a container.
type DriverLimits struct {
	Cgroup string `json:"cgroup,omitempty"` // full sysfs path the limits are set on
	Set    bool   `json:"set"`              // true: the driver holds them; false: Why
	Why    string `json:"why,omitempty"`
}

// Device is one GPU of the container.
type Device struct {
	Index   int    `json:"index"` // inside the container
	GPU     GPU    `json:"gpu"`
	Memory  uint64 `json:"memory,omitempty"`  // bytes, 0 = no limit
	Compute int    `json:"compute,omitempty"` // percent; 100 = no limit (0 in files of the first release: none)
	// Requests beside the limits (absent: none given).
	ComputeRequest *int   `json:"computeRequest,omitempty"`
	MemoryRequest  uint64 `json:"memoryRequest,omitempty"`
	// Phase: where the device's stretch starts in each pacing period,
	// percent (internal/slots); nil = none.
	Phase *int `json:"phase,omitempty"`
	// Spatial: shared through MPS (docs/spatial.md); MPSPipe is the pipe
	// directory inside the container.
	Spatial bool   `json:"spatial,omitempty"`
	MPSPipe string `json:"mpsPipe,omitempty"`
}

// GPU is the host GPU a device is, as discovery found it at create.
type GPU struct {
	Index       int    `json:"index"` // NVML index on the host
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	Minor       int    `json:"minor"` // /dev/nvidia<Minor>
	MemoryBytes uint64 `json:"memoryBytes"`
	PCIBusID    string `json:"pciBusId,omitempty"`
}

// FromPlan is the record of a planned container: its devices and the
// library's settings. The caller adds what is not the plan's (name,
// bundle, pid file); Create assigns the phases.
func FromPlan(p *plan.Plan) Info {
	info := Info{ID: p.ContainerID, Devices: []Device{}}
	l := p.Library
	info.Library = &Library{DriverCuda: l.DriverCuda, DriverNvml: l.DriverNvml, SharedDir: l.SharedDir, LogLevel: l.LogLevel, ComputePeriodMS: l.ComputePeriodMS}
	for _, d := range p.Devices {
		g := d.GPU
		info.Devices = append(info.Devices, Device{Index: d.Index,
			GPU:    GPU{Index: g.Index, UUID: g.UUID, Name: g.Name, Minor: g.Minor, MemoryBytes: g.MemoryBytes, PCIBusID: g.PCIBusID},
			Memory: d.Memory, Compute: d.Compute, ComputeRequest: d.ComputeRequest, MemoryRequest: d.MemoryRequest, Phase: d.Phase,
			Spatial: d.Spatial, MPSPipe: d.MPSPipe})
	}
	return info
}

// Quota renders the quota file of the record.
func (i *Info) Quota() *quota.File {
	q := &quota.File{}
	if l := i.Library; l != nil {
		q.DriverCuda, q.DriverNvml, q.SharedDir, q.LogLevel, q.ComputePeriodMS = l.DriverCuda, l.DriverNvml, l.SharedDir, l.LogLevel, l.ComputePeriodMS
	}
	for _, d := range i.Devices {
		q.Devices = append(q.Devices, d.quota())
	}
	q.FormatVersion = q.WriteVersion()
	return q
}

func (d Device) quota() quota.Device {
	return quota.Device{Index: d.Index, UUID: d.GPU.UUID, Memory: d.Memory, Compute: d.Compute,
		ComputeRequest: d.ComputeRequest, MemoryRequest: d.MemoryRequest, Phase: d.Phase, Spatial: d.Spatial, MPSPipe: d.MPSPipe}
}

// Request is the device's compute request (quota.Device.Request).
func (d Device) Request() int { return d.quota().Request() }

// Paced says whether the library paces the device (quota.Device.Paced).
func (d Device) Paced() bool { return d.quota().Paced() }

// ComputePeriodMS is the pacing period the library uses, in ms.
func (i *Info) ComputePeriodMS() int {
	if i.Library != nil && i.Library.ComputePeriodMS != nil {
		return *i.Library.ComputePeriodMS
	}
	return contract.DefaultPeriodMS
}

// Read reads the record of one container.
func Read(stateDir, id string) (*Info, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	dir := filepath.Join(stateDir, id)
	info, err := readInfo(dir)
	if err != nil {
		return nil, err
	}
	if info.Version >= 2 {
		return info, nil
	}
	qd, err := os.ReadFile(filepath.Join(dir, config.StateQuota))
	if err != nil {
		return nil, err
	}
	q, err := quota.Parse(qd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, config.StateQuota), err)
	}
	info.upgrade(q)
	return info, nil
}

// readInfo parses container.json as it is on disk (no upgrade).
func readInfo(dir string) (*Info, error) {
	data, err := os.ReadFile(filepath.Join(dir, config.StateInfo))
	if err != nil {
		return nil, err
	}
	info, err := parseInfo(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, config.StateInfo), err)
	}
	return info, nil
}

// parseInfo reads container.json of any release up to InfoVersion. The
// first release (no version) left compute out for "no limit"; it is read as
// contract.ComputeUnlimited, the one form of "no limit".
func parseInfo(data []byte) (*Info, error) {
	var info Info
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, err
	}
	if info.Version > InfoVersion {
		return nil, fmt.Errorf("container.json version %d is newer than this vgpu reads (%d): upgrade vgpu", info.Version, InfoVersion)
	}
	for i := range info.Devices {
		if info.Devices[i].Compute == 0 {
			info.Devices[i].Compute = contract.ComputeUnlimited
		}
	}
	return &info, nil
}

// upgrade completes a record of version 0 or 1 from its quota file, which
// is what its library enforces: the library's settings and each device's
// limits, requests and phase; container.json adds which GPU each is.
func (i *Info) upgrade(q *quota.File) {
	i.Library = &Library{DriverCuda: q.DriverCuda, DriverNvml: q.DriverNvml, SharedDir: q.SharedDir, LogLevel: q.LogLevel, ComputePeriodMS: q.ComputePeriodMS}
	gpus := map[int]GPU{}
	for _, d := range i.Devices {
		gpus[d.Index] = d.GPU
	}
	i.Devices = make([]Device, 0, len(q.Devices))
	for _, d := range q.Devices {
		g, ok := gpus[d.Index]
		if !ok || !strings.EqualFold(g.UUID, d.UUID) {
			g = GPU{Index: -1, UUID: d.UUID}
		}
		i.Devices = append(i.Devices, Device{Index: d.Index, GPU: g, Memory: d.Memory, Compute: d.Compute,
			ComputeRequest: d.ComputeRequest, MemoryRequest: d.MemoryRequest, Phase: d.Phase, Spatial: d.Spatial, MPSPipe: d.MPSPipe})
	}
}

// FromQuota is the record of container id that quota file q describes,
// with the GPUs known by their UUIDs alone: what Read makes of a record of
// version 0 or 1 that names no devices, and a test's way to a record.
func FromQuota(id string, q *quota.File) Info {
	info := Info{ID: id}
	info.upgrade(q)
	return info
}

// Entry is one container of List: its record, or why it cannot be read.
type Entry struct {
	ID   string
	Info *Info // nil when Err
	Err  error
}

// List reads every container of the state directory, in the order of their
// ids. It passes over what is not a container: dot files (the lock, caches)
// and the temp and half-removed directories of Create and Remove. A missing
// directory has no containers.
func List(stateDir string) ([]Entry, error) {
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range ents {
		id := e.Name()
		if strings.HasPrefix(id, ".") || !e.IsDir() || ValidID(id) != nil {
			continue
		}
		info, err := Read(stateDir, id)
		out = append(out, Entry{ID: id, Info: info, Err: err})
	}
	return out, nil
}
