// Package procmap tells which limited container a host process belongs to,
// from /proc/<pid>/cgroup and the state directory.
//
// A container's cgroup is recorded in its container.json at create, before
// its own code runs (vgpu-runtime at start, vgpu-hook at createContainer):
// every process in that cgroup or below it belongs to the container,
// whatever it sees or hides (a tenant may unshare its mounts and move
// /run/vgpu away; it cannot leave its cgroup, and a cgroup it makes below
// its own is still below it). A container whose cgroup was not recorded
// (run --detach: no start; a state of an older release) has it bound once
// from its init, named by pid (and start time when recorded) and checked to
// live in a mount namespace of its own, and the binding is written back
// (Bind), so that it holds from then on. Only a container with no init
// known at all is attributed by the quota file its processes see (device
// and inode), resolved inside each process's root (openat2
// RESOLVE_IN_ROOT): resolved on the host, a symlink in a container would
// aim the check at a neighbour's quota file.
package procmap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Cgroup is a process's cgroup membership (procinfo.Cgroup).
type Cgroup = procinfo.Cgroup

// ParseCgroup parses the text of /proc/<pid>/cgroup (procinfo.ParseCgroup).
func ParseCgroup(b []byte) (Cgroup, error) { return procinfo.ParseCgroup(b) }

// Under tells whether path is cg or below it (procinfo.Under).
func Under(path, cg string) bool { return procinfo.Under(path, cg) }

// Container is one limited container of the state directory.
type Container struct {
	ID      string
	InitPID int // 0 = not known or not alive
	// Cgroup: the container's cgroup (the path procinfo.Cgroup.Path gives);
	// "" when not known. Every process in it or below it is the
	// container's.
	Cgroup string
	// Bound: the cgroup was bound from the init in this Load, not read
	// from container.json (the daemon writes it back: Bind).
	Bound     bool
	InitStart uint64
	// Record: the container's record, as it is (nil when Err); Places:
	// where its files are.
	Record  *tenant.Record
	Places  tenant.Places
	quotaID procinfo.FileID
	// noInit: neither an init nor a cgroup was ever recorded: only then
	// are processes attributed by the quota file they see.
	noInit bool
	// execPID: a live `vgpu exec` (OnHost) of this record: every process
	// descending from it is its command's. A process cannot make itself
	// another's descendant, only leave the tree (then it counts as
	// outside vgpu, as a program run without vgpu exec would).
	execPID int
	// Gone: the recorded init is known to have exited (tenant.Record.Gone,
	// the ledger's liveness rule): the tenant holds nothing and is owed
	// nothing, whether or not its record was removed yet.
	Gone bool
	Err  error // container.json could not be read
}

// Map is one look at the state directory and the processes' cgroups.
type Map struct {
	ProcRoot   string
	Containers []*Container
	selfMnt    string // the reader's mount namespace
}

// Load reads every container of stateDir (procRoot: "/proc" unless testing).
func Load(stateDir, procRoot string) (*Map, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	m := &Map{ProcRoot: procRoot}
	m.selfMnt, _ = os.Readlink("/proc/self/ns/mnt")
	all, err := state.List(stateDir)
	if err != nil {
		return nil, err
	}
	for _, e := range all {
		m.Containers = append(m.Containers, m.loadOne(stateDir, e))
	}
	return m, nil
}

