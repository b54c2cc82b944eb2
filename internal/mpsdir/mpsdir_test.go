package mpsdir

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
)

// Prepare gives each directory its mode, also to one that exists with
// another; Live takes only a pid file naming a live process.
func TestPrepareAndLive(t *testing.T) {
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	d := Of(cfg, "GPU-1")
	if err := os.MkdirAll(d.Pipe, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.Prepare(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		filepath.Dir(d.Root): 0o700, d.Root: 0o700, d.Pipe: 0o755, d.Log: 0o700, d.Shm: 0o777 | os.ModeSticky,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModePerm | os.ModeSticky); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	for _, tc := range []struct {
		pidFile string // "": none
		live    bool
	}{
		{"", false},
		{"not a pid\n", false},
		{"0\n", false},  // kill(0, 0) would ask for our own process group
		{"-1\n", false}, // and kill(-1, 0) for every process
		{strconv.Itoa(os.Getpid()) + "\n", true},
	} {
		p := filepath.Join(d.Pipe, PIDFile)
		os.Remove(p)
		if tc.pidFile != "" {
			if err := os.WriteFile(p, []byte(tc.pidFile), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, live := d.Live(); live != tc.live {
			t.Errorf("pid file %q: live %v, want %v", tc.pidFile, live, tc.live)
		}
	}
}
