// Package tenant is the host's model of a tenant: the container record
// (Record) with its devices (Device, GPU), the library's settings
// (Library), the sharing mode of a device (Mode), the rules read off them
// (Paced, Request, the mode's quota options and environment), where a
// tenant's files are (Places) and who holds what on each GPU (Ledger).
//
// It is the floor every host package stands on: the plan fills a Record,
// internal/state stores it, internal/quota renders the library's quota
// file from it, and every reader (vgpu node's round, vgpu status, the DRA
// driver, vgpu exec) reads it as it is. It does no I/O but the liveness
// check of a recorded init (Alive), and imports nothing of vgpu's but the
// library's contract and /proc's reader.
package tenant

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

// Record is the container record, container.json: the one description of
// a tenant (a container, a `vgpu exec`, a DRA claim) on the host. Its
// members are its own, never another package's type, so that the file
// changes only with internal/state's InfoVersion.
type Record struct {
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
	// container, whatever it sees or hides (internal/procmap).
	Cgroup  string   `json:"cgroup,omitempty"`
	Devices []Device `json:"devices"`
	// Library: what the quota file tells the library besides the devices.
	Library *Library `json:"library,omitempty"`
	// DriverLimits: which holds the memory limits (internal/driverlimit);
	// nil: the library and vgpu node, as before the driver had a limit.
	DriverLimits *DriverLimits `json:"driverLimits,omitempty"`
	// UID: the host user id of the container's processes, when known (a
	// spatial GPU takes one user).
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
	LogLevel   string `json:"logLevel,omitempty"` // "": the library's default
	// ComputePeriodMS: nil = the library's default; 0 = launch by launch.
	ComputePeriodMS *int `json:"computePeriodMs,omitempty"`
}

// DriverLimits records the driver's per-cgroup memory limits of a container.
type DriverLimits struct {
	Cgroup string `json:"cgroup,omitempty"` // full sysfs path the limits are set on
	Set    bool   `json:"set"`              // true: the driver holds them; false: Why
	Why    string `json:"why,omitempty"`
}

// Device is one GPU of the tenant, numbered as the tenant sees it.
type Device struct {
	Index int `json:"index"` // inside the container, 0..n-1
	GPU   GPU `json:"gpu"`
	// Memory in bytes, 0 = no limit.
	Memory uint64 `json:"memory,omitempty"`
	// Compute in percent; contract.ComputeUnlimited (100) = no limit (0 in
	// records of the first release: none; internal/state reads it as 100).
	Compute int `json:"compute,omitempty"`
	// ComputeRequest: the share guaranteed under contention, percent
	// 0..Compute (0: surplus only); nil = none given (the request is the
	// limit).
	ComputeRequest *int   `json:"computeRequest,omitempty"`
	MemoryRequest  uint64 `json:"memoryRequest,omitempty"` // bytes, 0 = none
	// Phase: where the device's stretch starts in each pacing period,
	// percent (internal/slots); nil = none (internal/state assigns one).
	Phase *int `json:"phase,omitempty"`
	// Mode: how the GPU is shared (docs/spatial.md); MPSPipe is a spatial
	// device's pipe directory as the library sees it.
	Mode    Mode   `json:"spatial,omitempty"`
	MPSPipe string `json:"mpsPipe,omitempty"`
	// Priority orders the device's work inside the period against the
	// other tenants of its GPU; set only by whoever sets its limits.
	Priority Priority `json:"priority,omitempty"`
}

// GPU is the host GPU a device is, as discovery found it at create. A
// record upgraded from an older release may know the UUID alone (Index -1).
type GPU struct {
	Index       int    `json:"index"` // NVML index on the host
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	Minor       int    `json:"minor"` // /dev/nvidia<Minor>
	MemoryBytes uint64 `json:"memoryBytes"`
	PCIBusID    string `json:"pciBusId,omitempty"`
}

