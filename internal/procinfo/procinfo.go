// Package procinfo reads what identifies a host process for good: its start
// time (so that a reused pid is never taken for it) and its cgroup (which a
// tenant in a container cannot leave), from /proc.
package procinfo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Cgroup is a process's cgroup membership: Unified is the v2 path ("0::"
// line), Freezer the v1 freezer hierarchy's path; "" when absent.
type Cgroup struct {
	Unified string
	Freezer string
}

// Path is the path that identifies the cgroup: the v1 freezer's when the
// freezer is a v1 controller (hybrid and v1 hosts), else the unified one.
func (c Cgroup) Path() string {
	if c.Freezer != "" {
		return c.Freezer
	}
	return c.Unified
}

// ParseCgroup parses the text of /proc/<pid>/cgroup (v1, v2 and hybrid):
// lines "hierarchy-ID:controller-list:path".
func ParseCgroup(b []byte) (Cgroup, error) {
	var c Cgroup
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	seen := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		id, rest, ok := strings.Cut(line, ":")
		ctrls, path, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 || !strings.HasPrefix(path, "/") {
			return Cgroup{}, fmt.Errorf("cgroup line %q: want hierarchy-ID:controllers:/path", line)
		}
		if _, err := strconv.Atoi(id); err != nil {
			return Cgroup{}, fmt.Errorf("cgroup line %q: hierarchy ID %q is not a number", line, id)
		}
		path = filepath.Clean(path)
		seen = true
		if id == "0" && ctrls == "" {
			c.Unified = path
			continue
		}
		for _, ctl := range strings.Split(ctrls, ",") {
			if ctl == "freezer" {
				c.Freezer = path
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Cgroup{}, err
	}
	if !seen {
		return Cgroup{}, errors.New("empty cgroup file")
	}
	return c, nil
}

// CgroupOf reads /proc/<pid>/cgroup under procRoot ("" = /proc).
func CgroupOf(procRoot string, pid int) (Cgroup, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return Cgroup{}, err
	}
	return ParseCgroup(b)
}

// Under tells whether path is cg or below it. The root cgroup is nobody's
// container.
func Under(path, cg string) bool {
	if cg == "" || path == "" || cg == "/" {
		return false
	}
	return path == cg || strings.HasPrefix(path, cg+"/")
}

// Stat is what /proc/<pid>/stat tells of a process that matters here.
type Stat struct {
	PPID  int
	State byte
	// Start: the process's start time, clock ticks after boot (field 22):
	// with the pid, it names one process for good.
	Start uint64
}

// ParseStat parses the text of /proc/<pid>/stat. The command name (field
// 2) may hold any byte, ")" too: the fields are read after its last ")".
func ParseStat(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, errors.New("stat: no \")\" after the command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19]
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("stat: %d fields after the command name, want at least 20", len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Stat{}, fmt.Errorf("stat: ppid %q", f[1])
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("stat: start time %q", f[19])
	}
	return Stat{PPID: ppid, State: f[0][0], Start: start}, nil
}

// StatOf reads /proc/<pid>/stat under procRoot ("" = /proc).
func StatOf(procRoot string, pid int) (Stat, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// Same tells whether pid is still the process that started at start (and
// has not died: a zombie is gone for what it held).
func Same(procRoot string, pid int, start uint64) bool {
	st, err := StatOf(procRoot, pid)
	return err == nil && st.Start == start && st.State != 'Z' && st.State != 'X'
}

// FileID is a file's identity (device, inode): two paths name the same file
// when their FileIDs are equal.
type FileID struct{ Dev, Ino uint64 }

// StatID is path's FileID, as the host resolves it.
func StatID(path string) (FileID, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return FileID{}, false
	}
	return FileID{uint64(st.Dev), st.Ino}, true
}

// StatInRoot is the FileID of path as the process whose root directory is
// root sees it: every component, symlinks included, is resolved inside root
// (openat2 RESOLVE_IN_ROOT). Resolved on the host, an absolute symlink in a
// container (/run/vgpu/quota -> /var/lib/.../<C>/quota) would name another
// container's quota file and pass for one of its processes.
func StatInRoot(root, path string) (FileID, bool) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return FileID{}, false
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return FileID{}, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileID{}, false
	}
	return FileID{uint64(st.Dev), st.Ino}, true
}

// ReadPIDFile reads a runtime's pid file, 0 when it cannot: opened
// non-blocking and read only when a regular file, so that no file put in
// its place can hang the reader (vgpu node's round, vgpu status).
func ReadPIDFile(path string) int {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return 0
	}
	b := make([]byte, 32)
	n, _ := f.Read(b)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
