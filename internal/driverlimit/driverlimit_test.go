//go:build integration

package driverlimit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// The symbols are read from the library's ELF table: the r615 build has
// them, the 580 build not; the answer is remembered per library.
func TestHasSymbol(t *testing.T) {
	for _, c := range []struct {
		r615 bool
		want bool
	}{{false, false}, {true, true}} {
		root, err := simroot.Create(t.TempDir(), simroot.Options{R615: c.r615})
		if err != nil {
			t.Fatal(err)
		}
		lib := filepath.Join(root.LibDir(), "libnvidia-ml.so."+root.Version())
		dir := t.TempDir()
		for i := 0; i < 2; i++ { // the second answer comes from the cache
			got, err := HasSymbol(dir, lib)
			if err != nil || got != c.want {
				t.Errorf("r615 %v, try %d: %v %v, want %v", c.r615, i, got, err, c.want)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, CacheFile)); err != nil {
			t.Errorf("no cache file: %v", err)
		}
	}
}

// A cache entry for other files is not taken.
func TestHasSymbolCacheKeyed(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{R615: true})
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(root.LibDir(), "libnvidia-ml.so."+root.Version())
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CacheFile), []byte("some other library\nno\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := HasSymbol(dir, lib); err != nil || !got {
		t.Errorf("with a stale cache entry: %v %v, want true", got, err)
	}
}

func TestLimitsAndEnforcer(t *testing.T) {
	info := &tenant.Record{Devices: []tenant.Device{
		{Index: 0, GPU: tenant.GPU{UUID: "GPU-a"}, Memory: 1 << 30},
		{Index: 1, GPU: tenant.GPU{UUID: "GPU-b"}},
	}}
	ls := Limits(info)
	if len(ls) != 1 || ls[0] != (Limit{UUID: "GPU-a", Soft: 1 << 30, Hard: 1 << 30}) {
		t.Errorf("Limits: %+v, want GPU-a soft = hard = 1 GiB only", ls)
	}
	// A memory request below the limit is the soft limit: guaranteed, the
	// rest borrowed.
	info.Devices[0].MemoryRequest = 256 << 20
	if ls := Limits(info); len(ls) != 1 || ls[0].Soft != 256<<20 || ls[0].Hard != 1<<30 {
		t.Errorf("with a 256 MiB request: %+v, want soft 256 MiB, hard 1 GiB", ls)
	}
	info.Devices[0].MemoryRequest = 0
	if Enforcer(info) != ByLibrary {
		t.Errorf("without a record: %s", Enforcer(info))
	}
	info.DriverLimits = &tenant.DriverLimits{Cgroup: "/x", Why: "refused"}
	if Enforcer(info) != ByLibrary {
		t.Errorf("refused: %s", Enforcer(info))
	}
	info.DriverLimits.Set = true
	if Enforcer(info) != ByDriver {
		t.Errorf("set: %s", Enforcer(info))
	}
}
