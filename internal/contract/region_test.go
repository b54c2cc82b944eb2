package contract

import (
	"testing"
	"unsafe"
)

// The generated structs have the sizes the header states, and a region
// encoded field by field (encoding/binary, little-endian) decodes to the
// same values.
func TestRegionRoundTrip(t *testing.T) {
	if unsafe.Sizeof(RegionHeader{}) != RegionHeaderSize || unsafe.Sizeof(RegionSlot{}) != RegionSlotSize {
		t.Fatalf("header %d bytes, slot %d", unsafe.Sizeof(RegionHeader{}), unsafe.Sizeof(RegionSlot{}))
	}
	h := NewRegionHeader(RegionVersion)
	h.Compute[3].BusyNs, h.WantNs[15], h.QueueEnd[0] = 7, 9, -1
	s := RegionSlot{State: 1, Pid: 42, Claimed: 1 << 40, Pending: 3<<RegionPendingDevShift | 5}
	s.Usage[15] = 1 << 33
	b := EncodeRegion(h, map[int]RegionSlot{RegionSlots - 1: s})
	if len(b) != RegionBytes {
		t.Fatalf("%d bytes", len(b))
	}
	if string(b[:8]) != "VGPUREG1" {
		t.Fatalf("magic %q", b[:8])
	}
	gh, ok := DecodeRegionHeader(b)
	if !ok || gh != h {
		t.Fatalf("header %+v", gh)
	}
	gs, ok := DecodeRegionSlot(b, RegionSlots-1)
	if !ok || gs != s {
		t.Fatalf("slot %+v", gs)
	}
	if _, ok := DecodeRegionSlot(b[:len(b)-1], RegionSlots-1); ok {
		t.Fatal("a slot past the end decoded")
	}
	if _, ok := DecodeRegionHeader(b[:RegionHeaderSize-1]); ok {
		t.Fatal("a short header decoded")
	}
}