// Request is the device's compute request: ComputeRequest, or the limit
// when none was given.
func (d Device) Request() int {
	if d.ComputeRequest != nil {
		return *d.ComputeRequest
	}
	return d.Compute
}

// NoComputeSetting says whether the device was given no compute request
// or limit, in a mode that paces: the device that request 0 (surplus only)
// paces, as admission gives it beside requests or a priority and the plan
// with defaults.pace_all.
func (d Device) NoComputeSetting() bool {
	return d.ComputeRequest == nil && d.Compute == contract.ComputeUnlimited && d.Mode.Paces()
}

// Paced says whether the library paces the device: a request or a limit
// below the whole GPU, in a mode that paces (Mode.Paces).
func (d Device) Paced() bool { return d.Mode.Paces() && d.Request() < contract.ComputeUnlimited }

// PeriodMS is the pacing period the library uses, in ms (0: launch by
// launch).
func (r *Record) PeriodMS() int {
	if r.Library != nil && r.Library.ComputePeriodMS != nil {
		return *r.Library.ComputePeriodMS
	}
	return contract.DefaultPeriodMS
}

// Mode is how a device's GPU is shared: time sliced (the library paces
// it) or spatial (NVIDIA MPS holds the share). The zero value is time
// sliced, the mode of every record before the spatial one existed.
type Mode uint8

const (
	TimeSliced Mode = iota
	Spatial
)

// IsSpatial: shared through MPS (config spatial.gpus).
func (m Mode) IsSpatial() bool { return m == Spatial }

// Paces: the library paces a device of this mode (MPS holds a spatial
// one's share, fixed).
func (m Mode) Paces() bool { return m == TimeSliced }

// Borrows: a device of this mode may borrow compute above its request.
func (m Mode) Borrows() bool { return m == TimeSliced }

// String is the mode as vgpu status names it.
func (m Mode) String() string {
	if m == Spatial {
		return "spatial"
	}
	return "time"
}

// QuotaMode is the quota file's mode= value ("" for time sliced, which
// the file writes as no mode: a library of the previous release reads it).
func (m Mode) QuotaMode() string {
	if m == Spatial {
		return "spatial"
	}
	return ""
}

// ModeOfQuota reads the quota file's mode= value.
func ModeOfQuota(v string) (Mode, error) {
	if v == "spatial" {
		return Spatial, nil
	}
	return TimeSliced, fmt.Errorf("bad mode %q (spatial; time is written as no mode)", v)
}

// MarshalJSON writes the mode as container.json has it since the spatial
// mode came: the boolean "spatial" (omitted when time sliced).
func (m Mode) MarshalJSON() ([]byte, error) { return json.Marshal(m == Spatial) }

// UnmarshalJSON reads the boolean "spatial".
func (m *Mode) UnmarshalJSON(b []byte) error {
	var s bool
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("spatial: %s: want true or false", b)
	}
	*m = TimeSliced
	if s {
		*m = Spatial
	}
	return nil
}

// MPS client settings (NVIDIA's MPS documentation, "Environment Variables").
const (
	EnvMPSPipe    = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSThreads = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSMemory  = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// Env is the client environment a device's mode asks for: none when time
// sliced; for a spatial device the pipe directory, the compute limit as
// active thread percentage and the memory limit (bytes, 0 = none) as
// pinned device memory in whole MiB, rounded down (MPS takes M, G), at
// least 1M; the library holds the exact limit.
func (d Device) Env() []string {
	if !d.Mode.IsSpatial() {
		return nil
	}
	return MPSEnv(d.MPSPipe, d.Index, d.Compute, d.Memory)
}

// MPSEnv is a spatial device's client environment (Device.Env).
func MPSEnv(pipe string, index, compute int, memory uint64) []string {
	env := []string{EnvMPSPipe + "=" + pipe, fmt.Sprintf("%s=%d", EnvMPSThreads, compute)}
	if memory > 0 {
		env = append(env, fmt.Sprintf("%s=%d=%dM", EnvMPSMemory, index, max(memory>>20, 1)))
	}
	return env
}
