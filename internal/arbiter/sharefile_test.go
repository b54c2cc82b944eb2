package arbiter

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// writeShareFile is a share file as the host writes it: the admission's
// Encode, then vgpu node's in-place updates through Map.
func writeShareFile(t *testing.T) []byte {
	t.Helper()
	b, err := Encode([]uint64{Word(3000, 0), Word(7000, 3000), 0})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "grant")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Map(p)
	if err != nil {
		t.Fatal(err)
	}
	m.SetLive(0, Word(4000, 0))
	m.SetLive(1, Word(6000, 4000))
	m.SetStatic(2, Word(1500, -1))
	m.Stamp(0x0102030405060708, 100)
	m.SetCeiling(0, 24<<30)
	m.SetCeiling(1, 8<<30)
	m.StampMemory(0x1112131415161718)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The host writes, for the same content, the bytes the version-2 writer of
// the previous release wrote (testdata/share-v2.golden, written by that
// release's code and never regenerated): libraries of that release, which
// read the file at fixed offsets, keep reading it. The golden file is also
// read here at the offsets that release's library used, so that the file
// is checked by something other than the code under test.
func TestShareFileGolden(t *testing.T) {
	got := writeShareFile(t)
	want, err := os.ReadFile("testdata/share-v2.golden")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("byte %d is %#x, the version-2 file has %#x (%d and %d bytes)", i, got[i], want[i], len(got), len(want))
			}
		}
		t.Fatalf("%d bytes, the version-2 file has %d", len(got), len(want))
	}
	le := binary.LittleEndian
	dev := func(i, off int) uint64 { return le.Uint64(want[64+24*i+off:]) }
	for _, c := range []struct {
		what      string
		got, want uint64
	}{
		{"magic", le.Uint64(want), 0x314e415247555047},
		{"version", uint64(le.Uint32(want[8:])), 2},
		{"devices", uint64(le.Uint32(want[12:])), 3},
		{"stamp", le.Uint64(want[16:]), 0x0102030405060708},
		{"period", uint64(le.Uint32(want[24:])), 100},
		{"memory deadline", le.Uint64(want[32:]), 0x1112131415161718},
		{"device 0 admission", dev(0, 0), 3000},
		{"device 1 admission", dev(1, 0), 7000 | 3000<<32},
		{"device 2 admission", dev(2, 0), 1500 | 0xffffffff<<32},
		{"device 0 arbitration", dev(0, 8), 4000},
		{"device 1 arbitration", dev(1, 8), 6000 | 4000<<32},
		{"device 0 ceiling", dev(0, 16), 24 << 30},
		{"device 1 ceiling", dev(1, 16), 8 << 30},
	} {
		if c.got != c.want {
			t.Errorf("version-2 file: %s %#x, want %#x", c.what, c.got, c.want)
		}
	}
	if len(want) != 4096 {
		t.Errorf("version-2 file: %d bytes, want 4096", len(want))
	}
}

// Decode takes any bytes without a panic, and what it accepts has at most
// ShareDevices devices with a share each.
func FuzzDecode(f *testing.F) {
	ok, _ := Encode([]uint64{Word(3000, 0), Word(7000, 3000)})
	f.Add(ok)
	f.Add(ok[:100])
	f.Add([]byte("GPUGRAN1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Decode(b)
		if err != nil {
			return
		}
		if len(g.Static) > 16 || len(g.Live) != len(g.Static) || len(g.Ceiling) > len(g.Static) {
			t.Fatalf("decoded %d devices, %d live, %d ceilings", len(g.Static), len(g.Live), len(g.Ceiling))
		}
	})
}
