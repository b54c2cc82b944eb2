package regionread

// Compute fields of the region (contract.RegionCompute: layout versions 2
// on, lib/cudahook compute limits). Layout 1 has none: readCompute returns
// nil and status shows the compute limit from the quota file only, with no
// measured share.

import "github.com/vgpu-dev/vgpu/internal/contract"

// DeviceCompute is one device's compute accounting as the region holds it.
type DeviceCompute struct {
	// BusyNs: cumulative nanoseconds the container's kernels kept the device
	// busy. The measured share is the delta of two readings over the time
	// between them.
	BusyNs   uint64
	Launches uint64
	// OrderWaitMS: cumulative ms the container's launches waited for the
	// order inside the period (another tenant went first: a higher
	// priority, or one waking below its due); wraps at 2^32. Valid only
	// with HasOrderWait (layout 6 on).
	OrderWaitMS  uint32
	HasOrderWait bool
}

// readCompute returns the per-device compute fields of a region of layout
// version v, or nil when the layout has none.
func readCompute(v int, h *contract.RegionHeader) []DeviceCompute {
	if v < 2 {
		return nil
	}
	out := make([]DeviceCompute, contract.RegionDevices)
	for d := range out {
		out[d] = DeviceCompute{BusyNs: h.Compute[d].BusyNs, Launches: h.Compute[d].Launches}
		if v >= 6 { // before, these bytes held a mutex
			out[d].OrderWaitMS, out[d].HasOrderWait = h.OrderWaitMs[d], true
		}
	}
	return out
}
