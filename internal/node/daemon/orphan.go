package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/procmap"
)

// Memory nobody explains (docs/node.md "Memory the processes do not
// explain"). A process that allocates, forks a child keeping the driver's
// descriptors and exits leaves its memory allocated; driver 580 lists it
// under the exited parent's pid until the child exits (H200,
// test/gpu/orphan.sh). No /proc/<pid>/cgroup names a container for that pid
// any more, so each listed pid's container and start time are remembered
// while it lives: an exited pid stays its container's (a pid reused by
// another process is not: the start time differs), and a kill aimed at it
// kills the container whole, the only way to reach the descriptors' holder.
// Memory the driver counts as used that no listed process explains (the
// GPU's used figure less the processes' sum, above the smallest such gap
// ever seen: the driver's own) is held by nobody: it is not lent out, and
// when it persists and appeared right after a container's processes left
// the list, that container is killed whole.

// ReasonOrphan is the reason of a container killed for memory the driver
// holds for it under no listed process.
const ReasonOrphan = "orphan"

// orphans is what the rule remembers between rounds.
type orphans struct {
	seen   map[int]seenProc  // listed pids: the container and start time seen alive
	exited map[int]string    // this round: listed pids that exited, by container
	gaps   map[string]*gap   // by GPU UUID
	logged map[string]string // the last line logged per GPU
}

type seenProc struct {
	id    string
	start uint64 // 0: not known
}

// gap is one GPU's memory that no listed process explains.
type gap struct {
	base     uint64 // the smallest gap seen: the driver's own memory
	known    bool
	listed   map[int]seenBytes // last round's container processes
	vanished []vanish          // container processes that left the list lately
	since    time.Time         // the excess first seen (zero: none now)
	prev     uint64            // last round's excess
	held     uint64            // excess seen two rounds running: held by nobody
	suspect  string            // the container whose processes left the list as the excess appeared
	acted    time.Time
}

type seenBytes struct {
	id    string
	bytes uint64
}

type vanish struct {
	id    string
	pid   int
	bytes uint64
	at    time.Time
}

// orphanOf returns the container listed pid hostPID is charged to: id (its
// cgroup's, "" for none) while it is the process seen alive before; the
// container it was seen in once it exited or its pid was reused (then
// recorded in exited).
func (d *Daemon) orphanOf(hostPID int, id string, byID map[string]*procmap.Container) string {
	o := &d.orph
	if o.seen == nil {
		o.seen, o.exited, o.gaps, o.logged = map[int]seenProc{}, map[int]string{}, map[string]*gap{}, map[string]string{}
	}
	st, err := procinfo.StatOf(d.o.ProcRoot, hostPID)
	_, derr := os.Stat(filepath.Join(d.o.ProcRoot, strconv.Itoa(hostPID)))
	gone := errors.Is(derr, fs.ErrNotExist) || err == nil && (st.State == 'Z' || st.State == 'X')
	reused := err == nil && o.seen[hostPID].start != 0 && st.Start != o.seen[hostPID].start
	if was, known := o.seen[hostPID]; known && byID[was.id] != nil && (gone || reused) {
		o.exited[hostPID] = was.id
		return was.id
	}
	if id != "" && !gone {
		o.seen[hostPID] = seenProc{id: id, start: st.Start} // 0 when unreadable: not checked
	}
	return id
}

