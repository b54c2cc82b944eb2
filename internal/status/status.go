// Package status is what `vgpu status` and `vgpu metrics` show: for each
// container in the state directory, its devices with their limits and usage
// (read from the container's shared region by its documented layout) and
// its GPU processes with host and in-container pids. Nothing here ever
// writes to a container's state; a container whose files are missing or
// corrupt is reported with its error, never stops the others.
package status

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/procmap"
	"github.com/vgpu-dev/vgpu/internal/regionread"
	"github.com/vgpu-dev/vgpu/internal/tenant"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenantfile"
)

// State of a container.
const (
	Running = "running" // processes are in it (or hold GPU slots)
	Stale   = "stale"   // state directory left, but no process is in it any more
)

// The modes of a device.
const (
	ModeTime    = "time"    // tenant.TimeSliced.String()
	ModeSpatial = "spatial" // tenant.Spatial.String()
)

// Report is one look at every container.
type Report struct {
	StateDir   string      `json:"stateDir"`
	Time       time.Time   `json:"time"`
	Containers []Container `json:"containers"`
	Error      string      `json:"error,omitempty"` // the state directory itself could not be read
	// HostEnforcement: whether vgpu node runs (node.go).
	HostEnforcement HostEnforcement `json:"hostEnforcement"`
	// GPUs: the host's GPUs as a running vgpu node last read them from the
	// driver (empty without one).
	GPUs []events.GPU `json:"gpus,omitempty"`
	// MPS: the MPS control daemons a running vgpu node supervises, one per
	// spatial GPU (docs/spatial.md); empty without one.
	MPS []events.MPS `json:"mps,omitempty"`
	// Wide: the text shows whole ids and UUIDs (vgpu status --wide); else
	// they are cut so that lines fit 120 columns (wide.go).
	Wide bool `json:"-"`
}

// Container is one container's figures.
type Container struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Bundle  string    `json:"bundle,omitempty"`
	Created time.Time `json:"created,omitempty"`
	State   string    `json:"state"`
	// InitPID is the host pid of the container's init as the runtime recorded
	// it (0 = not recorded); InitAlive tells whether it is still the
	// container's: the same process (pid and start time) when its start
	// time was recorded, else one that runs and sees this container's
	// quota file.
	InitPID   int  `json:"initPid,omitempty"`
	InitAlive bool `json:"initAlive"`
	// Cgroup: the container's cgroup on the host, recorded at create; its
	// processes are those in it or below it, whatever they see.
	Cgroup    string `json:"cgroup,omitempty"`
	initStart uint64
	// HostProcesses counts the host processes found in the container (GPU
	// users or not).
	HostProcesses int `json:"hostProcesses"`
	// RegionVersion is the shared region's layout version (0 = no region yet).
	RegionVersion int `json:"regionVersion"`
	// PaceWaitMS: cumulative ms in which its own pacer held a launch (to
	// its share or limit: its bucket, its slot) with none of its work
	// queued, all devices together, from the region (layout 7); nil
	// without.
	PaceWaitMS *uint64 `json:"paceWaitMs,omitempty"`
	// PaceHeld: the fraction (0..1) of the time between two readings in
	// which its own pacer held it so (PaceWaitMS's growth over the time):
	// its share or limit, not a neighbour, kept work the GPU could have
	// run waiting, as a cgroup's CPU throttling. nil when not measured.
	PaceHeld  *float64  `json:"paceHeld,omitempty"`
	Devices   []Device  `json:"devices"`
	Processes []Process `json:"processes"`
	DeadSlots int       `json:"deadSlots"` // slots of dead processes not reclaimed yet (not counted)
	Errors    []string  `json:"errors,omitempty"`
	// Enforcement: the latest kills, throttles and escalations vgpu node
	// recorded for the container, oldest first.
	Enforcement []events.Event `json:"enforcement,omitempty"`
	// Pod: the Kubernetes namespace, pod and container, as vgpu node learned
	// them from the kubelet's PodResources API (nil: not a device-plugin
	// container, or not named yet).
	Pod  *events.Pod `json:"pod,omitempty"`
	when time.Time   // of the region reading (for compute shares)
}

