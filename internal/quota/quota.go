package quota

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Package quota reads and writes the quota file, the one thing the host tells
// the library (docs/design.md "Quota file"). Its limits come from
// internal/contract, which the C parser (lib/cudahook/src/quota.c) includes as
// vgpu_contract.h; testdata/ holds the fixtures both parsers' tests read.
//
// "No limit" has one form on each axis, the same in Go and C: memory 0,
// compute contract.ComputeUnlimited (100). The file leaves both out.

// File is the quota file, format version 3 (docs/design.md); Parse reads
// versions 1 and 2 too (the previous releases' containers).
type File struct {
	// FormatVersion is the version Parse read (1..3); Marshal writes
	// contract.QuotaVersion when a device is spatial, else contract.QuotaVersionTime (WriteVersion).
	FormatVersion int
	DriverCuda    string
	DriverNvml    string
	SharedDir     string
	LogLevel      string // "" = not written (the library's default, warn)
	// ComputePeriodMS is the pacing period of compute limits in ms (0: launch
	// by launch); nil = not written (the library's default).
	ComputePeriodMS *int
	Devices         []tenant.Device
}

// A device line is a tenant.Device: its GPU's UUID (the rest of GPU is
// the record's, not the file's), its limits, requests and phase, and its
// mode (version 3: mode=spatial with mps_pipe=, set exactly when spatial;
// Compute is then the container's SM share, its active thread percentage,
// with no request or phase). Parse gives a device's compute absent as
// contract.ComputeUnlimited.

const quotaHeader = "# written by vgpu on the host; read-only in the container\n"

// The limits shared with the C parser are internal/contract's (the library
// reads them from vgpu_contract.h); this package reads versions 1 to
// contract.QuotaVersion and writes WriteVersion.

// WriteVersion is the version Marshal writes: contract.QuotaVersion when a device is
// spatial, else contract.QuotaVersionTime, which a library of the previous release reads.
func (q *File) WriteVersion() int {
	for _, d := range q.Devices {
		if d.Mode.IsSpatial() {
			return contract.QuotaVersion
		}
	}
	return contract.QuotaVersionTime
}

