package config

import (
	"os"
	"path/filepath"
	"testing"
)

// The flag wins; without it the configuration's state_dir; without a
// readable configuration the default.
func TestStateDirOf(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.toml")
	t.Setenv(PathEnv, p)
	if got := StateDirOf(""); got != DefaultStateDir {
		t.Errorf("no configuration: %q, want %q", got, DefaultStateDir)
	}
	if err := os.WriteFile(p, []byte("state_dir = \"/srv/vgpu/state\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := StateDirOf("/given"); got != "/given" {
		t.Errorf("flag /given: %q", got)
	}
	if got := StateDirOf(""); got != "/srv/vgpu/state" {
		t.Errorf("no flag: %q, want the configuration's", got)
	}
	if err := os.WriteFile(p, []byte("state_dir = \"/srv/vgpu/state\"\nno_such_key = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := StateDirOf(""); got != DefaultStateDir {
		t.Errorf("broken configuration: %q, want %q", got, DefaultStateDir)
	}
}
