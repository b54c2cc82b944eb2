package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Explicit memory requests on a GPU must fit in its memory: the one that
// does not is refused naming the GPU, the sum and the holders, with nothing
// created; a limit-only container beside them is admitted.
func TestMemoryRequestsAdmitted(t *testing.T) {
	dir := t.TempDir()
	gpu := tenant.GPU{UUID: "GPU-0", MemoryBytes: 16 << 30}
	info := func(id string, mem, req uint64) tenant.Record {
		return tenant.Record{ID: id, Library: &tenant.Library{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s"}, Devices: []tenant.Device{{GPU: gpu, Memory: mem, MemoryRequest: req, Compute: 100}}}
	}
	if _, err := Create(dir, info("a", 16<<30, 10<<30), nil); err != nil {
		t.Fatal(err)
	}
	_, err := Create(dir, info("b", 16<<30, 7<<30), nil)
	var ae *AdmissionError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "GPU GPU-0: memory requests would sum to 17 GiB with this one's 7 GiB, more than its 16 GiB (held: a 10 GiB)") {
		t.Fatalf("a request past the GPU: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b")); !os.IsNotExist(err) {
		t.Errorf("refused container has state: %v", err)
	}
	if _, err := Create(dir, info("c", 8<<30, 0), nil); err != nil {
		t.Errorf("a limit-only container refused: %v", err)
	}
	if _, err := Create(dir, info("d", 16<<30, 6<<30), nil); err != nil {
		t.Errorf("10 + 6 of 16 refused: %v", err)
	}
}