// Device is one GPU of a container.
type Device struct {
	Index int    `json:"index"` // inside the container
	UUID  string `json:"uuid"`
	// MemoryLimit in bytes, 0 = none.
	MemoryLimit uint64 `json:"memoryLimit"`
	// MemoryHeldBy: what holds the memory limit, "driver" (the driver's own
	// per-cgroup limit, internal/driverlimit) or "library + node"; "" when
	// there is no limit.
	MemoryHeldBy string `json:"memoryHeldBy,omitempty"`
	// MemoryUsed: the sum over the container's live processes.
	MemoryUsed uint64 `json:"memoryUsed"`
	// ComputeLimit in percent, 100 = none.
	ComputeLimit int `json:"computeLimit"`
	// Mode: "time" (paced by the library) or "spatial" (shared through
	// MPS: ComputeLimit is the SM share).
	Mode string `json:"mode"`
	// ComputeRequest in percent: the share guaranteed under contention (the
	// limit when none was given; 0: surplus only).
	ComputeRequest int `json:"computeRequest"`
	// MemoryRequest in bytes, 0 = none.
	MemoryRequest uint64 `json:"memoryRequest,omitempty"`
	// Priority: "high" or "low"; "" (left out) for normal.
	Priority string `json:"priority,omitempty"`
	// MemoryCeiling: with a memory request below the limit, what the
	// device may hold now (borrowing above the request: vgpu node's
	// ceiling); MemoryHeldToRequest: no vgpu node keeps a ceiling fresh, so
	// the library holds it to its request.
	MemoryCeiling       uint64 `json:"memoryCeiling,omitempty"`
	MemoryHeldToRequest bool   `json:"memoryHeldToRequest,omitempty"`
	// Suspended: the device's processes vgpu node holds suspended to host
	// memory to take borrowed memory back (memory_reclaim = "suspend"):
	// since when, and how much host memory each holds.
	Suspended []events.Suspended `json:"suspended,omitempty"`
	// ComputeGrant: the share the device may use now, in percent, and who
	// gave it (GrantSource: "arbitration", vgpu node's; "admission", held
	// to its request while vgpu node does not arbitrate). nil: not paced, or
	// no grant file (another release's container).
	ComputeGrant *float64 `json:"computeGrant,omitempty"`
	GrantSource  string   `json:"grantSource,omitempty"`
	// RequestScaled: the requests on the GPU summed past 100 at admission
	// and this one's share was scaled down with the others'.
	RequestScaled bool `json:"requestScaled,omitempty"`
	// UnpacedBesideRequests: no request and no limit (a tenant created
	// before any request on its GPU: admission gave it none), on a GPU where
	// other tenants hold requests. Nothing paces it, so those requests are
	// not guaranteed beside it; recreated, it gets request 0 (surplus only).
	UnpacedBesideRequests bool `json:"unpacedBesideRequests,omitempty"`
	// ComputePhase: where the container's slot starts in each pacing period,
	// in percent (the host's turn-taking); nil = none.
	ComputePhase *int `json:"computePhase,omitempty"`
	// BusyNs: cumulative busy time from the region (layout 2), nil without.
	BusyNs *uint64 `json:"busyNs,omitempty"`
	// OrderWaitMS: cumulative ms its launches waited for another tenant to
	// go first (the order inside the period: a higher priority, or one
	// waking below its due), from the region (layout 6); nil without.
	OrderWaitMS *uint64 `json:"orderWaitMs,omitempty"`
	// ComputeShare: measured busy share (0..1) between two readings, nil
	// when it was not measured.
	ComputeShare *float64 `json:"computeShare,omitempty"`
	// NodeShare: the compute share in percent as a running vgpu node
	// measures it from the driver (the average over its window, what its
	// policy judges); ThrottleDuty: the fraction of each duty period the
	// node keeps the container frozen (0: not throttled). nil: no node
	// measures this device.
	NodeShare    *float64 `json:"nodeSharePercent,omitempty"`
	ThrottleDuty *float64 `json:"throttleDuty,omitempty"`
}

