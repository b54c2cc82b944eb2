package state

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The admission writes each device's priority into the share file's order
// words: a high device's word is VGPU_PRIORITY_HIGH, a low one's
// VGPU_PRIORITY_LOW, a normal one's 0; a container of normal devices on
// GPUs with no priority in play gets the very bytes it got before
// priorities existed.
func TestShareFilePriority(t *testing.T) {
	dev := func(i int, p tenant.Priority) tenant.Device {
		return tenant.Device{Index: i, GPU: tenant.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i))}, Memory: 1 << 30, Compute: 100, Priority: p}
	}
	shareOf := func(t *testing.T, dir, id string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, id, config.StateHost, contract.ShareFile))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dir := t.TempDir()
	q := testQuota()
	q.Devices = []tenant.Device{dev(0, tenant.High), dev(1, tenant.Normal), dev(2, tenant.Low)}
	if _, err := Create(dir, FromQuota("mixed", q), nil); err != nil {
		t.Fatal(err)
	}
	f, ok := contract.DecodeShare(shareOf(t, dir, "mixed"))
	if !ok {
		t.Fatal("not a share file")
	}
	for i, want := range []uint64{contract.PriorityHigh, contract.PriorityNormal, contract.PriorityLow} {
		if got := f.Order[i].Priority; got != want {
			t.Errorf("device %d: priority word %d, want %d", i, got, want)
		}
	}

	// on GPUs with no priority in play (beside one, it is paced: request 0)
	dir = t.TempDir()
	q.Devices = []tenant.Device{dev(0, tenant.Normal), dev(1, tenant.Normal)}
	if _, err := Create(dir, FromQuota("normal", q), nil); err != nil {
		t.Fatal(err)
	}
	before, err := arbiter.Encode([]uint64{0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if got := shareOf(t, dir, "normal"); !bytes.Equal(got, before) {
		t.Error("a normal container's share file differs from the one written before priorities existed")
	}
}
