package cachefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // made by Write
	p := filepath.Join(dir, ".rec")
	if _, err := Read(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no record: %v", err)
	}
	if err := Write(p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(p); err != nil || string(b) != "two" {
		t.Fatalf("Read = %q, %v", b, err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v, %v; want 0600", fi.Mode(), err)
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o711 {
		t.Errorf("directory mode %v, %v; want 0711", di.Mode(), err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

// Anything vgpu did not write itself is not a record: another mode, a link
// (symbolic or hard), not a regular file, another owner.
func TestReadRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := Write(good, []byte("k")); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(p string) error{
		"group-readable": func(p string) error { return os.WriteFile(p, []byte("k"), 0o640) },
		"world-writable": func(p string) error {
			if err := os.WriteFile(p, []byte("k"), 0o600); err != nil {
				return err
			}
			return os.Chmod(p, 0o602)
		},
		"symlink":   func(p string) error { return os.Symlink(good, p) },
		"hard link": func(p string) error { return os.Link(good, p) },
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o600) },
	}
	for name, make := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := make(p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b, err := Read(p); !errors.Is(err, ErrUntrusted) {
			t.Errorf("%s: Read = %q, %v; want ErrUntrusted", name, b, err)
		}
	}
	if os.Geteuid() == 0 {
		p := filepath.Join(dir, "other-owner")
		if err := os.WriteFile(p, []byte("k"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if b, err := Read(p); !errors.Is(err, ErrUntrusted) {
			t.Errorf("a record owned by nobody: Read = %q, %v; want ErrUntrusted", b, err)
		}
	}
}

func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lib.so")
	if err := os.WriteFile(p, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := Identity(p)
	if err != nil || !strings.HasPrefix(a, p+" 1 ") {
		t.Fatalf("Identity = %q, %v", a, err)
	}
	if again, _ := Identity(p); again != a {
		t.Errorf("same file, two identities: %q, %q", a, again)
	}
	// Replaced (a new inode), even with the same size and time.
	fi, _ := os.Stat(p)
	q := filepath.Join(dir, "new")
	if err := os.WriteFile(q, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(q, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(q, p); err != nil {
		t.Fatal(err)
	}
	if b, _ := Identity(p); b == a {
		t.Errorf("a replaced file kept its identity %q", a)
	}
	if _, err := Identity(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