// orphanRound ends a round's attribution: it forgets pids no longer
// listed, measures each GPU's unexplained memory and acts on it.
func (d *Daemon) orphanRound(now time.Time, m *procmap.Map, samples []nvmlfeed.Sample, owner map[int]string, byID map[string]*procmap.Container) {
	o := &d.orph
	if o.seen == nil {
		o.seen, o.exited, o.gaps, o.logged = map[int]seenProc{}, map[int]string{}, map[string]*gap{}, map[string]string{}
	}
	listed := map[int]bool{}
	sum := map[string]uint64{}
	now2 := map[string]map[int]seenBytes{}
	for _, s := range samples {
		listed[s.HostPID] = true
		sum[s.GPU] += s.UsedBytes
		if id := owner[s.HostPID]; id != "" {
			if now2[s.GPU] == nil {
				now2[s.GPU] = map[int]seenBytes{}
			}
			now2[s.GPU][s.HostPID] = seenBytes{id, s.UsedBytes}
		}
	}
	for pid := range o.seen {
		if !listed[pid] {
			delete(o.seen, pid)
		}
	}
	gs, ok := d.gpuFigures()
	if !ok {
		return
	}
	window := max(10*d.o.Interval, 2*time.Second)
	for _, g := range gs {
		if g.MemoryUsed == 0 || g.MemoryUsed > g.MemoryTotal {
			continue // not reported
		}
		st := o.gaps[g.UUID]
		if st == nil {
			st = &gap{}
			o.gaps[g.UUID] = st
		}
		for pid, sb := range st.listed {
			if _, still := now2[g.UUID][pid]; !still {
				st.vanished = append(st.vanished, vanish{id: sb.id, pid: pid, bytes: sb.bytes, at: now})
			}
		}
		st.listed = now2[g.UUID]
		for len(st.vanished) > 0 && now.Sub(st.vanished[0].at) > window {
			st.vanished = st.vanished[1:]
		}
		cur := uint64(0)
		if g.MemoryUsed > sum[g.UUID] {
			cur = g.MemoryUsed - sum[g.UUID]
		}
		if !st.known || cur < st.base {
			st.base, st.known = cur, true
		}
		excess := cur - st.base
		if excess <= d.o.Policy.MemoryTolerance {
			excess = 0
		}
		// a process may allocate between the two queries: held by nobody
		// only when seen two rounds running
		st.held = min(excess, st.prev)
		st.prev = excess
		if excess == 0 {
			st.since, st.suspect = time.Time{}, ""
			d.m.unexplained.WithLabelValues(g.UUID).Set(0)
			if o.logged[g.UUID] != "" {
				d.logf("vgpu node: GPU %s: the memory no listed process explained is gone", g.UUID)
				delete(o.logged, g.UUID)
			}
			continue
		}
		if st.since.IsZero() {
			st.since = now
			st.suspect = suspectOf(st.vanished, byID, excess)
		}
		d.m.unexplained.WithLabelValues(g.UUID).Set(float64(st.held))
		if st.held == 0 {
			continue
		}
		line := fmt.Sprintf("GPU %s: %s used that no listed process explains (used %s, its processes %s): held by nobody, not lent out",
			g.UUID, bytesText(st.held), bytesText(g.MemoryUsed), bytesText(sum[g.UUID]))
		if st.suspect != "" {
			line += fmt.Sprintf("; it appeared as processes of %s left the list", st.suspect)
		}
		if o.logged[g.UUID] == "" {
			d.logf("vgpu node: %s", line)
			o.logged[g.UUID] = line
		}
		c := byID[st.suspect]
		if c == nil || now.Sub(st.since) < d.o.Policy.Grace || now.Sub(st.acted) < d.o.Policy.KillWait {
			continue
		}
		st.acted = now
		idx := -1
		for _, dv := range c.Record.Devices {
			if dv.GPU.UUID == g.UUID {
				idx = dv.Index
			}
		}
		d.act(now, m, enforce.Action{Kind: enforce.KillAll, Container: c.ID, Cgroup: c.Cgroup, GPU: g.UUID, Reason: ReasonOrphan, Used: st.held,
			Detail: fmt.Sprintf("%s of GPU memory held under no listed process for %v, since processes of %s left the list: a process of it keeps the driver's descriptors",
				bytesText(st.held), now.Sub(st.since).Round(time.Millisecond), c.ID)}, idx)
	}
}

// suspectOf is the container whose processes that left the list lately
// held the most memory, at least half the excess (what an allocation racing
// the two NVML queries shows is not pinned on a container whose small
// process happened to exit); "" for none.
func suspectOf(vs []vanish, byID map[string]*procmap.Container, excess uint64) string {
	by := map[string]uint64{}
	for _, v := range vs {
		if byID[v.id] != nil {
			by[v.id] += v.bytes
		}
	}
	ids := make([]string, 0, len(by))
	for id, b := range by {
		if b >= excess/2 {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return by[ids[i]] > by[ids[j]] || by[ids[i]] == by[ids[j]] && ids[i] < ids[j] })
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// unexplained is what each GPU holds for nobody now (bytes), for the
// ceilings: memory not lent out.
func (d *Daemon) unexplained() map[string]uint64 {
	out := map[string]uint64{}
	for u, g := range d.orph.gaps {
		out[u] = g.held
	}
	return out
}

// suspectHolds tells whether GPU uuid holds memory no process explains
// since processes of container id left the list.
func (d *Daemon) suspectHolds(uuid, id string) bool {
	g := d.orph.gaps[uuid]
	return g != nil && g.prev > 0 && g.suspect == id
}

// wholeIfExited turns a kill of a pid that exited, its memory held by a
// process of its container keeping the driver's descriptors, into a kill of
// the container whole: killing the pid reaches nothing.
func (d *Daemon) wholeIfExited(m *procmap.Map, a enforce.Action) enforce.Action {
	id, ok := d.orph.exited[a.PID]
	if a.Kind != enforce.Kill || !ok || id != a.Container {
		return a
	}
	for _, c := range m.Containers {
		if c.ID == id {
			a.Kind, a.Cgroup = enforce.KillAll, c.Cgroup
			a.Detail += fmt.Sprintf("; pid %d exited and a process of %s keeps its memory through the driver's descriptors: killed whole", a.PID, id)
			a.PID = 0
		}
	}
	return a
}
