// Package contract is the one source of every value the host side and the
// in-container library (lib/cudahook) must agree on, each stated once:
//
//   - the quota file's limits and paths and the default pacing period: the
//     constants of this file (contract.go). The library
//     includes lib/cudahook/include/vgpu_contract.h, generated from this file
//     alone: each constant becomes VGPU_<its name in upper snake case>
//     (QuotaMaxBytes: VGPU_QUOTA_MAX_BYTES);
//   - the shared region's layout: lib/cudahook/include/vgpu_region.h, the C
//     structs the library maps; zregion.go, their Go form (RegionHeader,
//     RegionSlot and the Region* constants), is generated from that header
//     by `go tool cgo -godefs` (types_region.go);
//   - the share file's layout and rules (what a tenant may use of each GPU
//     this period, written by the host, read by the library):
//     lib/cudahook/include/vgpu_share.h; zshare.go (ShareFileLayout, the
//     Share* constants) is generated from it the same way (types_share.go),
//     and share.go holds its path rule.
//
// `make generate` (go generate ./internal/contract) writes the header and
// the z*.go files; gen's TestGenerated fails when a committed copy is not
// what it writes now. The generated files are committed: building and
// testing need no cgo.
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
