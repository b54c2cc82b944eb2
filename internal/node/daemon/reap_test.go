package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// A vgpu exec killed before it removed its entry leaves it behind: a round
// removes it once its process is gone, and leaves a live exec's entry and
// a container's whose init is gone (its runtime removes that one at
// delete: a stopped container keeps it).
func TestDaemonRemovesGoneExecEntries(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" memory=1073741824")
	for id, rec := range map[string]string{
		"exec-gone": `{"id":"exec-gone","created":"2026-01-01T00:00:00Z","pids":[200],"onHost":true,"devices":[]}`,
		"exec-live": `{"id":"exec-live","created":"2026-01-01T00:00:00Z","pids":[101],"onHost":true,"devices":[]}`,
		"stopped":   `{"id":"stopped","created":"2026-01-01T00:00:00Z","pids":[300],"devices":[]}`,
	} {
		dir := filepath.Join(h.state, id)
		if err := os.MkdirAll(filepath.Join(dir, "shared"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "quota"), []byte("vgpu-quota 1\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "container.json"), []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var log strings.Builder
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: &feed{samples: []nvmlfeed.Sample{}},
		Log: &log, Now: func() time.Time { return time.Unix(1_800_000_000, 0) }, Kill: func(int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	d.Round()
	d.Round()
	for id, kept := range map[string]bool{"exec-gone": false, "exec-live": true, "stopped": true, "c1": true} {
		_, err := os.Stat(filepath.Join(h.state, id))
		if kept && err != nil || !kept && !os.IsNotExist(err) {
			t.Errorf("after a round the entry %s: %v, want it kept %v\n%s", id, err, kept, log.String())
		}
	}
	if n := strings.Count(log.String(), "removed the entry exec-gone of a vgpu exec whose process 200 is gone"); n != 1 {
		t.Errorf("the removal was logged %d times, want once:\n%s", n, log.String())
	}
}
