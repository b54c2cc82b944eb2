package regionread

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

// A tenant shrinks its region file and grows it again while the host reads
// it (status and metrics died with SIGBUS in copySlots when the region was
// mapped, so it is read with pread). Reading must give the region or an error, never crash.
func TestRegionTruncatedWhileRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, contract.RegionFile)
	full := regionBytes(2, map[int]Slot{3: {PID: 7, Usage: [contract.RegionDevices]uint64{1 << 20}}}, nil)
	if err := os.WriteFile(path, full, 0o666); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := f.Truncate(int64(4096 + (i%7)*1000)); err != nil {
				t.Error(err)
				return
			}
			if _, err := f.WriteAt(full, 0); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	// a read that succeeds gives the region as written, never a torn one
	for i := 0; i < 3000; i++ {
		r, err := Read(dir)
		if err == nil && (len(r.Slots) != 1 || r.Slots[0].PID != 7 || r.Slots[0].Usage[0] != 1<<20) {
			t.Errorf("read %d while truncated: %+v, want the one slot of pid 7 holding 1 MiB, or an error", i, r)
			break
		}
	}
	close(stop)
	wg.Wait()
	// once the file is whole again the region reads as before
	if err := os.WriteFile(path, full, 0o666); err != nil {
		t.Fatal(err)
	}
	r, err := Read(dir)
	if err != nil || len(r.Slots) != 1 || r.Slots[0].PID != 7 || r.Slots[0].Usage[0] != 1<<20 {
		t.Fatalf("after the truncations: %+v %v", r, err)
	}
	// and a region cut short is an error naming it
	if err := os.Truncate(path, 8192); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); err == nil {
		t.Fatal("truncated region read without error")
	}
}
