package contract

import (
	"testing"
	"unsafe"
)

// The generated structs have the sizes the header states, a file encoded
// field by field decodes to the same values, and the path rule puts the
// file in host/ beside the region's directory.
func TestShareRoundTrip(t *testing.T) {
	if unsafe.Sizeof(ShareFileLayout{}) != ShareBytes || unsafe.Sizeof(ShareDev{}) != 24 || unsafe.Sizeof(ShareDevV1{}) != 16 {
		t.Fatalf("file %d bytes, device %d", unsafe.Sizeof(ShareFileLayout{}), unsafe.Sizeof(ShareDev{}))
	}
	f := ShareFileLayout{Magic: ShareMagic, Version: ShareVersion, Devices: 2, StampNs: 5, PeriodMs: 100, MemUntilNs: 7}
	f.Dev[1] = ShareDev{Admission: 1, Arbitration: 2, Ceiling: 3}
	f.Order[15].BoundNs = 9
	f.RoomUntilNs = 11
	b := EncodeShare(&f)
	if len(b) != ShareBytes || string(b[:8]) != "GPUGRAN1" {
		t.Fatalf("%d bytes, magic %q", len(b), b[:8])
	}
	g, ok := DecodeShare(b)
	if !ok || g != f {
		t.Fatalf("decoded %+v", g)
	}
	if v1 := ShareDevsV1(&g); v1[2].Admission != 2 || v1[2].Arbitration != 3 {
		t.Errorf("version 1's device 2 is the bytes at 64+32: %+v", v1[2])
	}
	if _, ok := DecodeShare(b[:ShareBytes-1]); ok {
		t.Error("a short file decoded")
	}
	for dir, want := range map[string]string{
		"/var/lib/vgpu/c1/shared": "/var/lib/vgpu/c1/host/grant",
		"/run/vgpu/shared":        "/run/vgpu/host/grant",
	} {
		if got := SharePath(dir); got != want {
			t.Errorf("SharePath(%s) = %s, want %s", dir, got, want)
		}
	}
}
