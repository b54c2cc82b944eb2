//go:build ignore

// Input of `go tool cgo -godefs` (make generate), which writes zregion.go:
// the region's layout in Go, from lib/cudahook/include/vgpu_region.h, the
// one statement of it. Not compiled (build tag ignore): the generated file
// is committed, so building and testing need no cgo.

package contract

/*
#include "vgpu_region.h"
*/
import "C"

// The shared accounting region (vgpu_region.h says what each field is).
const (
	RegionFile            = C.VGPU_REGION_FILE
	RegionLockFile        = C.VGPU_REGION_LOCK_FILE
	RegionMagic           = C.VGPU_REGION_MAGIC
	RegionVersion         = C.VGPU_REGION_VERSION
	RegionHeaderSize      = C.VGPU_REGION_HEADER
	RegionSlots           = C.VGPU_REGION_SLOTS
	RegionSlotSize        = C.VGPU_REGION_SLOT_SIZE
	RegionDevices         = C.VGPU_REGION_DEVICES
	RegionSpans           = C.VGPU_REGION_SPANS
	RegionPendingDevShift = C.VGPU_REGION_PENDING_DEV_SHIFT
)

type (
	RegionHeader    C.struct_vgpu_region_header
	RegionSlot      C.struct_vgpu_region_slot
	RegionCompute   C.struct_vgpu_compute_shared
	RegionBusySpans C.struct_vgpu_busy_spans
)
