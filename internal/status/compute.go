package status

// Compute fields of the region (layout versions 2 and 3, lib/cudahook
// compute limits): per device d, 32 bytes at header offset 128 + 32·d:
//
//	+0  i64 tokens     ns of device time the container may still start
//	+8  u64 refill_ns  CLOCK_MONOTONIC of the last refill
//	+16 u64 busy_ns    measured device time of the container's launches, cumulative
//	+24 u64 launches   launches measured, cumulative
//
// Layout 1 has none: readCompute returns nil and status shows the compute
// limit from the quota file only, with no measured share.

import "github.com/vgpu-dev/vgpu/internal/contract"

// maxKnownVersion is the newest region layout this reader understands.
const maxKnownVersion = contract.RegionVersion

const (
	computeOffset = contract.RegionComputeOffset
	computeSize   = contract.RegionComputeSize
	computeBusy   = contract.RegionComputeBusy
	computeLaunch = contract.RegionComputeLaunches
)

// DeviceCompute is one device's compute accounting as the region holds it.
type DeviceCompute struct {
	// BusyNs: cumulative nanoseconds the container's kernels kept the device
	// busy. The measured share is the delta of two readings over the time
	// between them.
	BusyNs   uint64
	Launches uint64
}

// readCompute returns the per-device compute fields of a region of layout
// version v, or nil when the layout has none.
func readCompute(v int, b []byte) []DeviceCompute {
	if v < 2 || len(b) < computeOffset+computeSize*RegionDevices {
		return nil
	}
	out := make([]DeviceCompute, RegionDevices)
	for d := range out {
		o := computeOffset + computeSize*d
		out[d] = DeviceCompute{BusyNs: load64(b, o+computeBusy), Launches: load64(b, o+computeLaunch)}
	}
	return out
}
