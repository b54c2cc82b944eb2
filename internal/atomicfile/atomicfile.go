// Package atomicfile writes a file so that a reader sees the old content or
// the new, never a part, and a crash leaves no partial file: a temp file in
// the same directory, fsync, rename, fsync of the directory (renameio).
package atomicfile

import (
	"errors"
	"os"
	"syscall"

	"github.com/google/renameio/v2"
)

// Write replaces path with data, mode perm whatever an existing file's was
// and whatever the umask: records that must stay 0600 stay so.
func Write(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, -1, -1)
}

// Replace replaces path with data, keeping an existing file's mode and (as
// root) its owner: another program's configuration stays as its owner set
// it. A new file gets perm.
func Replace(path string, data []byte, perm os.FileMode) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return write(path, data, perm, -1, -1)
	}
	if err != nil {
		return err
	}
	uid, gid := -1, -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	return write(path, data, fi.Mode().Perm(), uid, gid)
}

func write(path string, data []byte, perm os.FileMode, uid, gid int) error {
	t, err := renameio.NewPendingFile(path, renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer func() { _ = t.Cleanup() }() // after CloseAtomicallyReplace: nothing left to clean
	if _, err := t.Write(data); err != nil {
		return err
	}
	if uid >= 0 {
		if err := t.Chown(uid, gid); err != nil {
			return err
		}
	}
	return t.CloseAtomicallyReplace()
}
