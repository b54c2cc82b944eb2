// Package tenantfile opens and reads files that a tenant can write (its
// shared directory: the region, its lock file) from the host, so that no
// such file can make a host process block, follow a link out of the
// directory, or read without bound. A tenant can replace any file it can
// reach by a FIFO (an open or a read that never returns), a symlink or
// hard link to a host path, a directory, a huge sparse file, or a link
// into /proc; each of these is refused with an error that says which.
//
// Used by vgpu node and by host tools (vgpu status) alike, so it imports
// nothing of vgpu.
package tenantfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Errors of Open, ReadFile and Within; each is wrapped with the path.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("larger than allowed")
	ErrLink       = errors.New("a link or a path leaving its directory (not followed)")
	ErrDeadline   = errors.New("not read in time (the file system did not answer)")
)

// Deadline is how long a read of a tenant's file may take before it is
// given up: a regular file on the tenant's tmpfs answers in microseconds,
// so this only bounds what cannot happen in a healthy setup.
const Deadline = 2 * time.Second

// Flags of every open: never block on a FIFO or a device, never follow a
// link in the last component, never leak into a child.
const openFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOFOLLOW | unix.O_CLOEXEC

// Resolution of every open: beneath dir, no symlink anywhere in name, no
// /proc magic link, no mount crossing (the tenant's directory is one
// file system; what lies on another is not its).
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openat2 is unix.Openat2, replaceable in tests to exercise the fallback
// of kernels without it.
var openat2 = unix.Openat2

// Open opens name, a relative path beneath the directory dir, for reading,
// and checks that it is a regular file of at most maxSize bytes. dir itself
// is the host's (its path is not resolved against the tenant); nothing in
// name is followed: a symlink, "..", an absolute name or a /proc magic link
// is ErrLink. A missing file is an error that satisfies os.ErrNotExist.
func Open(dir, name string, maxSize int64) (*os.File, os.FileInfo, error) {
	path := filepath.Join(dir, name)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	fd, err := openat2(dfd, name, &unix.OpenHow{Flags: openFlags, Resolve: resolve})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = openBeneathWalk(dfd, name)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return nil, nil, fmt.Errorf("%s: %w", path, ErrLink)
		}
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, fi.Mode().Type())
	}
	if fi.Size() > maxSize {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w (%d bytes, at most %d)", path, ErrTooLarge, fi.Size(), maxSize)
	}
	return f, fi, nil
}

// openBeneathWalk is Open's resolution on kernels without openat2: one
// component at a time, each opened with O_NOFOLLOW, "." and ".." refused,
// and no step onto another file system.
func openBeneathWalk(dfd int, name string) (int, error) {
	if name == "" || strings.HasPrefix(name, "/") {
		return -1, unix.EXDEV
	}
	parts := strings.Split(name, "/")
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return -1, err
	}
	dev := st.Dev
	cur, owned := dfd, false
	defer func() {
		if owned {
			unix.Close(cur)
		}
	}()
	for i, p := range parts {
		if p == "" || p == "." || p == ".." {
			return -1, unix.EXDEV
		}
		flags := openFlags
		if i < len(parts)-1 {
			flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		fd, err := unix.Openat(cur, p, flags, 0)
		if err != nil {
			var lst unix.Stat_t
			if errors.Is(err, unix.ENOTDIR) && unix.Fstatat(cur, p, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil && lst.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, unix.ELOOP // O_DIRECTORY|O_NOFOLLOW on a link
			}
			return -1, err
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd) // O_PATH|O_NOFOLLOW opens the link itself
			return -1, unix.ELOOP
		}
		if st.Dev != dev {
			unix.Close(fd)
			return -1, unix.EXDEV
		}
		if owned {
			unix.Close(cur)
		}
		cur, owned = fd, true
	}
	owned = false
	return cur, nil
}

// ReadFile reads the whole of name beneath dir (Open's checks), at most
// maxSize bytes, within Deadline.
func ReadFile(dir, name string, maxSize int64) ([]byte, error) {
	return Within(filepath.Join(dir, name), Deadline, func() ([]byte, error) {
		f, _, err := Open(dir, name, maxSize)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
		if err != nil {
			return nil, err
		}
		if int64(len(b)) > maxSize {
			return nil, fmt.Errorf("%s: %w (grew past %d bytes while read)", filepath.Join(dir, name), ErrTooLarge, maxSize)
		}
		return b, nil
	})
}

// hung counts, by key, the Within calls given up at their deadline whose
// fn has not returned yet.
var (
	hungMu sync.Mutex
	hung   = map[string]int{}
)

// Within runs fn and waits at most d for it. key names what fn reads:
// while an earlier fn of the same key was given up and still hangs,
// Within does not start another and answers ErrDeadline at once, so a
// file that hangs costs one goroutine, not one per call. Calls of one key
// that overlap in time (vgpu node's round and its order loop read the
// same region) each run: a read still within its deadline is not a hang.
// fn's result is handed over only when it returns in time, or had
// returned when the deadline fired (a process starved of CPU wakes to
// both at once); fn must not touch the caller's memory.
func Within[T any](key string, d time.Duration, fn func() (T, error)) (T, error) {
	var zero T
	hungMu.Lock()
	busy := hung[key] > 0
	hungMu.Unlock()
	if busy {
		return zero, fmt.Errorf("%s: %w (an earlier read has not returned)", key, ErrDeadline)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	returned, givenUp := false, false // under hungMu
	go func() {
		v, err := fn()
		hungMu.Lock()
		returned = true
		if givenUp {
			if hung[key]--; hung[key] <= 0 {
				delete(hung, key)
			}
		}
		hungMu.Unlock()
		ch <- result{v, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-t.C:
	}
	hungMu.Lock()
	late := returned
	if !late {
		givenUp = true
		hung[key]++
	}
	hungMu.Unlock()
	if late {
		r := <-ch // sent right after returned was set
		return r.v, r.err
	}
	return zero, fmt.Errorf("%s: %w (%v)", key, ErrDeadline, d)
}
