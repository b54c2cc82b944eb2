package arbiter

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

// Version 2 carries a memory ceiling per device and a deadline; the
// previous release's version 1 is still read (its shares where they were,
// no ceilings: held to the request) and mapped for the arbitration; a
// version this vgpu does not know is refused.
func TestGrantFileVersions(t *testing.T) {
	dir := t.TempDir()
	b, _ := Encode([]uint64{Word(3000, 0), Word(5000, 30)})
	p := filepath.Join(dir, "grant")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Map(p)
	if err != nil {
		t.Fatal(err)
	}
	m.SetLive(1, Word(6000, 30))
	m.SetCeiling(1, 24<<30)
	m.StampMemory(5e9)
	m.Close()
	g, err := Read(p)
	if err != nil || g.Live[1] != Word(6000, 30) || g.Ceiling[1] != 24<<30 || g.Ceiling[0] != 0 || g.MemUntil != 5e9 {
		t.Fatalf("version 2 read back: %+v %v", g, err)
	}
	if cp, ok := g.MemoryCap(1, 16<<30, 32<<30, 4e9); cp != 24<<30 || !ok {
		t.Errorf("cap before the deadline: %d %v", cp, ok)
	}

	v1 := make([]byte, contract.ShareBytes)
	binary.LittleEndian.PutUint64(v1, contract.ShareMagic)
	binary.LittleEndian.PutUint32(v1[8:], 1)
	binary.LittleEndian.PutUint32(v1[12:], 2)
	binary.LittleEndian.PutUint64(v1[64+16:], Word(5000, 30)) // device 1's static, 16 bytes a device
	if err := os.WriteFile(p, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err = Map(p); err != nil {
		t.Fatalf("version 1: %v", err)
	}
	m.SetLive(1, Word(7000, 30))
	m.SetCeiling(1, 1<<40)
	m.StampMemory(5e9)
	m.Close()
	g, err = Read(p)
	if err != nil || g.Static[1] != Word(5000, 30) || g.Live[1] != Word(7000, 30) || len(g.Ceiling) != 0 || g.MemUntil != 0 {
		t.Fatalf("version 1 read back: %+v %v", g, err)
	}
	if cp, ok := g.MemoryCap(1, 16<<30, 32<<30, 4e9); cp != 16<<30 || ok {
		t.Errorf("version 1: cap %d (borrowing %v), want the request", cp, ok)
	}
	binary.LittleEndian.PutUint32(v1[8:], 3)
	if _, err := Decode(v1); err == nil {
		t.Error("version 3 read")
	}
}
