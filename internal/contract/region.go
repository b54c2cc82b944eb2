//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package contract

import (
	"bytes"
	"encoding/binary"
	"unsafe"
)

// RegionBytes is the size of a region file: the header, then the slots.
const RegionBytes = RegionHeaderSize + RegionSlots*RegionSlotSize

// The host reads a region as a copy of its bytes (never a mapping: a tenant
// may truncate the file at any time) and decodes that copy into the
// generated structs with one copy each: the region is little-endian, as
// every architecture this file builds on (on a big-endian one the package
// does not build, rather than misread).

// DecodeRegionHeader is the header at the start of b; false when b is
// shorter than a header.
func DecodeRegionHeader(b []byte) (RegionHeader, bool) { return decodeAt[RegionHeader](b, 0) }

// DecodeRegionSlot is slot i of b, at RegionHeaderSize + RegionSlotSize*i;
// false when b ends before it.
func DecodeRegionSlot(b []byte, i int) (RegionSlot, bool) {
	return decodeAt[RegionSlot](b, RegionHeaderSize+RegionSlotSize*i)
}

func decodeAt[T RegionHeader | RegionSlot](b []byte, off int) (v T, ok bool) {
	n := int(unsafe.Sizeof(v))
	if off < 0 || off > len(b) || len(b)-off < n {
		return v, false
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), n), b[off:off+n])
	return v, true
}

// EncodeRegion is a region file holding h and, at their index, the slots
// given (the others zero): what tests and fixtures write. It encodes with
// encoding/binary, not with the decoder's copy, so that a test of a reader
// also checks the decoding.
func EncodeRegion(h RegionHeader, slots map[int]RegionSlot) []byte {
	var w bytes.Buffer
	_ = binary.Write(&w, binary.LittleEndian, &h) // fixed-size: cannot fail
	b := append(w.Bytes(), make([]byte, RegionSlots*RegionSlotSize)...)
	for i, s := range slots {
		w.Reset()
		_ = binary.Write(&w, binary.LittleEndian, &s)
		copy(b[RegionHeaderSize+RegionSlotSize*i:], w.Bytes())
	}
	return b
}

// NewRegionHeader is a header of this layout with version v and nothing
// else set: what the library writes at creation (less the mutex).
func NewRegionHeader(v uint32) RegionHeader {
	return RegionHeader{Magic: RegionMagic, Version: v, HeaderSize: RegionHeaderSize, SlotCount: RegionSlots,
		SlotSize: RegionSlotSize, MaxDevices: RegionDevices}
}
