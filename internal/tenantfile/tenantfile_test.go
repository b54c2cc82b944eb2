package tenantfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Each file a tenant can put in its directory in place of a region, both
// with openat2 and with the component walk of kernels without it.
func TestOpenRefusesWhatATenantCanPlant(t *testing.T) {
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) {
			if walk {
				orig := openat2
				openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
				t.Cleanup(func() { openat2 = orig })
			}
			dir := t.TempDir()
			outside := filepath.Join(t.TempDir(), "host-secret")
			must(t, os.WriteFile(outside, []byte("host"), 0o600))
			must(t, os.WriteFile(filepath.Join(dir, "ok"), []byte("region"), 0o600))
			must(t, os.Symlink(outside, filepath.Join(dir, "symlink")))
			must(t, os.Symlink("ok", filepath.Join(dir, "relative-symlink")))
			must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
			must(t, os.Mkdir(filepath.Join(dir, "dir"), 0o700))
			must(t, os.WriteFile(filepath.Join(dir, "dir", "inner"), []byte("x"), 0o600))
			must(t, os.Symlink(filepath.Dir(outside), filepath.Join(dir, "dirlink")))
			must(t, os.Symlink("dir", filepath.Join(dir, "dirlink-inside")))
			big, err := os.Create(filepath.Join(dir, "big"))
			must(t, err)
			must(t, big.Truncate(1<<40)) // sparse: costs nothing to make
			big.Close()

			cases := []struct {
				name string
				want error
			}{
				{"symlink", ErrLink},
				{"relative-symlink", ErrLink},
				{"dirlink/host-secret", ErrLink},
				{"dirlink-inside/inner", ErrLink}, // stays beneath, but a tenant's link is never followed
				{"../" + filepath.Base(dir) + "/ok", ErrLink},
				{outside, ErrLink},
				{"fifo", ErrNotRegular},
				{"dir", ErrNotRegular},
				{"big", ErrTooLarge},
				{"missing", os.ErrNotExist},
			}
			for _, c := range cases {
				done := make(chan error, 1)
				go func() {
					f, _, err := Open(dir, c.name, 1<<20)
					if f != nil {
						f.Close()
					}
					done <- err
				}()
				select {
				case err := <-done:
					if !errors.Is(err, c.want) {
						t.Errorf("Open(%q) = %v, want %v", c.name, err, c.want)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("Open(%q) blocked", c.name)
				}
			}
			for _, name := range []string{"ok", "dir/inner"} {
				f, fi, err := Open(dir, name, 1<<20)
				if err != nil {
					t.Fatalf("Open(%q): %v", name, err)
				}
				f.Close()
				if !fi.Mode().IsRegular() {
					t.Errorf("Open(%q): mode %v", name, fi.Mode())
				}
			}
		})
	}
}

// /proc's magic links (a process's root, its fds) lead anywhere; beneath
// /proc/self they are refused even though they are not symlinks on disk.
func TestOpenRefusesProcMagicLinks(t *testing.T) {
	for _, name := range []string{"root/etc/hostname", "exe", "cwd/x"} {
		f, _, err := Open(fmt.Sprintf("/proc/%d", os.Getpid()), name, 1<<30)
		if f != nil {
			f.Close()
		}
		if !errors.Is(err, ErrLink) {
			t.Errorf("Open(/proc/self, %q) = %v, want %v", name, err, ErrLink)
		}
	}
}

func TestReadFileBoundsAndReads(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "f"), []byte("12345"), 0o600))
	if b, err := ReadFile(dir, "f", 5); err != nil || string(b) != "12345" {
		t.Fatalf("ReadFile at the bound = %q, %v", b, err)
	}
	if _, err := ReadFile(dir, "f", 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadFile over the bound = %v, want %v", err, ErrTooLarge)
	}
}

// A read that hangs is given up at the deadline, and the next call for the
// same file answers at once instead of starting another hanging read.
func TestWithinGivesUpAndDoesNotPileUp(t *testing.T) {
	release := make(chan struct{})
	started := 0
	hang := func() (int, error) {
		started++
		<-release
		return 1, nil
	}
	if _, err := Within("k", 10*time.Millisecond, hang); !errors.Is(err, ErrDeadline) {
		t.Fatalf("first = %v, want %v", err, ErrDeadline)
	}
	if _, err := Within("k", time.Hour, hang); !errors.Is(err, ErrDeadline) {
		t.Fatalf("second while the first hangs = %v, want %v", err, ErrDeadline)
	}
	close(release)
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := Within("k", time.Minute, func() (int, error) { return 2, nil })
		if err == nil {
			if v != 2 {
				t.Fatalf("after release = %d", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused after the hanging read returned: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if started != 1 {
		t.Fatalf("the hanging read was started %d times, want 1", started)
	}
}

// Two reads of one file that overlap in time, as vgpu node's round and
// its order loop read one region, both run and both answer: a read still
// within its deadline is not one that hangs.
func TestWithinOverlappingReadsBothAnswer(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := Within("overlap", time.Hour, func() (int, error) {
			close(started)
			<-release
			return 1, nil
		})
		first <- err
	}()
	<-started
	v, err := Within("overlap", time.Hour, func() (int, error) { return 2, nil })
	close(release)
	if err != nil || v != 2 {
		t.Errorf("a read while another of the same file is in flight = %d, %v; want 2, nil", v, err)
	}
	if err := <-first; err != nil {
		t.Errorf("the read in flight = %v, want nil", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
