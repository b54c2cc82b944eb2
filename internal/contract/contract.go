// Package contract is the one source of every value the host side and the
// in-container library (lib/cudahook) must agree on, each stated once:
//
//   - the quota file's limits and paths, the grant file and the default
//     pacing period: the constants of this file (contract.go). The library
//     includes lib/cudahook/include/vgpu_contract.h, generated from this file
//     alone: each constant becomes VGPU_<its name in upper snake case>
//     (QuotaMaxBytes: VGPU_QUOTA_MAX_BYTES);
//   - the shared region's layout: lib/cudahook/include/vgpu_region.h, the C
//     structs the library maps; zregion.go, their Go form (RegionHeader,
//     RegionSlot and the Region* constants), is generated from that header
//     by `go tool cgo -godefs` (types_region.go).
//
// `make generate` (go generate ./internal/contract) writes both; gen's
// TestGenerated fails when a committed copy is not what it writes now.
// Both generated files are committed: building and testing need no cgo.
package contract

//go:generate go run ./gen -dir .

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

// The grant file (docs/design.md "Requests and the arbitration"): what a
// tenant may use of each GPU, written by the host only, in the directory
// the container sees read-only (<state_dir>/<id>/host/grant, in the
// container /run/vgpu/host/grant). Little-endian, fixed size; the library
// maps it read-only. Each device's share is one u64, bp | phase << 32, so
// that a reader never sees one half of one grant with the other of another.
const (
	GrantFile    = "grant"
	GrantMagic   = 0x314e415247555047 // the bytes "GPUGRAN1"
	GrantVersion = 2                  // 2: each device's memory ceiling and the header's memory deadline
	GrantBytes   = 4096
	// Header: magic u64 at 0, version u32 at 8, devices u32 at 12, the
	// arbitration's stamp u64 at 16 (CLOCK_MONOTONIC ns of the last round of
	// `vgpu node`; 0 = none ever), its period in ms u32 at 24, and until when
	// the memory ceilings hold u64 at 32 (CLOCK_MONOTONIC ns; 0 = none ever:
	// each tenant is held to its memory request).
	GrantHdrStamp    = 16
	GrantHdrPeriod   = 24
	GrantHdrMemUntil = 32
	// Per device at GrantDevOffset + GrantDevSize*dev: the admission's
	// share (u64, held while no arbitration runs), the arbitration's (u64),
	// then the memory ceiling (u64 bytes: what the tenant may hold on the
	// GPU, borrowing above its request, while the deadline holds).
	GrantDevOffset  = 64
	GrantDevSize    = 24
	GrantDevStatic  = 0
	GrantDevLive    = 8
	GrantDevCeiling = 16
	GrantFull       = 10000 // shares are in basis points: 10000 = the whole GPU
	GrantNoPhase    = 0xffffffff
	GrantStaleMS    = 1000 // an arbitration older than this is not believed: the admission's share holds
	// GrantMemMaxMS: a memory deadline further ahead than this is not the
	// host's (not believed).
	GrantMemMaxMS = 60000
)