// Marshal writes the file. It validates first, so what it writes parses.
func (q *File) Marshal() ([]byte, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(quotaHeader)
	fmt.Fprintf(&b, "vgpu-quota %d\n", q.WriteVersion())
	fmt.Fprintf(&b, "driver-cuda %s\ndriver-nvml %s\nshared-dir %s\n", q.DriverCuda, q.DriverNvml, q.SharedDir)
	if q.LogLevel != "" {
		fmt.Fprintf(&b, "log-level %s\n", q.LogLevel)
	}
	if q.ComputePeriodMS != nil {
		fmt.Fprintf(&b, "compute-period %d\n", *q.ComputePeriodMS)
	}
	for _, d := range q.Devices {
		fmt.Fprintf(&b, "device %d %s", d.Index, d.GPU.UUID)
		if d.Memory > 0 {
			fmt.Fprintf(&b, " memory=%d", d.Memory)
		}
		if d.MemoryRequest > 0 {
			fmt.Fprintf(&b, " memory-request=%d", d.MemoryRequest)
		}
		if d.Compute < contract.ComputeUnlimited {
			fmt.Fprintf(&b, " compute=%d", d.Compute)
		}
		if d.ComputeRequest != nil {
			fmt.Fprintf(&b, " compute-request=%d", *d.ComputeRequest)
		}
		if d.Phase != nil {
			fmt.Fprintf(&b, " phase=%d", *d.Phase)
		}
		if m := d.Mode.QuotaMode(); m != "" {
			fmt.Fprintf(&b, " mode=%s mps_pipe=%s", m, d.MPSPipe)
		}
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

func quotaPath(what, p string) error {
	if p == "" || p[0] != '/' {
		return fmt.Errorf("%s: %q is not an absolute path", what, p)
	}
	if len(p) >= contract.PathMax {
		return fmt.Errorf("%s: path longer than %d bytes", what, contract.PathMax-1)
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] == 0x7f {
			return fmt.Errorf("%s: %q contains white space or a control character", what, p)
		}
	}
	return nil
}

// quotaUUID: GPU-… or MIG-…, printable, no space, shorter than contract.UUIDMax.
func quotaUUID(u string) bool {
	if len(u) <= 4 || len(u) >= contract.UUIDMax || !(strings.HasPrefix(u, "GPU-") || strings.HasPrefix(u, "MIG-")) {
		return false
	}
	for i := 0; i < len(u); i++ {
		if u[i] <= ' ' || u[i] >= 0x7f {
			return false
		}
	}
	return true
}

var quotaLevels = map[string]bool{"error": true, "warn": true, "info": true, "debug": true}

// Validate reports what Marshal would refuse, naming the field.
func (q *File) Validate() error {
	for _, p := range []struct{ what, v string }{{"driver-cuda", q.DriverCuda}, {"driver-nvml", q.DriverNvml}, {"shared-dir", q.SharedDir}} {
		if err := quotaPath(p.what, p.v); err != nil {
			return err
		}
	}
	if q.LogLevel != "" && !quotaLevels[q.LogLevel] {
		return fmt.Errorf("log-level: %q: use error, warn, info or debug", q.LogLevel)
	}
	if p := q.ComputePeriodMS; p != nil && (*p < 0 || *p > contract.PeriodMaxMS) {
		return fmt.Errorf("compute-period: %d ms: use 0..%d", *p, contract.PeriodMaxMS)
	}
	if len(q.Devices) == 0 {
		return errors.New("no device")
	}
	if len(q.Devices) > contract.MaxDevices {
		return fmt.Errorf("%d devices: the library takes at most %d", len(q.Devices), contract.MaxDevices)
	}
	seen := map[string]bool{}
	for i, d := range q.Devices {
		if d.Index != i {
			return fmt.Errorf("device %d: index must be %d (0..n-1 in order)", d.Index, i)
		}
		if !quotaUUID(d.GPU.UUID) {
			return fmt.Errorf("device %d: bad UUID %q", i, d.GPU.UUID)
		}
		if seen[d.GPU.UUID] {
			return fmt.Errorf("device %d: UUID %s listed twice", i, d.GPU.UUID)
		}
		seen[d.GPU.UUID] = true
		if d.Compute < 1 || d.Compute > contract.ComputeUnlimited {
			return fmt.Errorf("device %d: compute %d not in 1..%d (%d = no limit)", i, d.Compute, contract.ComputeUnlimited, contract.ComputeUnlimited)
		}
		if r := d.ComputeRequest; r != nil && (*r < 0 || *r > d.Compute) {
			return fmt.Errorf("device %d: compute request %d not in 0..%d (the limit)", i, *r, d.Compute)
		}
		if d.MemoryRequest > 1<<63-1 || d.Memory > 0 && d.MemoryRequest > d.Memory {
			return fmt.Errorf("device %d: memory request %d above the limit %d", i, d.MemoryRequest, d.Memory)
		}
		if d.Phase != nil && (*d.Phase < 0 || *d.Phase > contract.MaxPhase) {
			return fmt.Errorf("device %d: phase %d not in 0..%d", i, *d.Phase, contract.MaxPhase)
		}
		if d.Memory > 1<<63-1 {
			return fmt.Errorf("device %d: memory %d too large", i, d.Memory)
		}
		if d.Mode.IsSpatial() {
			if err := quotaPath(fmt.Sprintf("device %d: mps_pipe", i), d.MPSPipe); err != nil {
				return err
			}
			if d.ComputeRequest != nil || d.Phase != nil {
				return fmt.Errorf("device %d: a spatial device takes no compute request or phase (MPS shares are fixed)", i)
			}
		} else if d.MPSPipe != "" {
			return fmt.Errorf("device %d: mps_pipe %q on a device that is not spatial", i, d.MPSPipe)
		}
	}
	return nil
}

// decimal: no sign, no leading zeros (except "0"), no overflow, <= max.
func decimal(s string, max uint64) (uint64, bool) {
	if s == "" || len(s) > 20 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > max {
		return 0, false
	}
	return n, true
}

// Parse parses a quota file with the rules of the C library's parser
// (lib/cudahook/src/quota.c): printable ASCII only, empty and # lines skipped,
// fields separated by single spaces, the last newline optional, at most
// 65536 bytes, lines < 1536 bytes, 16 devices, paths < 1024 bytes, UUIDs
// GPU-…/MIG-… < 96 bytes.
// Compute absent is returned as contract.ComputeUnlimited; a file with no device line is
// accepted (as the C parser does) but Marshal never writes one.
func Parse(data []byte) (*File, error) {
	if len(data) > contract.QuotaMaxBytes {
		return nil, fmt.Errorf("file larger than %d bytes", contract.QuotaMaxBytes)
	}
	q := &File{}
	lines := strings.Split(string(data), "\n")
	if strings.HasSuffix(string(data), "\n") {
		lines = lines[:len(lines)-1]
	}
	version := false
	seen := map[string]bool{}
	uuids := map[string]bool{}
	for n, line := range lines {
		ln := n + 1
		bad := func(format string, a ...any) error {
			return fmt.Errorf("line %d: %s", ln, fmt.Sprintf(format, a...))
		}
		if len(line) >= contract.QuotaLineMax {
			return nil, bad("line too long")
		}
		for i := 0; i < len(line); i++ {
			if line[i] < 0x20 || line[i] >= 0x7f {
				return nil, bad("invalid character 0x%02x", line[i])
			}
		}
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, " ")
		if len(f) > 10 {
			return nil, bad("too many fields")
		}
		for _, x := range f {
			if x == "" {
				return nil, bad("fields must be separated by single spaces")
			}
		}
		if !version {
			if len(f) != 2 || f[0] != "vgpu-quota" {
				return nil, bad("first directive must be \"vgpu-quota %d\"", contract.QuotaVersion)
			}
			if len(f[1]) != 1 || f[1][0] < '1' || f[1][0] > '0'+contract.QuotaVersion {
				return nil, bad("unsupported quota file version %q (this reader knows 1 to %d)", f[1], contract.QuotaVersion)
			}
			q.FormatVersion = int(f[1][0] - '0')
			version = true
			continue
		}
		dir := f[0]
		if dir == "device" {
			d, err := parseQuotaDevice(f, len(q.Devices), uuids, q.FormatVersion)
			if err != nil {
				return nil, bad("%v", err)
			}
			q.Devices = append(q.Devices, d)
			continue
		}
		if len(f) != 2 {
			return nil, bad("%q wants exactly one value", dir)
		}
		switch dir {
		case "driver-cuda", "driver-nvml", "shared-dir", "log-level", "compute-period":
		default:
			return nil, bad("unknown directive %q", dir)
		}
		if seen[dir] {
			return nil, bad("%s given twice", dir)
		}
		seen[dir] = true
		v := f[1]
		if dir == "compute-period" {
			ms, ok := decimal(v, contract.PeriodMaxMS)
			if !ok {
				return nil, bad("bad compute-period %q (milliseconds, 0..%d)", v, contract.PeriodMaxMS)
			}
			p := int(ms)
			q.ComputePeriodMS = &p
			continue
		}
		if dir == "log-level" {
			if !quotaLevels[v] {
				return nil, bad("bad log-level %q (error, warn, info, debug)", v)
			}
			q.LogLevel = v
			continue
		}
		if v[0] != '/' {
			return nil, bad("%s must be an absolute path", dir)
		}
		if len(v) >= contract.PathMax {
			return nil, bad("%s too long", dir)
		}
		switch dir {
		case "driver-cuda":
			q.DriverCuda = v
		case "driver-nvml":
			q.DriverNvml = v
		case "shared-dir":
			q.SharedDir = v
		}
	}
	if !version {
		return nil, fmt.Errorf("empty (no \"vgpu-quota %d\" line)", contract.QuotaVersion)
	}
	for _, req := range []string{"driver-cuda", "driver-nvml", "shared-dir"} {
		if !seen[req] {
			return nil, fmt.Errorf("missing %s", req)
		}
	}
	return q, nil
}

