package regionread

import "github.com/vgpu-dev/vgpu/internal/contract"

// regionBytes lays out a region (lib/cudahook/include/vgpu_region.h).
func regionBytes(version uint32, slots map[int]Slot, busy []uint64) []byte {
	h := contract.NewRegionHeader(version)
	for d, v := range busy {
		h.Compute[d].BusyNs = v
	}
	rs := map[int]contract.RegionSlot{}
	for i, s := range slots {
		rs[i] = contract.RegionSlot{State: 1, Pid: uint32(s.PID), Claimed: s.ClaimedNs, Usage: s.Usage}
	}
	return contract.EncodeRegion(h, rs)
}
