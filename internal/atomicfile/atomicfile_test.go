package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// Write sets the mode it is given, also over a wider existing file and
// under a umask that would narrow it; nothing else is left in the directory.
func TestWriteStaticMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	p := filepath.Join(dir, "record")
	if err := os.WriteFile(p, []byte("old"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, p); m != 0o600 {
		t.Errorf("mode %v after Write(0600) over a 0666 file, want 0600", m)
	}
	if err := Write(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, p); m != 0o644 {
		t.Errorf("mode %v under umask 077, want 0644", m)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("content %q", b)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
		t.Errorf("directory holds %d entries (%v), want only the file", len(ents), err)
	}
}

// Replace keeps an existing file's mode; a new file gets perm.
func TestReplaceKeepsMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "daemon.json")
	if err := Replace(p, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, p); m != 0o644 {
		t.Errorf("new file mode %v, want 0644", m)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := Replace(p, []byte(`{"a": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, p); m != 0o640 {
		t.Errorf("mode %v after Replace of a 0640 file, want 0640 kept", m)
	}
}
