//go:build cgo

package nvmlfeed

import (
	"fmt"
	"runtime"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type device struct {
	h     nvml.Device
	uuid  string
	meter Meter // the driver's utilization samples as shares of our interval
}

// NVML is the feed of the driver's NVML library.
type NVML struct {
	lib  nvml.Interface
	devs []*device
}

// Open loads the driver's NVML library at path and lists its GPUs.
func Open(path string) (*NVML, error) {
	lib := nvml.New(nvml.WithLibraryPath(path))
	if r := lib.Init(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML init with %s: %v", path, lib.ErrorString(r))
	}
	n, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		_ = lib.Shutdown() // the Init error is the one to report
		return nil, fmt.Errorf("nvmlDeviceGetCount: %v", lib.ErrorString(r))
	}
	f := &NVML{lib: lib}
	for i := 0; i < n; i++ {
		h, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			_ = lib.Shutdown()
			return nil, fmt.Errorf("nvmlDeviceGetHandleByIndex(%d): %v", i, lib.ErrorString(r))
		}
		uuid, r := h.GetUUID()
		if r != nvml.SUCCESS {
			_ = lib.Shutdown()
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetUUID: %v", i, lib.ErrorString(r))
		}
		f.devs = append(f.devs, &device{h: h, uuid: uuid})
	}
	return f, nil
}

// Read samples every GPU once. A GPU whose processes cannot be read is an
// error (the daemon skips the round rather than judge on half the truth).
// Utilization goes through the GPU's Meter: a read that finds no new
// sample (NVML_ERROR_NOT_FOUND) still reports what the previous samples
// cover.
func (f *NVML) Read() ([]Sample, error) {
	var out []Sample
	for _, d := range f.devs {
		procs, r := d.h.GetComputeRunningProcesses()
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %s: nvmlDeviceGetComputeRunningProcesses: %v", d.uuid, f.lib.ErrorString(r))
		}
		var raw []UtilSample
		now := uint64(time.Now().UnixMicro()) // only its differences count
		if samples, r := processUtilization(d.h, d.meter.LastSeen); r == nvml.SUCCESS {
			for _, s := range samples {
				raw = append(raw, UtilSample{PID: s.Pid, TimeStamp: s.TimeStamp, SMUtil: s.SmUtil})
			}
		}
		util := d.meter.Read(now, raw)
		// MPS clients: the driver's own word on who runs through an MPS
		// server; a driver without the call lists none
		mps := map[uint32]uint64{}
		if mp, r := d.h.GetMPSComputeRunningProcesses(); r == nvml.SUCCESS {
			for _, p := range mp {
				if p.Pid != 0 {
					mps[p.Pid] = usedBytes(p.UsedGpuMemory)
				}
			}
		}
		seen := map[uint32]bool{}
		for _, p := range procs {
			if p.Pid == 0 || seen[p.Pid] {
				continue
			}
			seen[p.Pid] = true
			m, isMPS := mps[p.Pid]
			out = append(out, Sample{HostPID: int(p.Pid), GPU: d.uuid, UsedBytes: max(usedBytes(p.UsedGpuMemory), m), SMUtil: util[p.Pid], MPS: isMPS})
		}
		// a client the compute list leaves out still holds its memory
		for pid, m := range mps {
			if !seen[pid] {
				seen[pid] = true
				out = append(out, Sample{HostPID: int(pid), GPU: d.uuid, UsedBytes: m, SMUtil: util[pid], MPS: true})
			}
		}
		// a process busy on the GPU without a context NVML lists (it cannot
		// be: a kernel needs a context) still counts for its share
		for pid, u := range util {
			if !seen[pid] && pid != 0 && u > 0 {
				out = append(out, Sample{HostPID: int(pid), GPU: d.uuid, SMUtil: u})
			}
		}
	}
	return out, nil
}

// usedBytes is a process's memory as NVML gives it, 0 when not available.
func usedBytes(v uint64) uint64 {
	if v == ^uint64(0) { // NVML_VALUE_NOT_AVAILABLE
		return 0
	}
	return v
}

// Close shuts NVML down.
func (f *NVML) Close() error {
	if r := f.lib.Shutdown(); r != nvml.SUCCESS {
		return fmt.Errorf("nvmlShutdown: %v", f.lib.ErrorString(r))
	}
	return nil
}

// GPUs reads each GPU's memory and utilization (nvmlDeviceGetMemoryInfo,
// nvmlDeviceGetUtilizationRates); a figure the driver does not give is
// left 0 (busy: -1).
func (f *NVML) GPUs() ([]GPU, error) {
	out := make([]GPU, 0, len(f.devs))
	for i, d := range f.devs {
		g := GPU{Index: i, UUID: d.uuid, Busy: -1}
		if name, r := d.h.GetName(); r == nvml.SUCCESS {
			g.Name = name
		}
		if m, r := d.h.GetMemoryInfo(); r == nvml.SUCCESS {
			g.MemoryTotal, g.MemoryUsed = m.Total, m.Used
		}
		if u, r := d.h.GetUtilizationRates(); r == nvml.SUCCESS {
			g.Busy = int(u.Gpu)
		}
		out = append(out, g)
	}
	return out, nil
}

type utilizationReader interface {
	GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return)
}

// processUtilization reads the driver's per-process samples. go-nvml sizes
// its buffer from a first call and slices it by the second call's count, so
// a process that starts between the two calls makes it panic; that read is
// a short buffer and is tried again.
func processUtilization(d utilizationReader, lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	var r nvml.Return
	for try := 0; try < 3; try++ {
		var s []nvml.ProcessUtilizationSample
		if s, r = processUtilizationOnce(d, lastSeen); r != nvml.ERROR_INSUFFICIENT_SIZE {
			return s, r
		}
	}
	return nil, r
}

func processUtilizationOnce(d utilizationReader, lastSeen uint64) (s []nvml.ProcessUtilizationSample, r nvml.Return) {
	defer func() {
		if e := recover(); e != nil {
			if _, bounds := e.(runtime.Error); !bounds {
				panic(e)
			}
			s, r = nil, nvml.ERROR_INSUFFICIENT_SIZE
		}
	}()
	return d.GetProcessUtilization(lastSeen)
}
