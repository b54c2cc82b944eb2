package regionread

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"golang.org/x/sys/unix"
)

// A tenant can write anything into its region file (mode 0666 in its shared
// directory), and vgpu status and vgpu metrics read it on the host. Whatever
// the bytes: an error, or a region whose figures stay in range, never a
// panic. The lock file holds every slot's byte, so that every slot in use
// counts and Usage's sums are exercised.
func FuzzReadRegion(f *testing.F) {
	// Seeds are a region's first bytes; padded (pad true) to the layout's
	// size with zeros, so that the fuzzer works on the header and the first
	// slots rather than on 260 KiB of zeros.
	max := ^uint64(0)
	head := func(b []byte) []byte { return b[:contract.RegionHeaderSize+3*contract.RegionSlotSize] }
	f.Add(head(regionBytes(3, map[int]Slot{0: {PID: 7, Usage: [contract.RegionDevices]uint64{1 << 30}}}, []uint64{5, 6})), true)
	f.Add(head(regionBytes(2, map[int]Slot{1: {Usage: [contract.RegionDevices]uint64{max, max}}, 2: {Usage: [contract.RegionDevices]uint64{max, 1}}}, nil)), true)
	f.Add(head(regionBytes(3, map[int]Slot{0: {PID: 1}}, nil)), false)
	f.Add(head(regionBytes(1, nil, nil)), true)
	f.Add(head(regionBytes(99, nil, nil)), true)
	f.Add(make([]byte, contract.RegionHeaderSize), false)
	f.Add([]byte("VGPUREG1"), false)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, data []byte, pad bool) {
		if pad && len(data) < contract.RegionHeaderSize+contract.RegionSlots*contract.RegionSlotSize {
			data = append(data, make([]byte, contract.RegionHeaderSize+contract.RegionSlots*contract.RegionSlotSize-len(data))...)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, contract.RegionFile), data, 0o666); err != nil {
			t.Fatal(err)
		}
		held := holdAllSlots(t, dir)
		defer held.Close()
		r, err := Read(dir)
		if err != nil {
			if r != nil {
				t.Fatalf("an error (%v) and a region", err)
			}
			if errors.Is(err, ErrNoRegion) && len(data) >= 8 && string(data[:8]) == "VGPUREG1" {
				t.Fatalf("a region with its magic read as none yet")
			}
			return
		}
		if r.Version < 1 || r.Version > contract.RegionVersion {
			t.Fatalf("layout version %d accepted", r.Version)
		}
		if len(r.Slots) > contract.RegionSlots {
			t.Fatalf("%d slots from a layout of %d", len(r.Slots), contract.RegionSlots)
		}
		for d := -1; d <= contract.RegionDevices; d++ {
			sum := r.Usage(d)
			for _, s := range r.Slots {
				if s.Index < 0 || s.Index >= contract.RegionSlots {
					t.Fatalf("slot index %d", s.Index)
				}
				if d >= 0 && d < contract.RegionDevices && s.Alive && sum < s.Usage[d] {
					t.Fatalf("device %d: usage %d below one slot's %d (wrapped)", d, sum, s.Usage[d])
				}
			}
		}
		if r.Compute != nil && len(r.Compute) != contract.RegionDevices {
			t.Fatalf("%d compute entries", len(r.Compute))
		}
	})
}

// holdAllSlots write-locks every byte of dir's lock file through another
// open file description than the reader's (F_OFD_SETLK), as live processes do.
func holdAllSlots(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, contract.RegionLockFile), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	fl := unix.Flock_t{Type: unix.F_WRLCK, Start: 1, Len: contract.RegionSlots}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &fl); err != nil {
		f.Close()
		t.Fatal(err)
	}
	return f
}
