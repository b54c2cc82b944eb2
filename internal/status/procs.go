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
	"github.com/vgpu-dev/vgpu/internal/procmap"
)

// How vgpu status finds a container's processes (docs/status.md): as vgpu
// node does, by internal/procmap's one rule. A process belongs to the
// container whose cgroup, recorded at create (or bound once from its live
// init), holds it; only a container with no init ever known is matched by
// the quota file its processes see, resolved inside each process's root.
// vgpu status only reads: a cgroup bound from an init is not written back.
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

// procScan looks up, for every process under procRoot, which container of
// m it belongs to (procmap.Map.Owner), by container id. lockOf maps a
// container's id to its lock file's id (zero when it has none).
func procScan(procRoot string, m *procmap.Map, lockOf map[string]procinfo.FileID) map[string][]*hostProc {
	out := map[string][]*hostProc{}
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
		c := m.Owner(pid)
		if c == nil {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		p := &hostProc{pid: pid}
		p.nspid, p.name = readStatus(filepath.Join(dir, "status"))
		if l, ok := lockOf[c.ID]; ok && l != (procinfo.FileID{}) {
			p.slots = heldSlots(dir, l)
		}
		out[c.ID] = append(out[c.ID], p)
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