func (m *Map) loadOne(stateDir string, e state.Entry) *Container {
	c := &Container{ID: e.ID, Places: tenant.PlacesOf(stateDir, e.ID)}
	if e.Err != nil {
		c.Err = e.Err
		return c
	}
	info := e.Info
	c.Record = info
	c.quotaID, _ = procinfo.StatID(c.Places.Quota())
	pid := info.InitPID()
	c.InitStart = info.InitStart
	c.Gone = info.Gone(m.ProcRoot)
	alive := pid > 0 && !c.Gone
	if alive {
		c.InitPID = pid
	}
	if info.Cgroup != "" {
		c.Cgroup = info.Cgroup
		return c
	}
	if pid <= 0 {
		c.noInit = true
		return c
	}
	if !alive {
		return c // its init is gone: nothing to bind, nothing to attribute
	}
	if info.OnHost {
		// vgpu exec, even in a mount namespace of its own: its cgroup is
		// its caller's, shared with processes that are not the record's;
		// its command's are those descending from it (ExecOwner)
		c.InitPID = 0
		if info.InitStart != 0 {
			c.execPID = pid
		}
		return c
	}
	// Bind the cgroup from the init: only a process of a mount namespace
	// of its own (a container's; never a host process that reused a pid),
	// outside the root cgroup and, with no start time recorded, one that
	// still sees the container's quota file.
	if info.InitStart == 0 && !m.seesQuota(pid, c.quotaID) {
		c.InitPID = 0
		return c
	}
	if mnt, err := os.Readlink(filepath.Join(m.ProcRoot, strconv.Itoa(pid), "ns", "mnt")); err != nil || mnt == m.selfMnt {
		c.InitPID = 0
		return c
	}
	cg, err := procinfo.CgroupOf(m.ProcRoot, pid)
	if err != nil || cg.Path() == "/" || cg.Path() == "" {
		c.InitPID = 0
		return c
	}
	if c.InitStart == 0 {
		if st, err := procinfo.StatOf(m.ProcRoot, pid); err == nil {
			c.InitStart = st.Start
		}
	}
	c.Cgroup, c.Bound = cg.Path(), true
	return c
}

// Bind writes the cgroups this Load bound from the inits back into the
// containers' container.json, so that a later look keeps them even once
// the init moved below them.
func (m *Map) Bind(stateDir string) error {
	var errs []error
	for _, c := range m.Containers {
		if c.Bound && c.InitPID > 0 {
			if err := state.SetInit(stateDir, c.ID, c.InitPID, c.InitStart, c.Cgroup); err != nil {
				errs = append(errs, fmt.Errorf("container %s: %w", c.ID, err))
			}
			c.Bound = false
		}
	}
	return errors.Join(errs...)
}

// seesQuota tells whether process pid sees q at /run/vgpu/quota, resolved
// inside its own root.
func (m *Map) seesQuota(pid int, q procinfo.FileID) bool {
	id, ok := procinfo.StatInRoot(filepath.Join(m.ProcRoot, strconv.Itoa(pid), "root"), contract.QuotaPath)
	return ok && q != (procinfo.FileID{}) && id == q
}

// Owner returns the container host process pid belongs to (nil: none):
// the container whose cgroup holds it (the deepest, should one container's
// cgroup lie below another's); for containers with no init ever known, the
// one whose quota file it sees.
func (m *Map) Owner(pid int) *Container {
	if cg, err := procinfo.CgroupOf(m.ProcRoot, pid); err == nil {
		var best *Container
		for _, c := range m.Containers {
			if c.Cgroup != "" && Under(cg.Path(), c.Cgroup) && (best == nil || len(c.Cgroup) > len(best.Cgroup)) {
				best = c
			}
		}
		if best != nil {
			return best
		}
	}
	for _, c := range m.Containers {
		if c.noInit && c.Record != nil && m.seesQuota(pid, c.quotaID) {
			return c
		}
	}
	return nil
}

// execMaxDepth bounds the walk up a process's parents.
const execMaxDepth = 64

// ExecOwner returns the `vgpu exec` record whose command pid descends
// from (the nearest, for a vgpu exec run under another), or nil. Memory
// borrowing counts such a process as the record's; Owner does not, so that
// enforcement leaves `vgpu exec` processes alone (no cgroup to freeze).
func (m *Map) ExecOwner(pid int) *Container {
	execs := map[int]*Container{}
	for _, c := range m.Containers {
		if c.execPID > 0 {
			execs[c.execPID] = c
		}
	}
	if len(execs) == 0 {
		return nil
	}
	for i := 0; i < execMaxDepth && pid > 1; i++ {
		if c := execs[pid]; c != nil {
			return c
		}
		st, err := procinfo.StatOf(m.ProcRoot, pid)
		if err != nil {
			return nil
		}
		pid = st.PPID
	}
	return nil
}