// Process is one live GPU process (a live slot of the region).
type Process struct {
	HostPID int    `json:"hostPid"` // 0 = not found on this host (another PID namespace view)
	PID     int    `json:"pid"`     // as the process sees itself
	Name    string `json:"name,omitempty"`
	Slot    int    `json:"slot"`
	// Memory per container device index.
	Memory []uint64 `json:"memory"`
	// MemoryTotal over all devices.
	MemoryTotal uint64    `json:"memoryTotal"`
	Since       time.Time `json:"since"`
}

// Options of Collect.
type Options struct {
	StateDir string
	ProcRoot string // default /proc
}

// Collect reads every container of the state directory.
func Collect(o Options) *Report {
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	r := &Report{StateDir: o.StateDir, Time: time.Now().UTC(), Containers: []Container{}}
	m, err := procmap.Load(o.StateDir, o.ProcRoot)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	type pending struct {
		c      *Container
		region *regionread.Region
	}
	var all []*pending
	lockOf := map[string]procinfo.FileID{}
	for _, mc := range m.Containers {
		p := &pending{c: readContainer(o.StateDir, state.Entry{ID: mc.ID, Info: mc.Record, Err: mc.Err})}
		lockOf[mc.ID] = lockFileID(mc.Places.Shared())
		reg, err := regionread.Read(mc.Places.Shared())
		p.c.when = time.Now()
		switch {
		case errors.Is(err, regionread.ErrNoRegion):
		case err != nil:
			p.c.Errors = append(p.c.Errors, err.Error())
		default:
			p.region = reg
		}
		all = append(all, p)
	}
	procs := procScan(o.ProcRoot, m, lockOf)
	for _, p := range all {
		members := procs[p.c.ID]
		fill(p.c, p.region, members)
		if p.c.initStart != 0 && p.c.InitPID > 0 {
			p.c.InitAlive = procinfo.Same(o.ProcRoot, p.c.InitPID, p.c.initStart)
			if p.c.InitAlive {
				p.c.State = Running
			}
		}
		r.Containers = append(r.Containers, *p.c)
	}
	sort.Slice(r.Containers, func(i, j int) bool { return r.Containers[i].ID < r.Containers[j].ID })
	markUnpaced(r)
	collectEnforcement(r)
	collectSuspended(r)
	collectPods(r)
	collectNodeFigures(r)
	return r
}

// MemoryBorrowed is what the device holds above its memory request (0:
// none, or no request).
func (d Device) MemoryBorrowed() uint64 {
	if d.MemoryRequest == 0 || d.MemoryUsed <= d.MemoryRequest {
		return 0
	}
	return d.MemoryUsed - d.MemoryRequest
}

// readContainer is one container of the state directory, from its record;
// a record that cannot be read is the container's error.
func readContainer(stateDir string, e state.Entry) *Container {
	c := &Container{ID: e.ID, State: Stale, Devices: []Device{}, Processes: []Process{}}
	i := e.Info
	if e.Err != nil {
		c.Errors = append(c.Errors, e.Err.Error())
		return c
	}
	c.Name, c.Bundle, c.Created = i.Name, i.Bundle, i.Created
	c.Cgroup, c.initStart = i.Cgroup, i.InitStart
	c.InitPID = i.InitPID() // the pid file's for run --detach: no start recorded it
	g, _ := arbiter.Read(tenant.PlacesOf(stateDir, e.ID).ShareFile())
	now := monoNow()
	for _, d := range i.Devices {
		dv := Device{Index: d.Index, UUID: d.GPU.UUID, MemoryLimit: d.Memory, ComputeLimit: computeOf(d.Compute), ComputePhase: d.Phase,
			ComputeRequest: d.Request(), MemoryRequest: d.MemoryRequest, Mode: d.Mode.String(), Priority: PriorityShown(d.Priority)}
		if d.MemoryRequest > 0 && d.Memory > d.MemoryRequest {
			cp, borrowing := g.MemoryCap(d.Index, d.MemoryRequest, d.Memory, now)
			dv.MemoryCeiling, dv.MemoryHeldToRequest = cp, !borrowing
		}
		if share, _, src, ok := g.Holds(d.Index, now); ok && d.Paced() {
			pct := float64(share) / 100
			dv.ComputeGrant, dv.GrantSource = &pct, src
			if st, _ := arbiter.Unword(g.Static[d.Index]); d.Request() > 0 && st < d.Request()*100 {
				dv.RequestScaled = true
			}
		}
		c.Devices = append(c.Devices, dv)
	}
	heldBy(c, i)
	return c
}