func parseQuotaDevice(f []string, next int, uuids map[string]bool, version int) (tenant.Device, error) {
	if len(f) < 3 || len(f) > 10 || version < 3 && len(f) > 8 || version < 2 && len(f) > 6 {
		return tenant.Device{}, errors.New("device wants: device IDX UUID [memory=BYTES] [memory-request=BYTES] [compute=PCT] [compute-request=PCT] [phase=PCT] [mode=spatial mps_pipe=PATH]")
	}
	idx, ok := decimal(f[1], 1<<63)
	if !ok {
		return tenant.Device{}, fmt.Errorf("bad device index %q", f[1])
	}
	if idx != uint64(next) {
		return tenant.Device{}, fmt.Errorf("device index %s out of order (expected %d)", f[1], next)
	}
	if next >= contract.MaxDevices {
		return tenant.Device{}, fmt.Errorf("more than %d devices", contract.MaxDevices)
	}
	if !quotaUUID(f[2]) {
		return tenant.Device{}, fmt.Errorf("bad device UUID %q", f[2])
	}
	if uuids[f[2]] {
		return tenant.Device{}, fmt.Errorf("device %s listed twice", f[2])
	}
	uuids[f[2]] = true
	d := tenant.Device{Index: next, GPU: tenant.GPU{UUID: f[2]}, Compute: contract.ComputeUnlimited}
	seenMem, seenComp, seenPhase, seenCReq, seenMReq, seenMode, seenPipe := false, false, false, false, false, false, false
	for _, o := range f[3:] {
		switch {
		case version >= 3 && strings.HasPrefix(o, "mode=") && !seenMode:
			m, err := tenant.ModeOfQuota(o[5:])
			if err != nil {
				return tenant.Device{}, err
			}
			d.Mode, seenMode = m, true
		case version >= 3 && strings.HasPrefix(o, "mps_pipe=") && !seenPipe:
			p := o[9:]
			if p == "" || p[0] != '/' || len(p) >= contract.PathMax {
				return tenant.Device{}, fmt.Errorf("bad mps_pipe %q (an absolute path shorter than %d bytes)", p, contract.PathMax)
			}
			d.MPSPipe, seenPipe = p, true
		case version >= 2 && strings.HasPrefix(o, "memory-request=") && !seenMReq:
			m, ok := decimal(o[15:], 1<<63-1)
			if !ok || m == 0 {
				return tenant.Device{}, fmt.Errorf("bad memory-request %q (bytes, > 0)", o[15:])
			}
			d.MemoryRequest, seenMReq = m, true
		case version >= 2 && strings.HasPrefix(o, "compute-request=") && !seenCReq:
			c, ok := decimal(o[16:], 100)
			if !ok {
				return tenant.Device{}, fmt.Errorf("bad compute-request %q (percent, 0..100)", o[16:])
			}
			v := int(c)
			d.ComputeRequest, seenCReq = &v, true
		case strings.HasPrefix(o, "memory=") && !seenMem:
			m, ok := decimal(o[7:], 1<<64-1)
			if !ok || m == 0 {
				return tenant.Device{}, fmt.Errorf("bad memory %q (bytes, > 0)", o[7:])
			}
			d.Memory, seenMem = m, true
		case strings.HasPrefix(o, "compute=") && !seenComp:
			c, ok := decimal(o[8:], 100)
			if !ok || c == 0 {
				return tenant.Device{}, fmt.Errorf("bad compute %q (percent, 1..100)", o[8:])
			}
			d.Compute, seenComp = int(c), true
		case strings.HasPrefix(o, "phase=") && !seenPhase:
			ph, ok := decimal(o[6:], contract.MaxPhase)
			if !ok {
				return tenant.Device{}, fmt.Errorf("bad phase %q (percent of the period, 0..%d)", o[6:], contract.MaxPhase)
			}
			v := int(ph)
			d.Phase, seenPhase = &v, true
		default:
			return tenant.Device{}, fmt.Errorf("unknown or repeated device option %q", o)
		}
	}
	if d.ComputeRequest != nil && *d.ComputeRequest > d.Compute {
		return tenant.Device{}, fmt.Errorf("compute-request %d above compute %d", *d.ComputeRequest, d.Compute)
	}
	if d.Memory > 0 && d.MemoryRequest > d.Memory {
		return tenant.Device{}, fmt.Errorf("memory-request %d above memory %d", d.MemoryRequest, d.Memory)
	}
	if d.Mode.IsSpatial() != seenPipe {
		return tenant.Device{}, errors.New("mode=spatial and mps_pipe= go together")
	}
	if d.Mode.IsSpatial() && (seenCReq || seenPhase) {
		return tenant.Device{}, errors.New("a spatial device takes no compute-request or phase")
	}
	return d, nil
}

// Render is the quota file of record r: its library's settings and its
// devices as they are. Marshal validates it.
func Render(r *tenant.Record) *File {
	q := &File{Devices: r.Devices}
	if l := r.Library; l != nil {
		q.DriverCuda, q.DriverNvml, q.SharedDir, q.LogLevel, q.ComputePeriodMS = l.DriverCuda, l.DriverNvml, l.SharedDir, l.LogLevel, l.ComputePeriodMS
	}
	q.FormatVersion = q.WriteVersion()
	return q
}

// Library is the file's header as the record has it.
func (q *File) Library() *tenant.Library {
	return &tenant.Library{DriverCuda: q.DriverCuda, DriverNvml: q.DriverNvml, SharedDir: q.SharedDir, LogLevel: q.LogLevel, ComputePeriodMS: q.ComputePeriodMS}
}
