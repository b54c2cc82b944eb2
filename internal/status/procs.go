package status

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
)

// How vgpu status finds a container's processes (docs/status.md):
//
// A process belongs to container C when the /run/vgpu/quota it sees (opened
// under /proc/<pid>/root with every path component resolved inside that
// root) is the very file <state_dir>/<C>/quota: the
// runtime bind-mounts that file, so device and inode match exactly. Unlike
// the PID namespace this holds with --pid=host and with pods that share one
// PID namespace among containers; unlike cgroup paths it does not depend on
// the engine, the cgroup driver or the cgroup version. The init pid the
// runtime records (container.json) is shown and checked the same way.
//
// A process's GPU slot is found from the lock it holds: /proc/<pid>/fdinfo
// of its descriptor of shared/vgpu.lock lists its OFD lock, byte 1+slot.
// When that cannot be read, the slot's pid (as the process saw itself) is
// matched against the innermost NSpid of /proc/<pid>/status.

// hostProc is one host process of a container.
type hostProc struct {
	pid   int // host pid (as /proc shows it)
	nspid int // innermost NSpid: the pid the process sees for itself
	name  string
	slots []int // slots whose lock byte this process's descriptor holds
}

// procScan looks up, for every process under procRoot, which container (by
// its quota file) it belongs to: the container whose recorded cgroup holds
// it (cgroups: cgroup path -> the container's quota id), else, among those
// with no cgroup recorded (quotas), the one whose quota file it sees.
// lockFiles maps a container's quota id to its lock file's id (zero when it
// has none).
func procScan(procRoot string, quotas map[procinfo.FileID]bool, cgroups map[string]procinfo.FileID, lockOf map[procinfo.FileID]procinfo.FileID) map[procinfo.FileID][]*hostProc {
	out := map[procinfo.FileID][]*hostProc{}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return out
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || pid == self {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		q, ok := procinfo.FileID{}, false
		if len(cgroups) > 0 {
			if cg, err := procinfo.CgroupOf(procRoot, pid); err == nil {
				best := ""
				for path, id := range cgroups {
					if procinfo.Under(cg.Path(), path) && len(path) > len(best) {
						best, q, ok = path, id, true
					}
				}
			}
		}
		if !ok {
			q, ok = procinfo.StatInRoot(filepath.Join(dir, "root"), "run/vgpu/quota")
			if !ok || !quotas[q] {
				continue
			}
		}
		p := &hostProc{pid: pid}
		p.nspid, p.name = readStatus(filepath.Join(dir, "status"))
		if l, ok := lockOf[q]; ok && l != (procinfo.FileID{}) {
			p.slots = heldSlots(dir, l)
		}
		out[q] = append(out[q], p)
	}
	return out
}

// readStatus returns the innermost NSpid and the Name of /proc/<pid>/status.
func readStatus(path string) (nspid int, name string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch k {
		case "Name":
			name = strings.TrimSpace(v)
		case "NSpid":
			f := strings.Fields(v)
			if len(f) > 0 {
				nspid, _ = strconv.Atoi(f[len(f)-1])
			}
		case "Pid":
			if nspid == 0 {
				nspid, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
	}
	return nspid, name
}

// heldSlots reads the OFD locks that the process's descriptors of the lock
// file hold: fdinfo lines "lock:\t1: OFDLCK ADVISORY  WRITE -1 maj:min:ino start end".
func heldSlots(dir string, lock procinfo.FileID) []int {
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return nil
	}
	var slots []int
	for _, fd := range fds {
		id, ok := procinfo.StatID(filepath.Join(dir, "fd", fd.Name()))
		if !ok || id != lock {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "fdinfo", fd.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			rest, ok := strings.CutPrefix(line, "lock:")
			if !ok || !strings.Contains(rest, "OFDLCK") {
				continue
			}
			f := strings.Fields(rest)
			if len(f) < 2 {
				continue
			}
			start, err1 := strconv.ParseInt(f[len(f)-2], 10, 64)
			end, err2 := strconv.ParseInt(f[len(f)-1], 10, 64)
			if err1 != nil || err2 != nil || start < 1 {
				continue
			}
			for b := start; b <= end && b-1 < contract.RegionSlots; b++ {
				slots = append(slots, int(b-1))
			}
		}
	}
	return slots
}