// heldBy fills in what holds each device's memory limit.
func heldBy(c *Container, info *tenant.Record) {
	by := driverlimit.ByLibrary
	if info != nil {
		by = driverlimit.Enforcer(info)
	}
	for i := range c.Devices {
		if c.Devices[i].MemoryLimit > 0 {
			c.Devices[i].MemoryHeldBy = by
		}
	}
}

// markUnpaced sets UnpacedBesideRequests on the devices that nothing paces
// (request and limit 100) on GPUs where another device is paced.
func markUnpaced(r *Report) {
	paced := map[string]bool{}
	for _, c := range r.Containers {
		for _, d := range c.Devices {
			if d.ComputeRequest < 100 || d.ComputeLimit < 100 {
				paced[d.UUID] = true
			}
		}
	}
	for i := range r.Containers {
		for j := range r.Containers[i].Devices {
			d := &r.Containers[i].Devices[j]
			d.UnpacedBesideRequests = d.ComputeRequest >= 100 && d.ComputeLimit >= 100 && paced[d.UUID]
		}
	}
}

// lockFileID is the identity of the region's lock file in the tenant's
// shared directory dir, opened as tenantfile opens it: a link there (to a
// neighbour's lock file, say) is not followed, so it cannot make a
// neighbour's processes pass for this tenant's.
func lockFileID(dir string) procinfo.FileID {
	f, _, err := tenantfile.Open(dir, contract.RegionLockFile, regionread.MaxLockBytes)
	if err != nil {
		return procinfo.FileID{}
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return procinfo.FileID{}
	}
	return procinfo.FileID{Dev: uint64(st.Dev), Ino: st.Ino}
}

// monoNow is CLOCK_MONOTONIC in ns, the grant file's clock.
func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func computeOf(pct int) int {
	if pct <= 0 || pct > 100 {
		return 100
	}
	return pct
}

// fill adds the region's figures and the host processes to c.
func fill(c *Container, reg *regionread.Region, members []*hostProc) {
	c.HostProcesses = len(members)
	byPID := map[int]*hostProc{}
	bySlot := map[int][]*hostProc{}
	byNSpid := map[int][]*hostProc{}
	for _, m := range members {
		byPID[m.pid] = m
		byNSpid[m.nspid] = append(byNSpid[m.nspid], m)
		for _, s := range m.slots {
			bySlot[s] = append(bySlot[s], m)
		}
	}
	if c.InitPID > 0 {
		_, c.InitAlive = byPID[c.InitPID]
	}
	live := 0
	if reg != nil {
		c.RegionVersion = reg.Version
		if ms, ok := reg.PaceWait(); ok {
			w := uint64(ms)
			c.PaceWaitMS = &w
		}
		for i := range c.Devices {
			d := &c.Devices[i]
			d.MemoryUsed = reg.Usage(d.Index)
			if d.Index >= 0 && d.Index < len(reg.Compute) {
				b := reg.Compute[d.Index].BusyNs
				d.BusyNs = &b
				if reg.Compute[d.Index].HasOrderWait {
					w := uint64(reg.Compute[d.Index].OrderWaitMS)
					d.OrderWaitMS = &w
				}
			}
		}
		for _, s := range reg.Slots {
			if !s.Alive {
				c.DeadSlots++
				continue
			}
			live++
			p := Process{PID: s.PID, Slot: s.Index, Since: time.Unix(0, int64(s.ClaimedNs)).UTC()}
			if h := owner(s, bySlot[s.Index], byNSpid[s.PID]); h != nil {
				p.HostPID, p.Name = h.pid, h.name
			}
			for _, d := range c.Devices {
				var u uint64
				if d.Index >= 0 && d.Index < contract.RegionDevices {
					u = s.Usage[d.Index]
				}
				p.Memory = append(p.Memory, u)
				p.MemoryTotal = addSat(p.MemoryTotal, u)
			}
			if p.Memory == nil {
				p.Memory = []uint64{}
			}
			c.Processes = append(c.Processes, p)
		}
	}
	if len(members) > 0 || live > 0 {
		c.State = Running
	}
}

