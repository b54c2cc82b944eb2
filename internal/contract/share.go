//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package contract

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"unsafe"
)

// SharePath is the path rule of the share file (vgpu_share.h): ShareFile in
// ShareDir beside the region's directory regionDir. The library applies the
// same rule to its quota file's shared-dir (src/share.c).
func SharePath(regionDir string) string {
	return filepath.Join(filepath.Dir(regionDir), ShareDir, ShareFile)
}

// DecodeShare is the share file at the start of b, as the generated struct
// (copied, never aliased: the host reads a copy of the bytes); false when b
// is shorter than the file. Version 1's devices are at the same place with
// 16 bytes each: ShareDevsV1 reads them.
func DecodeShare(b []byte) (f ShareFileLayout, ok bool) {
	n := int(unsafe.Sizeof(f))
	if len(b) < n {
		return f, false
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&f)), n), b[:n])
	return f, true
}

// ShareDevsV1 are the devices of a version-1 share file f, which held 16
// bytes each where version 2 holds Dev.
func ShareDevsV1(f *ShareFileLayout) *[ShareDevices]ShareDevV1 {
	return (*[ShareDevices]ShareDevV1)(unsafe.Pointer(&f.Dev))
}

// EncodeShare is the bytes of f. It encodes with encoding/binary, not with
// the decoder's copy, so that a test of a reader also checks the decoding.
func EncodeShare(f *ShareFileLayout) []byte {
	var w bytes.Buffer
	_ = binary.Write(&w, binary.LittleEndian, f) // fixed-size: cannot fail
	return w.Bytes()
}
