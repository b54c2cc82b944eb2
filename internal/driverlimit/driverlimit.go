// Package driverlimit sets the driver's own per-cgroup memory limits, where
// the driver has them (branch r615 and later: nvmlDeviceSetMemoryLimits_v1),
// on a container's cgroup v2 directory, for each of its GPUs: a hard limit
// the driver holds at allocation for every process in the cgroup, whatever
// route it takes (a static binary, the driver by its path). vgpu keeps what
// the driver does not give: the limit as the GPU's total (cuMemGetInfo,
// NVML, nvidia-smi), a graceful out-of-memory, pacing, status and metrics.
//
// Where the driver lacks the call, the host has no cgroup v2 hierarchy, vgpu
// does not run as root, or the call fails: one log line, and the library
// and vgpu node hold the limit as before; nothing is refused
// (docs/driver-limits.md).
//
// The NVML calls need cgo (go-nvml): vgpu-hook and vgpu make them;
// vgpu-runtime, built without cgo, only decides (Eligible) and hands the
// call to vgpu-hook as a createRuntime hook.
package driverlimit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/cachefile"
	"github.com/vgpu-dev/vgpu/internal/cgroup"
	"github.com/vgpu-dev/vgpu/internal/drivercheck"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The driver's calls (nvml.h of r615).
const (
	SetSymbol = "nvmlDeviceSetMemoryLimits_v1"
	GetSymbol = "nvmlDeviceGetMemoryLimits_v1"
)

// What vgpu status says holds a container's memory limits.
const (
	ByDriver  = "driver"
	ByLibrary = "library + node"
)

// Limit is one GPU's limits, in bytes.
type Limit struct {
	UUID       string
	Soft, Hard uint64
}

// Soft is the soft limit (guaranteed; above it the driver may take memory
// back) of one device: the one place that chooses it. It is the memory
// request where the container states one below its limit, else the limit
// itself, so a limit-only container borrows nothing.
func Soft(d tenant.Device) uint64 {
	if d.MemoryRequest > 0 && d.MemoryRequest < d.Memory {
		return d.MemoryRequest
	}
	return d.Memory
}

// Limits are the driver limits of a container: its devices that have a
// memory limit.
func Limits(info *tenant.Record) []Limit {
	var out []Limit
	for _, d := range info.Devices {
		if d.Memory > 0 {
			out = append(out, Limit{UUID: d.GPU.UUID, Soft: Soft(d), Hard: d.Memory})
		}
	}
	return out
}

// Enforcer says what holds info's memory limits (ByDriver, ByLibrary).
func Enforcer(info *tenant.Record) string {
	if info.DriverLimits != nil && info.DriverLimits.Set {
		return ByDriver
	}
	return ByLibrary
}

// CacheFile remembers, in the state directory, whether the driver's NVML
// exports SetSymbol (keyed by the library's identity, internal/cachefile).
const CacheFile = ".driver-limits"

// Eligible says whether vgpu asks the driver (nil) or why not: the driver
// at nvmlPath lacks SetSymbol, vgpu is not root, or the host mounts no
// cgroup v2 hierarchy. It reads no driver code (the ELF symbol table,
// remembered in stateDir) and costs a container with a limit about one stat
// once known.
func Eligible(stateDir, nvmlPath string) error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("vgpu runs as uid %d, and the driver takes limits from root only", uid)
	}
	ok, err := HasSymbol(stateDir, nvmlPath)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("driver %s has no %s (driver branch r615 and later have it)", filepath.Base(nvmlPath), SetSymbol)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	if cgroup.V2Mount(mi) == "" {
		return cgroup.ErrNoV2
	}
	return nil
}

// HasSymbol says whether the library at nvmlPath exports SetSymbol and
// GetSymbol, from its ELF symbol table, remembered in stateDir/CacheFile.
func HasSymbol(stateDir, nvmlPath string) (bool, error) {
	id, idErr := cachefile.Identity(nvmlPath)
	cache := ""
	if stateDir != "" && idErr == nil {
		cache = filepath.Join(stateDir, CacheFile)
		if b, err := cachefile.Read(cache); err == nil {
			if v, ok := strings.CutPrefix(string(b), id+"\n"); ok {
				return v == "yes\n", nil
			}
		}
	}
	exp, err := drivercheck.Exports(nvmlPath)
	if err != nil {
		return false, fmt.Errorf("reading the exports of %s: %w", nvmlPath, err)
	}
	has := exp[SetSymbol] && exp[GetSymbol]
	if cache != "" {
		v := "no\n"
		if has {
			v = "yes\n"
		}
		_ = os.MkdirAll(stateDir, 0o711)
		_ = cachefile.Write(cache, []byte(id+"\n"+v)) // best effort: without it the next container reads the ELF again
	}
	return has, nil
}

// ErrNoCgo is returned by the NVML calls of a binary built without cgo.
var ErrNoCgo = errors.New("built without cgo: cannot call NVML")
