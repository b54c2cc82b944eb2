// Package regionread reads the shared accounting region of one container
// from the host, for vgpu status and vgpu node alike, by the layout of
// lib/cudahook/include/vgpu_region.h (in Go: contract.RegionHeader and
// contract.RegionSlot, generated from it). The reader reads the file
// with pread (never maps it: a tenant may truncate it at any time), takes no
// lock (it only asks, with F_OFD_GETLK, which slots' lock bytes are held, to
// tell live slots from dead ones; the library shares no mutex) and never
// creates or writes anything: a snapshot may be a few updates behind; the
// slots are read again until two copies agree (Stable), which also catches a
// field caught half-written by a read.
package regionread

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/tenantfile"
)

// Slot is one process's record in the region.
type Slot struct {
	Index     int
	PID       int    // as the process saw itself (its own PID namespace)
	ClaimedNs uint64 // CLOCK_REALTIME ns
	Usage     [contract.RegionDevices]uint64
	// Alive: state 1 and someone holds the slot's lock byte (F_OFD_GETLK).
	Alive bool
}

// Region is a snapshot of one container's region.
type Region struct {
	Version int
	Slots   []Slot // state 1 slots, alive or not (a dead one is not counted)
	// Stable: two copies of the slots in a row agreed (the reading is very
	// likely one instant); false when the slots kept changing.
	Stable bool
	// Compute holds the per-device compute fields of layout versions 2 on, nil
	// when the region has none (see compute.go).
	Compute []DeviceCompute
	// Header is the region's header as read.
	Header contract.RegionHeader
}

// ErrNoRegion: no process of the container has used the driver yet.
var ErrNoRegion = errors.New("no shared region yet (no process has used the GPU)")

// Usage is the container's usage of device d: the sum over live slots.
func (r *Region) Usage(d int) uint64 {
	var sum uint64
	for _, s := range r.Slots {
		if s.Alive && d >= 0 && d < contract.RegionDevices {
			sum = addSat(sum, s.Usage[d])
		}
	}
	return sum
}

