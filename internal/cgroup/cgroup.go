// Package cgroup names a process's cgroup v2 directory the way the driver's
// per-cgroup memory limits want it: the full sysfs path (nvml.h,
// nvmlSetMemoryLimits_v1_t.nameSpace). It reads /proc only.
//
// On a host in unified mode the v2 hierarchy is /sys/fs/cgroup; on a hybrid
// host (systemd's default on older distributions, CI's Debian runners) it is
// /sys/fs/cgroup/unified, beside the v1 controllers, and runc puts every
// container in it too. On a host with cgroup v1 alone there is none: Of
// returns ErrNoV2.
package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoV2 is returned when the host mounts no cgroup v2 hierarchy, or the
// process is in none.
var ErrNoV2 = errors.New("cgroup v1: the host mounts no cgroup v2 hierarchy")

// Unified is where a host in unified mode mounts cgroup v2.
const Unified = "/sys/fs/cgroup"

// Of returns the full path of pid's cgroup v2 directory, as this process
// sees the host (a reader in another cgroup namespace sees paths relative to
// its own: callers run in the host's).
func Of(pid int) (string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	root := V2Mount(mi)
	if root == "" {
		return "", ErrNoV2
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	rel, ok := V2Path(b)
	if !ok {
		return "", fmt.Errorf("process %d is in no cgroup v2 directory: %w", pid, ErrNoV2)
	}
	return filepath.Join(root, rel), nil
}

// V2Mount returns the mount point of the first cgroup2 filesystem in a
// /proc/<pid>/mountinfo ("" when none).
func V2Mount(mountinfo []byte) string {
	for _, l := range bytes.Split(mountinfo, []byte("\n")) {
		f := strings.Fields(string(l))
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		for i := 6; i+1 < len(f); i++ {
			if f[i] == "-" {
				if f[i+1] == "cgroup2" && strings.HasPrefix(f[4], "/") {
					return unescape(f[4])
				}
				break
			}
		}
	}
	return ""
}

// V2Path returns the path of the "0::" line of a /proc/<pid>/cgroup, which
// must be absolute and clean; ok false when there is none.
func V2Path(procCgroup []byte) (string, bool) {
	for _, l := range bytes.Split(procCgroup, []byte("\n")) {
		p, found := bytes.CutPrefix(l, []byte("0::"))
		if !found {
			continue
		}
		s := string(p)
		// " (deleted)" marks a removed cgroup; a relative or unclean path is
		// not one to hand to the driver.
		if !strings.HasPrefix(s, "/") || filepath.Clean(s) != s || strings.Contains(s, " (deleted)") {
			return "", false
		}
		return s, true
	}
	return "", false
}

// V1Dir returns the mount point of cgroup v1 controller ctl ("" when the
// host mounts none).
func V1Dir(ctl string) string {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(mi), "\n") {
		f := strings.Fields(l)
		for i := 6; i+3 < len(f); i++ {
			if f[i] == "-" {
				if f[i+1] == "cgroup" {
					for _, o := range strings.Split(f[i+3], ",") {
						if o == ctl {
							return unescape(f[4])
						}
					}
				}
				break
			}
		}
	}
	return ""
}

// Procs returns the pids in cgroup dir (its cgroup.procs).
func Procs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		var p int
		if _, err := fmt.Sscanf(f, "%d", &p); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space …).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOct(s[i+1]) && isOct(s[i+2]) && isOct(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOct(c byte) bool { return c >= '0' && c <= '7' }

// initialNS is the link of the kernel's initial cgroup namespace
// (PROC_CGROUP_INIT_INO).
const initialNS = "cgroup:[4026531835]"

// Self returns this process's cgroup v2 directory as the host names it. A
// process in a cgroup namespace of its own (an OCI hook that runs inside the
// container: its cgroup is the container's) sees its path relative to that
// namespace; it is then read from the namespace of its nearest ancestor in
// another one (the runtime's), on a thread of its own that enters it.
func Self() (string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	root := V2Mount(mi)
	if root == "" {
		return "", ErrNoV2
	}
	own, err := os.Readlink("/proc/self/ns/cgroup")
	var b []byte
	if err != nil || own == initialNS {
		b, err = os.ReadFile("/proc/self/cgroup")
	} else {
		b, err = readInAncestorNS(own)
	}
	if err != nil {
		return "", err
	}
	rel, ok := V2Path(b)
	if !ok {
		return "", fmt.Errorf("this process is in no cgroup v2 directory: %w", ErrNoV2)
	}
	return filepath.Join(root, rel), nil
}

// readInAncestorNS reads /proc/self/cgroup from the cgroup namespace of the
// nearest ancestor whose namespace is not own.
func readInAncestorNS(own string) ([]byte, error) {
	self, err := os.Readlink("/proc/self") // the pid as this /proc counts
	if err != nil {
		return nil, err
	}
	pid, _ := strconv.Atoi(self)
	ns := ""
	for i := 0; i < 64 && pid > 1 && ns == ""; i++ {
		if pid, err = parentPID(pid); err != nil || pid <= 0 {
			break
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/cgroup", pid)); err == nil && l != own {
			ns = fmt.Sprintf("/proc/%d/ns/cgroup", pid)
		}
	}
	if ns == "" {
		return nil, fmt.Errorf("in cgroup namespace %s and no ancestor outside it: the host's path of this cgroup is unknown", own)
	}
	type result struct {
		b   []byte
		err error
	}
	res := make(chan result)
	go func() {
		runtime.LockOSThread() // no Unlock: the thread, in another namespace, dies with this goroutine
		fd, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			res <- result{nil, err}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWCGROUP)
		unix.Close(fd)
		if err != nil {
			res <- result{nil, fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		b, err := os.ReadFile("/proc/thread-self/cgroup")
		res <- result{b, err}
	}()
	r := <-res
	return r.b, r.err
}

func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no PPid in /proc/%d/status", pid)
}