func addSat(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// owner picks the host process of a slot: the one holding its lock byte (if
// several share the descriptor, as right after a fork, the one whose pid is
// the slot's), else the only one whose innermost pid is the slot's.
func owner(s regionread.Slot, holders, samePID []*hostProc) *hostProc {
	if len(holders) == 1 {
		return holders[0]
	}
	for _, h := range holders {
		if h.nspid == s.PID {
			return h
		}
	}
	if len(holders) == 0 && len(samePID) == 1 {
		return samePID[0]
	}
	return nil
}

// MeasureShares fills each device's ComputeShare of cur from the busy time
// it gained since prev, and each container's PaceHeld from the pace wait it
// gained: Δcounter / Δtime, clamped to 0..1. A counter that went back (a
// region made anew) measures nothing.
func MeasureShares(prev, cur *Report) {
	old := map[string]map[int]*uint64{}
	at := map[string]time.Time{}
	waited := map[string]*uint64{}
	for _, c := range prev.Containers {
		m := map[int]*uint64{}
		for _, d := range c.Devices {
			m[d.Index] = d.BusyNs
		}
		old[c.ID], at[c.ID], waited[c.ID] = m, c.when, c.PaceWaitMS
	}
	for ci := range cur.Containers {
		c := &cur.Containers[ci]
		m, ok := old[c.ID]
		if !ok {
			continue
		}
		dt := c.when.Sub(at[c.ID])
		if dt <= 0 {
			continue
		}
		if before := waited[c.ID]; before != nil && c.PaceWaitMS != nil && *c.PaceWaitMS >= *before {
			h := min(float64(*c.PaceWaitMS-*before)*1e6/float64(dt.Nanoseconds()), 1)
			c.PaceHeld = &h
		}
		for di := range c.Devices {
			d := &c.Devices[di]
			before := m[d.Index]
			if d.BusyNs == nil || before == nil || *d.BusyNs < *before {
				continue
			}
			s := float64(*d.BusyNs-*before) / float64(dt.Nanoseconds())
			if s > 1 {
				s = 1
			}
			d.ComputeShare = &s
		}
	}
}

// HeldShown is PaceHeld where vgpu status and vgpu top show it: measured,
// and half a percent or more (less rounds to none).
func (c *Container) HeldShown() (float64, bool) {
	if c.PaceHeld == nil || *c.PaceHeld < 0.005 {
		return 0, false
	}
	return *c.PaceHeld, true
}

// HasBusy tells whether any device of the report has a busy counter (so a
// second reading can measure compute shares).
func (r *Report) HasBusy() bool {
	for _, c := range r.Containers {
		for _, d := range c.Devices {
			if d.BusyNs != nil {
				return true
			}
		}
	}
	return false
}

// Bytes formats a byte count for people (binary units).
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, u := float64(n), 0
	for v >= unit && u < 5 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.2f %ciB", v, "KMGTPE"[u-1])
}

// CheckStateDir refuses a state directory named on the command line that
// is not a directory: a typo must not read as "no containers". The
// configured default ("" here) may be missing.
func CheckStateDir(dir string) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("--state-dir %s: %v (the state directory is state_dir in %s, default %s)", dir, err, config.Path(), config.DefaultStateDir)
	}
	return nil
}

// PriorityShown is a priority as status shows it: its name, "" for normal
// (the priority of every tenant that did not ask for one).
func PriorityShown(p tenant.Priority) string {
	if p == tenant.Normal {
		return ""
	}
	return p.String()
}
