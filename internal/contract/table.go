package contract

// Define is one #define of the generated header.
type Define struct {
	Name  string // C name, without the VGPU_ prefix
	Value any    // a Go constant: string, or an integer
	Kind  string // "" (int), "u" (unsigned), "ull" (unsigned long long)
}

// Defines is what vgpu_contract.h defines, in order. The C names are those
// the library used before the header existed.
var Defines = []Define{
	{"QUOTA_PATH", QuotaPath, ""},
	{"QUOTA_VERSION", QuotaVersion, ""},
	{"QUOTA_VERSION_TIME", QuotaVersionTime, ""},
	{"QUOTA_LINE_MAX", QuotaLineMax, ""},
	{"MPS_PIPE_DIR", MPSPipeDir, ""},
	{"QUOTA_MAX_BYTES", QuotaMaxBytes, ""},
	{"MAX_DEVICES", MaxDevices, ""},
	{"QPATH_MAX", PathMax, ""},
	{"UUID_MAX", UUIDMax, ""},
	{"PERIOD_MAX_MS", PeriodMaxMS, ""},
	{"PERIOD_MS", DefaultPeriodMS, ""},
	{"MAX_PHASE", MaxPhase, ""},
	{"COMPUTE_UNLIMITED", ComputeUnlimited, ""},
	{"REGION_MAGIC", uint64(RegionMagic), "ull"},
	{"REGION_VERSION", RegionVersion, "u"},
	{"REGION_HEADER", RegionHeader, "u"},
	{"REGION_SLOTS", RegionSlots, "u"},
	{"REGION_SLOT_SIZE", RegionSlotSize, "u"},
	{"REGION_DEVICES", RegionDevices, "u"},
	{"REGION_FILE", RegionFile, ""},
	{"REGION_LOCKFILE", RegionLockFile, ""},
	{"REGION_COMPUTE_OFFSET", RegionComputeOffset, "u"},
	{"REGION_GATE_OFFSET", RegionGateOffset, "u"},
	{"REGION_SPANS_OFFSET", RegionSpansOffset, "u"},
	{"REGION_SPANS", RegionSpans, "u"},
	{"REGION_QUEUE_OFFSET", RegionQueueOffset, "u"},
	{"REGION_WANT_OFFSET", RegionWantOffset, "u"},
	{"REGION_HDR_VERSION", RegionHdrVersion, "u"},
	{"REGION_HDR_HEADER_SIZE", RegionHdrHeaderSize, "u"},
	{"REGION_HDR_SLOT_COUNT", RegionHdrSlotCount, "u"},
	{"REGION_HDR_SLOT_SIZE", RegionHdrSlotSize, "u"},
	{"REGION_HDR_DEVICES", RegionHdrDevices, "u"},
	{"REGION_HDR_SPANS_LOCK", RegionHdrSpansLock, "u"},
	{"REGION_SLOT_STATE", RegionSlotState, "u"},
	{"REGION_SLOT_PID", RegionSlotPID, "u"},
	{"REGION_SLOT_CLAIMED", RegionSlotClaimed, "u"},
	{"REGION_SLOT_PENDING", RegionSlotPending, "u"},
	{"REGION_PENDING_DEV_SHIFT", RegionPendingDevShift, "u"},
	{"REGION_SLOT_USAGE", RegionSlotUsage, "u"},
	{"REGION_COMPUTE_SIZE", RegionComputeSize, "u"},
	{"REGION_COMPUTE_BUSY", RegionComputeBusy, "u"},
	{"REGION_COMPUTE_LAUNCHES", RegionComputeLaunches, "u"},
	{"GRANT_FILE", GrantFile, ""},
	{"GRANT_MAGIC", uint64(GrantMagic), "ull"},
	{"GRANT_VERSION", GrantVersion, "u"},
	{"GRANT_BYTES", GrantBytes, "u"},
	{"GRANT_HDR_STAMP", GrantHdrStamp, "u"},
	{"GRANT_HDR_PERIOD", GrantHdrPeriod, "u"},
	{"GRANT_DEV_OFFSET", GrantDevOffset, "u"},
	{"GRANT_DEV_SIZE", GrantDevSize, "u"},
	{"GRANT_DEV_STATIC", GrantDevStatic, "u"},
	{"GRANT_DEV_LIVE", GrantDevLive, "u"},
	{"GRANT_FULL", GrantFull, ""},
	{"GRANT_NO_PHASE", uint64(GrantNoPhase), "u"},
	{"GRANT_STALE_MS", GrantStaleMS, ""},
}
