// Package contract is the one source of every value the host side and the
// in-container library (lib/cudahook) must agree on: the quota file's limits
// and paths, the shared region's layout, the default pacing period.
//
// The Go side imports these constants; the C side includes
// lib/cudahook/include/vgpu_contract.h, which `go generate ./internal/contract`
// (run by `make generate`) writes from this file. TestHeaderCurrent fails when
// the checked-in header is not what the generator writes now, so a change
// here reaches both sides with no other edit.
//
// Every constant below is exported to C as VGPU_<C name> by the table in
// table.go; keep the two in step (TestTableComplete checks it).
package contract

//go:generate go run ./gen -o ../../lib/cudahook/include/vgpu_contract.h

// Quota file (docs/design.md "Quota file").
const (
	// QuotaPath is where the library looks first, inside a container.
	QuotaPath = "/run/vgpu/quota"
	// QuotaVersion is the newest version ("vgpu-quota 3": a device line may
	// say mode=spatial and mps_pipe=); readers take 1..QuotaVersion. The host
	// writes it only for a container with a spatial device, and
	// QuotaVersionTime otherwise, so that a library that knows only version 2
	// keeps working in time-sliced containers and refuses a spatial one
	// (fails closed) rather than pacing it as a time-sliced tenant.
	QuotaVersion = 3
	// QuotaVersionTime is what the host writes when no device is spatial
	// ("vgpu-quota 2": requests beside limits).
	QuotaVersionTime = 2
	// QuotaLineMax: a line of the file is shorter than this (a device line
	// holds a UUID and an mps_pipe= path).
	QuotaLineMax = PathMax + 512
	// MPSPipeDir is where a container on a spatial GPU sees the MPS pipe
	// directory of that GPU (its CUDA_MPS_PIPE_DIRECTORY and mps_pipe=).
	MPSPipeDir = "/run/vgpu/mps"
	// QuotaMaxBytes bounds the file.
	QuotaMaxBytes = 65536
	// MaxDevices bounds the devices of one quota file (and of one container).
	MaxDevices = 16
	// PathMax: paths in the file are shorter than this.
	PathMax = 1024
	// UUIDMax: UUIDs in the file are shorter than this.
	UUIDMax = 96
	// PeriodMaxMS is the longest compute-period the library takes.
	PeriodMaxMS = 2000
	// DefaultPeriodMS is the pacing period when the quota file names none.
	DefaultPeriodMS = 500
	// MaxPhase is the largest phase= (percent of the period).
	MaxPhase = 99
	// ComputeUnlimited is "no compute limit" in every representation: the
	// request, the plan, the quota structs and the library (the file omits it).
	ComputeUnlimited = 100
)

// Shared accounting region (lib/cudahook/README.md "Shared region").
const (
	RegionFile          = "vgpu.region"
	RegionLockFile      = "vgpu.lock"
	RegionMagic         = 0x3147455255504756 // the bytes "VGPUREG1"
	RegionVersion       = 4                  // 2: compute fields; 3: no shared mutex, the queue end; 4: what the tenant wants (a library refuses any other)
	RegionHeader        = 4096
	RegionSlots         = 1024
	RegionSlotSize      = 256
	RegionDevices       = 16
	RegionComputeOffset = 128
	RegionGateOffset    = 640
	RegionSpansOffset   = 768
	RegionSpans         = 12
	RegionQueueOffset   = 3840 // i64 per device: when the container's queued launches end (pacer.c)
	RegionWantOffset    = 3968 // u64 per device: CLOCK_MONOTONIC ns when a launch last waited for the pacer (the tenant wants more than its grant)

	// Byte offsets of the fields the host reads (internal/status), and of
	// those only the library's processes share (the spans' lock word, a
	// slot's reservation in flight); the library's structs in region.c must
	// put them there (TestRegionLayout and region.c's static asserts).
	RegionHdrVersion      = 8  // u32 layout version
	RegionHdrHeaderSize   = 12 // u32
	RegionHdrSlotCount    = 16 // u32
	RegionHdrSlotSize     = 20 // u32
	RegionHdrDevices      = 24 // u32
	RegionHdrSpansLock    = 40 // u64 busy spans' lock word: 0 free, else CLOCK_MONOTONIC ns at taking it
	RegionSlotState       = 0  // u32, 1 = in use
	RegionSlotPID         = 4  // u32
	RegionSlotClaimed     = 8  // u64 CLOCK_REALTIME ns
	RegionSlotPending     = 16 // u64 reservation in flight: dev << RegionPendingDevShift | bytes; 0 none (not usage)
	RegionPendingDevShift = 60 // the device index sits above this bit of pending (so RegionDevices <= 16)
	RegionSlotUsage       = 64 // u64 per device
	RegionComputeSize     = 32 // one device's compute entry, at RegionComputeOffset + size*dev
	RegionComputeBusy     = 16 // u64 busy ns in the entry
	RegionComputeLaunches = 24 // u64 launches in the entry
)

// The grant file (docs/design.md "Requests and the arbitration"): what a
// tenant may use of each GPU, written by the host only, in the directory
// the container sees read-only (<state_dir>/<id>/host/grant, in the
// container /run/vgpu/host/grant). Little-endian, fixed size; the library
// maps it read-only. Each device's share is one u64, bp | phase << 32, so
// that a reader never sees one half of one grant with the other of another.
const (
	GrantFile    = "grant"
	GrantMagic   = 0x314e415247555047 // the bytes "GPUGRAN1"
	GrantVersion = 1
	GrantBytes   = 4096
	// Header: magic u64 at 0, version u32 at 8, devices u32 at 12, the
	// arbitration's stamp u64 at 16 (CLOCK_MONOTONIC ns of the last round of
	// `vgpu node`; 0 = none ever), its period in ms u32 at 24.
	GrantHdrStamp  = 16
	GrantHdrPeriod = 24
	// Per device at GrantDevOffset + GrantDevSize*dev: the admission's
	// share (u64, held while no arbitration runs) then the arbitration's (u64).
	GrantDevOffset = 64
	GrantDevSize   = 16
	GrantDevStatic = 0
	GrantDevLive   = 8
	GrantFull      = 10000 // shares are in basis points: 10000 = the whole GPU
	GrantNoPhase   = 0xffffffff
	GrantStaleMS   = 1000 // an arbitration older than this is not believed: the admission's share holds
)
