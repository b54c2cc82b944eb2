package status

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

// The shared accounting region of one container, read from the host by the
// layout documented in lib/cudahook/README.md ("Shared region"). The reader
// reads the file with pread (never maps it: a tenant may truncate it at any
// time), takes no lock (it only asks, with F_OFD_GETLK, which slots' lock
// bytes are held, to tell live slots from dead ones; layout 3 has no shared
// mutex at all) and never creates or writes anything: a snapshot may be a
// few updates behind; the slots are read again until two copies agree
// (Stable), which also catches a field caught half-written by a read.
const (
	RegionFile     = contract.RegionFile
	RegionLockFile = contract.RegionLockFile
	RegionMagic    = contract.RegionMagic
	RegionDevices  = contract.RegionDevices

	hdrMagic      = 0
	hdrVersion    = contract.RegionHdrVersion
	hdrHeaderSize = contract.RegionHdrHeaderSize
	hdrSlotCount  = contract.RegionHdrSlotCount
	hdrSlotSize   = contract.RegionHdrSlotSize
	hdrDevices    = contract.RegionHdrDevices

	slotState   = contract.RegionSlotState
	slotPID     = contract.RegionSlotPID
	slotClaimed = contract.RegionSlotClaimed
	slotUsage   = contract.RegionSlotUsage

	// the library's layout: header, 1024 slots of 256 bytes
	layoutHeader   = contract.RegionHeader
	layoutSlots    = contract.RegionSlots
	layoutSlotSize = contract.RegionSlotSize
)

// Slot is one process's record in the region.
type Slot struct {
	Index     int
	PID       int    // as the process saw itself (its own PID namespace)
	ClaimedNs uint64 // CLOCK_REALTIME ns
	Usage     [RegionDevices]uint64
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
	// Compute holds the per-device compute fields of layout versions 2 and 3, nil
	// when the region has none (see compute.go).
	Compute []DeviceCompute
}

// ErrNoRegion: no process of the container has used the driver yet.
var ErrNoRegion = errors.New("no shared region yet (no process has used the GPU)")

// Usage is the container's usage of device d: the sum over live slots.
func (r *Region) Usage(d int) uint64 {
	var sum uint64
	for _, s := range r.Slots {
		if s.Alive && d >= 0 && d < RegionDevices {
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

func load32(b []byte, off int) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
}

func load64(b []byte, off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}

// ReadRegion reads the region in dir (a container's shared/ directory).
// A missing region is ErrNoRegion; a region that is not one of ours, of a
// layout this reader does not know, or truncated is an error (never a panic).
func ReadRegion(dir string) (*Region, error) {
	path := filepath.Join(dir, RegionFile)
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoRegion
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	size := fi.Size()
	if size == 0 {
		// created, not yet sized: a process is initialising it right now
		return nil, ErrNoRegion
	}
	if size < layoutHeader {
		return nil, fmt.Errorf("%s: truncated region (%d bytes)", path, size)
	}
	if size > 64<<20 {
		return nil, fmt.Errorf("%s: %d bytes, too large for a region", path, size)
	}
	// pread, not mmap: a tenant can shrink its region file (ftruncate) at
	// any moment, and a mapping past the new end faults with SIGBUS; a read
	// just comes back short.
	b := make([]byte, size)
	if err := preadFull(f, b, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	reread := func(off, n int) error { return preadFull(f, b[off:off+n], int64(off)) }
	return parseRegion(path, b, filepath.Join(dir, RegionLockFile), reread)
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
func parseRegion(path string, b []byte, lockPath string, reread func(off, n int) error) (*Region, error) {
	held, closeLock := lockChecker(lockPath)
	defer closeLock()
	if m := load64(b, hdrMagic); m != RegionMagic {
		if m == 0 {
			// The magic is written last, under byte 0 of the lock file: a
			// process is creating the region right now, or one was killed
			// while creating it and the next one to open it creates it
			// again. Either way no process has used it yet.
			return nil, ErrNoRegion
		}
		return nil, fmt.Errorf("%s is not a vgpu region (bad magic %#x)", path, m)
	}
	r := &Region{Version: int(load32(b, hdrVersion))}
	hs, sc, ss, nd := load32(b, hdrHeaderSize), load32(b, hdrSlotCount), load32(b, hdrSlotSize), load32(b, hdrDevices)
	if r.Version < 1 || r.Version > maxKnownVersion {
		return nil, fmt.Errorf("%s has layout version %d; this vgpu knows 1..%d", path, r.Version, maxKnownVersion)
	}
	if hs != layoutHeader || sc != layoutSlots || ss != layoutSlotSize || nd != RegionDevices {
		return nil, fmt.Errorf("%s: layout version %d with header %d, %d slots of %d bytes, %d devices: not the documented layout",
			path, r.Version, hs, sc, ss, nd)
	}
	if int64(len(b)) < int64(hs)+int64(sc)*int64(ss) {
		return nil, fmt.Errorf("%s: truncated region (%d bytes, layout needs %d)", path, len(b), int64(hs)+int64(sc)*int64(ss))
	}
	// Copy the slots in use first (memory reads only), then ask for their
	// locks: the copy spans as little time as possible. Copy again until two
	// copies agree (a few tries): with processes allocating all along, one
	// copy can catch a process's allocation but miss another's free that
	// came before it (docs/status.md, "Consistency").
	var prev []Slot
	for try := 0; try < 8; try++ {
		if try > 0 && reread != nil {
			if err := reread(int(hs), int(sc)*int(ss)); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
		cur := copySlots(b, int(hs), int(sc), int(ss))
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
	r.Compute = readCompute(r.Version, b)
	return r, nil
}

// lockChecker answers whether byte n of vgpu.lock is held by anyone (byte 0:
// a process is creating the region; byte 1+i: slot i has a live owner):
// F_OFD_GETLK on our own description, which holds no lock. Without a lock
// file nobody holds anything. When the answer cannot be had, the byte is
// taken as held (as the library does: never drop a live process's bytes).
func lockChecker(path string) (func(int) bool, func()) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
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

func copySlots(b []byte, hs, sc, ss int) []Slot {
	var out []Slot
	for i := 0; i < sc; i++ {
		o := hs + i*ss
		if load32(b, o+slotState) != 1 {
			continue
		}
		s := Slot{Index: i, PID: int(load32(b, o+slotPID)), ClaimedNs: load64(b, o+slotClaimed)}
		for d := 0; d < RegionDevices; d++ {
			s.Usage[d] = load64(b, o+slotUsage+8*d)
		}
		out = append(out, s)
	}
	return out
}
