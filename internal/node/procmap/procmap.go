// Package procmap tells which limited container a host process belongs to,
// from /proc/<pid>/cgroup and the state directory (read-only).
//
// A container's cgroup is read from its init process (the host pid the
// runtime recorded in container.json, or its --pid-file); the init is
// trusted only while it still sees the container's own quota file (the
// same check `vgpu status` makes). A process belongs to the container when
// its cgroup is the container's or below it. The cgroup, unlike the mount
// namespace, cannot be changed from inside a container whose cgroupfs is
// read-only (runc's default): a tenant that unshares its mounts and hides
// /run/vgpu/quota stays in its cgroup. When the init is not known, a
// process is attributed by the quota file it sees (dev and inode).
package procmap

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

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/state"
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

// Under tells whether path is cg or below it.
func Under(path, cg string) bool {
	if cg == "" || path == "" {
		return false
	}
	if cg == "/" {
		return false // the root cgroup is nobody's container
	}
	return path == cg || strings.HasPrefix(path, cg+"/")
}

// Container is one limited container of the state directory.
type Container struct {
	ID      string
	InitPID int    // 0 = not known or not alive
	Cgroup  Cgroup // of its init; zero when not known
	Quota   *quota.File
	quotaID fileID
	Err     error // container.json or quota could not be read
}

type fileID struct{ dev, ino uint64 }

func statID(path string) (fileID, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino}, true
}

// Map is one look at the state directory and the processes' cgroups.
type Map struct {
	ProcRoot   string
	Containers []*Container
}

// Load reads every container of stateDir (procRoot: "/proc" unless testing).
func Load(stateDir, procRoot string) (*Map, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	m := &Map{ProcRoot: procRoot}
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		id := e.Name()
		if strings.HasPrefix(id, ".") || !e.IsDir() || state.ValidID(id) != nil {
			continue
		}
		m.Containers = append(m.Containers, m.loadOne(stateDir, id))
	}
	return m, nil
}

func (m *Map) loadOne(stateDir, id string) *Container {
	c := &Container{ID: id}
	dir := filepath.Join(stateDir, id)
	qb, err := os.ReadFile(filepath.Join(dir, config.StateQuota))
	if err != nil {
		c.Err = err
		return c
	}
	if c.Quota, err = quota.Parse(qb); err != nil {
		c.Err = fmt.Errorf("%s: %w", filepath.Join(dir, config.StateQuota), err)
		return c
	}
	c.quotaID, _ = statID(filepath.Join(dir, config.StateQuota))
	b, err := os.ReadFile(filepath.Join(dir, config.StateInfo))
	if err != nil {
		c.Err = err
		return c
	}
	info, err := state.ParseInfo(b)
	if err != nil {
		c.Err = fmt.Errorf("%s: %w", filepath.Join(dir, config.StateInfo), err)
		return c
	}
	pid := 0
	if len(info.PIDs) > 0 {
		pid = info.PIDs[0]
	} else if info.PIDFile != "" {
		if pb, err := os.ReadFile(info.PIDFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(pb)))
		}
	}
	if pid > 0 && m.seesQuota(pid, c.quotaID) {
		if cg, err := m.cgroupOf(pid); err == nil && cg.Path() != "/" {
			c.InitPID, c.Cgroup = pid, cg
		}
	}
	return c
}

func (m *Map) seesQuota(pid int, q fileID) bool {
	id, ok := statID(filepath.Join(m.ProcRoot, strconv.Itoa(pid), "root", contract.QuotaPath))
	return ok && q != (fileID{}) && id == q
}

func (m *Map) cgroupOf(pid int) (Cgroup, error) {
	b, err := os.ReadFile(filepath.Join(m.ProcRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return Cgroup{}, err
	}
	return ParseCgroup(b)
}

// Owner returns the container host process pid belongs to (nil: none).
func (m *Map) Owner(pid int) *Container {
	if cg, err := m.cgroupOf(pid); err == nil {
		for _, c := range m.Containers {
			if c.InitPID > 0 && Under(cg.Path(), c.Cgroup.Path()) {
				return c
			}
		}
	}
	for _, c := range m.Containers {
		if c.InitPID == 0 && c.Quota != nil && m.seesQuota(pid, c.quotaID) {
			return c
		}
	}
	return nil
}
