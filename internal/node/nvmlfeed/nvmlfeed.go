// Package nvmlfeed reads the driver's own per-process figures through NVML
// (go-nvml against the driver's libnvidia-ml.so.<version>): the device
// memory each process holds (nvmlDeviceGetComputeRunningProcesses) and how
// busy its kernels kept each GPU (nvmlDeviceGetProcessUtilization). NVML
// reports host pids, whatever pid namespace a process lives in. What the
// library inside a container counts plays no part: this is what the driver
// itself charges, bypassing routes included.
package nvmlfeed

// Sample is one process on one GPU.
type Sample struct {
	HostPID   int
	GPU       string // UUID
	UsedBytes uint64
	SMUtil    int // percent since the previous Read (0 when NVML had no sample)
}

// Source is what the daemon reads each round (the NVML feed, or a test's).
type Source interface {
	Read() ([]Sample, error)
	Close() error
}
