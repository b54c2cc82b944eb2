// Package cachefile is how vgpu remembers what it learned about the host
// between two runs of a short-lived binary (vgpu-runtime starts for every
// container): a small file in the state directory, written by root for root,
// whose content carries the key it is valid for. It is the one way those
// records are read and written (the driver check's record, internal/drivercheck;
// the GPU list, internal/discover).
//
// A record is only ever a shortcut: a missing, foreign, corrupt or stale one
// is ignored and the work done again. So that nobody else can feed the
// runtime a record, Read takes only a regular file, not a symlink, with one
// link, owned by the effective user (root, for the runtime) and neither
// readable nor writable by anyone else (0600); Write makes exactly that,
// atomically (a temporary file renamed over the old record). Records are not
// synced: after a crash a record is either whole, absent or unreadable, and
// each of those is a miss.
package cachefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/vgpu-dev/vgpu/internal/atomicfile"
)

// MaxSize is the largest record Read accepts.
const MaxSize = 1 << 20

// ErrUntrusted is Read's error for a file that is there but that vgpu did not
// write (another owner, group or other access, a link, not a regular file).
var ErrUntrusted = errors.New("not a private record of this user")

// Read returns the content of the record at path, or an error: the file's
// own (os.ErrNotExist, say), or ErrUntrusted.
func Read(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s: %w (a symlink)", path, ErrUntrusted)
		}
		return nil, err
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return nil, fmt.Errorf("%s: %w (not a regular file)", path, ErrUntrusted)
	case int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("%s: %w (owned by uid %d)", path, ErrUntrusted, st.Uid)
	case st.Mode&0o077 != 0:
		return nil, fmt.Errorf("%s: %w (mode %#o)", path, ErrUntrusted, st.Mode&0o777)
	case st.Nlink != 1:
		return nil, fmt.Errorf("%s: %w (%d links)", path, ErrUntrusted, st.Nlink)
	case st.Size > MaxSize:
		return nil, fmt.Errorf("%s: %w (%d bytes)", path, ErrUntrusted, st.Size)
	}
	return io.ReadAll(io.LimitReader(f, MaxSize+1))
}

// Write replaces the record at path with data, atomically, mode 0600; its
// directory is made (0711, as vgpu's state directory) when missing.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}

// Identity is one line naming the file at path as it is now (symlinks
// followed): path, size, modification time and inode. A file replaced or
// rewritten gets another line.
func Identity(path string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return path + " " + strconv.FormatInt(st.Size, 10) + " " +
		strconv.FormatInt(st.Mtim.Sec*1e9+st.Mtim.Nsec, 10) + " " + strconv.FormatUint(st.Ino, 10), nil
}