func addSat(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// MaxRegionBytes is the largest file taken for a region: far above the
// layout (contract.RegionBytes), far below what a tenant could make the
// host read (a sparse file of any size).
const MaxRegionBytes = 64 << 20

// Read reads the region in dir (a container's shared/ directory).
// A missing region is ErrNoRegion; a region that is not one of ours, of a
// layout this reader does not know, or truncated is an error (never a panic).
// The tenant writes this directory: the file is opened beneath dir without
// following links, must be a regular file, and is read within
// tenantfile.Deadline (internal/tenantfile).
func Read(dir string) (*Region, error) {
	return tenantfile.Within(filepath.Join(dir, contract.RegionFile), tenantfile.Deadline, func() (*Region, error) {
		return read(dir)
	})
}

func read(dir string) (*Region, error) {
	path := filepath.Join(dir, contract.RegionFile)
	f, fi, err := tenantfile.Open(dir, contract.RegionFile, MaxRegionBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoRegion
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := fi.Size()
	if size == 0 {
		// created, not yet sized: a process is initialising it right now
		return nil, ErrNoRegion
	}
	if size < contract.RegionHeaderSize {
		return nil, fmt.Errorf("%s: truncated region (%d bytes)", path, size)
	}
	// Only the layout's bytes: whatever a tenant appends is not read.
	size = min(size, contract.RegionBytes)
	// pread, not mmap: a tenant can shrink its region file (ftruncate) at
	// any moment, and a mapping past the new end faults with SIGBUS; a read
	// just comes back short.
	b := make([]byte, size)
	if err := preadFull(f, b, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	reread := func(off, n int) error { return preadFull(f, b[off:off+n], int64(off)) }
	return parseRegion(path, b, dir, reread)
}

// ReadHeader reads only the header of the region in dir (the
// per-device compute and need fields), with Read's care; the caller
// checks magic and version. A missing region is ErrNoRegion.
func ReadHeader(dir string) (contract.RegionHeader, error) {
	return tenantfile.Within(filepath.Join(dir, contract.RegionFile), tenantfile.Deadline, func() (contract.RegionHeader, error) {
		var h contract.RegionHeader
		f, fi, err := tenantfile.Open(dir, contract.RegionFile, MaxRegionBytes)
		if errors.Is(err, os.ErrNotExist) {
			return h, ErrNoRegion
		}
		if err != nil {
			return h, err
		}
		defer f.Close()
		if fi.Size() < contract.RegionHeaderSize {
			return h, ErrNoRegion
		}
		b := make([]byte, contract.RegionHeaderSize)
		if err := preadFull(f, b, 0); err != nil {
			return h, fmt.Errorf("%s: %w", f.Name(), err)
		}
		h, ok := contract.DecodeRegionHeader(b)
		if !ok {
			return h, fmt.Errorf("%s: truncated region header", f.Name())
		}
		return h, nil
	})
}

// preadFull fills b from offset off; a file that ended before is an error.
func preadFull(f *os.File, b []byte, off int64) error {
	n, err := f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("truncated region (changed size while read: %d bytes at offset %d)", n, off)
	}
	return err
}

// parseRegion reads the region's copy b; reread (nil: none) refreshes a
// range of b from the file, for the repeated copies of the slots.
func parseRegion(path string, b []byte, dir string, reread func(off, n int) error) (*Region, error) {
	held, closeLock := lockChecker(dir)
	defer closeLock()
	h, ok := contract.DecodeRegionHeader(b)
	if !ok {
		return nil, fmt.Errorf("%s: truncated region (%d bytes)", path, len(b))
	}
	if h.Magic != contract.RegionMagic {
		if h.Magic == 0 {
			// The magic is written last, under byte 0 of the lock file: a
			// process is creating the region right now, or one was killed
			// while creating it and the next one to open it creates it
			// again. Either way no process has used it yet.
			return nil, ErrNoRegion
		}
		return nil, fmt.Errorf("%s is not a vgpu region (bad magic %#x)", path, h.Magic)
	}
	r := &Region{Version: int(h.Version), Header: h}
	if r.Version < 1 || r.Version > contract.RegionVersion {
		return nil, fmt.Errorf("%s has layout version %d; this vgpu knows 1..%d", path, r.Version, contract.RegionVersion)
	}
	// Every version so far has this one layout; a later one only gave
	// meaning to bytes that were reserved.
	if h.HeaderSize != contract.RegionHeaderSize || h.SlotCount != contract.RegionSlots || h.SlotSize != contract.RegionSlotSize || h.MaxDevices != contract.RegionDevices {
		return nil, fmt.Errorf("%s: layout version %d with header %d, %d slots of %d bytes, %d devices: not the documented layout",
			path, r.Version, h.HeaderSize, h.SlotCount, h.SlotSize, h.MaxDevices)
	}
	if len(b) < contract.RegionBytes {
		return nil, fmt.Errorf("%s: truncated region (%d bytes, layout needs %d)", path, len(b), contract.RegionBytes)
	}
	// Copy the slots in use first (memory reads only), then ask for their
	// locks: the copy spans as little time as possible. Copy again until two
	// copies agree (a few tries): with processes allocating all along, one
	// copy can catch a process's allocation but miss another's free that
	// came before it (docs/status.md, "Consistency").
	var prev []Slot
	for try := 0; try < 8; try++ {
		if try > 0 && reread != nil {
			if err := reread(contract.RegionHeaderSize, contract.RegionSlots*contract.RegionSlotSize); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
		cur := copySlots(b)
		if try > 0 && slices.Equal(prev, cur) {
			r.Stable = true
			break
		}
		prev = cur
	}
	for i := range prev {
		prev[i].Alive = held(1 + prev[i].Index)
	}
	r.Slots = prev
	r.Compute = readCompute(r.Version, &h)
	return r, nil
}

// PaceWait is the cumulative ms in which the container's pacer held a
// launch (its bucket, its slot, a free run's bound) with none of its work
// queued, all devices together; it wraps at 2^32. ok false before layout 7,
// whose bytes there are no count.
func (r *Region) PaceWait() (ms uint32, ok bool) {
	return r.Header.PaceWaitMs, r.Version >= 7
}

// lockChecker answers whether byte n of vgpu.lock is held by anyone (byte 0:
// a process is creating the region; byte 1+i: slot i has a live owner):
// F_OFD_GETLK on our own description, which holds no lock. Without a lock
// file nobody holds anything. When the answer cannot be had, the byte is
// taken as held (as the library does: never drop a live process's bytes).
func lockChecker(dir string) (func(int) bool, func()) {
	if dir == "" {
		return func(int) bool { return false }, func() {}
	}
	f, _, err := tenantfile.Open(dir, contract.RegionLockFile, MaxLockBytes)
	if errors.Is(err, os.ErrNotExist) {
		return func(int) bool { return false }, func() {}
	}
	if err != nil {
		return func(int) bool { return true }, func() {}
	}
	fd := int(f.Fd())
	return func(n int) bool {
		fl := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(n), Len: 1}
		if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &fl); err != nil {
			return true
		}
		return fl.Type != unix.F_UNLCK
	}, func() { f.Close() }
}

// MaxLockBytes is the largest lock file opened: it holds no data, only
// byte-range locks.
const MaxLockBytes = 1 << 20

// copySlots: the slots in use of b, a whole region.
func copySlots(b []byte) []Slot {
	var out []Slot
	for i := 0; i < contract.RegionSlots; i++ {
		rs, _ := contract.DecodeRegionSlot(b, i)
		if rs.State != 1 {
			continue
		}
		out = append(out, Slot{Index: i, PID: int(rs.Pid), ClaimedNs: rs.Claimed, Usage: rs.Usage})
	}
	return out
}
