//go:build ignore

// Input of `go tool cgo -godefs` (make generate), which writes zshare.go:
// the share file's layout in Go, from lib/cudahook/include/vgpu_share.h, the
// one statement of it. Not compiled (build tag ignore): the generated file
// is committed, so building and testing need no cgo.

package contract

/*
#include "vgpu_share.h"
*/
import "C"

// The share file (vgpu_share.h says what each field is).
const (
	ShareFile        = C.VGPU_SHARE_FILE
	ShareDir         = C.VGPU_SHARE_DIR
	ShareMagic       = C.VGPU_SHARE_MAGIC
	ShareVersion     = C.VGPU_SHARE_VERSION
	ShareVersionV1   = C.VGPU_SHARE_VERSION_V1
	ShareBytes       = C.VGPU_SHARE_BYTES
	ShareDevices     = C.VGPU_SHARE_DEVICES
	ShareFull        = C.VGPU_SHARE_FULL
	ShareNoPhase     = C.VGPU_SHARE_NO_PHASE
	ShareStaleMS     = C.VGPU_SHARE_STALE_MS
	ShareMemMaxMS    = C.VGPU_SHARE_MEM_MAX_MS
	ShareOrderMaxMS  = C.VGPU_SHARE_ORDER_MAX_MS
	ShareFreeBoundNS = C.VGPU_SHARE_FREE_BOUND_NS
	PriorityNormal   = C.VGPU_PRIORITY_NORMAL
	PriorityHigh     = C.VGPU_PRIORITY_HIGH
	PriorityLow      = C.VGPU_PRIORITY_LOW
)

type (
	ShareFileLayout C.struct_vgpu_share_file
	ShareDev        C.struct_vgpu_share_dev
	ShareDevV1      C.struct_vgpu_share_dev_v1
	ShareOrder      C.struct_vgpu_share_order
)
