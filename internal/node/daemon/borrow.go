package daemon

import (
	"sort"
	"time"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/borrow"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/procmap"
	"github.com/vgpu-dev/vgpu/internal/regionread"
)

// Memory borrowing (internal/borrow, docs/node.md "Memory borrowing"): each
// round, per GPU, the daemon is the one writer of every tenant's memory
// ceiling. From the driver's per-process figures (what each container and
// every process outside vgpu holds) it computes ceilings that sum to at most
// the GPU's memory less what the outsiders hold, and publishes each in the
// tenant's grant file with a deadline a few rounds ahead. The library admits
// an allocation above the request only up to the ceiling while the deadline
// holds, else up to the request. Two tenants allocating at once draw on
// disjoint parts of the free pool, so no request is ever short.
//
// Under memory_borrow = "free" a ceiling is what the tenant holds plus all
// the GPU's free memory: a borrower may take what an owner's request is
// owed. An owner whose allocation the driver refuses says so in its region
// (need); the daemon checks the claim against the driver's figures and
// kills the largest process of the borrower most over its request
// (borrow.Victim), with an event naming why. Under the default rule the
// same holds: there an owner is short only when memory was taken outside
// the rule (a tenant around the library, a process outside vgpu).

// borrowing is the ceilings' state between rounds.
type borrowing struct {
	maps  map[string]*arbiter.Mapped // by grant file path
	total map[string]uint64          // each GPU's memory, by UUID (it does not change)
	// Ceilings: the last round's, by container id and device index, in
	// bytes as the library holds them (for metrics, status and tests).
	Ceilings map[string]map[int]uint64
	// reclaimed: pids killed to take memory back, by host pid, until when
	// a GPU still listing one takes nothing more back (the driver lists a
	// dead process a while, and its memory is not free until it goes).
	reclaimed map[int]time.Time
	lastWhy   map[string]string // the last refusal logged per owner
}

// ReasonBorrow is the reason of a kill that takes borrowed memory back.
const ReasonBorrow = "borrow"

// memTenant is one device of one container, as a round sees it.
type memTenant struct {
	c   *procmap.Container
	dev int
	in  borrow.Tenant
	lib uint64 // what the library counts of it (its region; else Used)
	// asks: it gave a memory request, equal to its limit or below it:
	// its allocations within the request wait for room (the library) and
	// the need they publish is served by a take-back
	asks bool
	// spatial: the device is shared through MPS (its processes cannot be
	// suspended)
	spatial bool
}

// borrow computes and publishes the memory ceilings of this round.
func (d *Daemon) borrow(now time.Time, m *procmap.Map, samples []nvmlfeed.Sample, owner map[int]string) {
	b := &d.bor
	if b.maps == nil {
		b.maps = map[string]*arbiter.Mapped{}
	}
	total := b.totals(d.o.Source, m)
	var err error
	outside := map[string]uint64{}
	used := map[[2]string]uint64{}
	gone := map[string]bool{}
	for _, c := range m.Containers {
		gone[c.ID] = c.Gone
	}
	for _, s := range samples {
		// what a process of an ended tenant still holds is no tenant's:
		// counted as held outside vgpu, as no share of it is anyone's
		if id := owner[s.HostPID]; id != "" && !gone[id] {
			used[[2]string{id, s.GPU}] += s.UsedBytes
		} else {
			outside[s.GPU] += s.UsedBytes
		}
	}
	for g, u := range d.unexplained() {
		outside[g] += u // held by nobody: not lent out
	}
	byGPU := map[string][]memTenant{}
	borrows := map[string]bool{}
	for _, c := range m.Containers {
		if c.Record == nil || c.Gone {
			continue // an ended tenant holds nothing and is owed nothing
		}
		var reg *regionread.Region
		for _, dv := range c.Record.Devices {
			t := total[dv.GPU.UUID]
			if t == 0 {
				continue
			}
			lim := dv.Memory
			if lim == 0 || lim > t {
				lim = t
			}
			req := dv.MemoryRequest
			if req == 0 || req > lim {
				req = lim // a limit-only tenant: its limit stands in for its request
			}
			mt := memTenant{c: c, dev: dv.Index, in: borrow.Tenant{ID: c.ID, Request: req, Limit: lim, Used: used[[2]string{c.ID, dv.GPU.UUID}], Rank: dv.Priority.Rank()},
				asks: dv.MemoryRequest > 0, spatial: dv.Mode.IsSpatial()}
			if req < lim {
				borrows[dv.GPU.UUID] = true
				if reg == nil {
					if r := d.regions[c.Places.Region()]; r != nil {
						reg = r.region
					}
				}
				mt.lib = mt.in.Used // no region to read: no context to take off
				if reg != nil {
					mt.lib = reg.Usage(dv.Index)
				}
			}
			byGPU[dv.GPU.UUID] = append(byGPU[dv.GPU.UUID], mt)
		}
	}
	d.drainSuspensions(now, m)
	b.Ceilings = map[string]map[int]uint64{}
	until := d.o.Mono() + uint64(d.memoryHold())
	seen := map[string]bool{}
	for uuid, ts := range byGPU {
		if !borrows[uuid] {
			continue
		}
		sort.Slice(ts, func(i, j int) bool {
			return ts[i].c.ID < ts[j].c.ID || ts[i].c.ID == ts[j].c.ID && ts[i].dev < ts[j].dev
		})
		in := make([]borrow.Tenant, len(ts))
		for i, t := range ts {
			in[i] = t.in
		}
		// what the suspended processes' restores are owed counts as
		// taken: nobody borrows the room a restore needs
		taken := sat(outside[uuid], borrow.Owed(in, d.suspendedOn(uuid)))
		ceils := borrow.Ceilings(total[uuid], taken, in)
		if d.o.BorrowFree {
			ceils = borrow.FreeCeilings(total[uuid], taken, in)
		}
		d.restoreRound(uuid, total[uuid], outside[uuid], in)
		// Under the default rule an owner short of room means memory was
		// taken outside the rule (a tenant that bypassed the library, or a
		// process outside vgpu that grew): it is taken back the same way.
		d.reclaim(now, m, uuid, total[uuid], outside[uuid], ts, samples, owner)
		ceils = d.holdRoom(now, uuid, total[uuid], taken, in, ceils)
		for i, ceil := range ceils {
			t := ts[i]
			if t.in.Request >= t.in.Limit && !t.asks {
				continue
			}
			// an owner whose request is its limit borrows nothing: its
			// ceiling is its limit, and the deadline tells its library
			// that vgpu node runs, so that a refusal within the request
			// waits for a take-back
			// The library counts its allocations only, not what the driver
			// holds for its contexts: its ceiling is the same less that.
			if t.in.Used > t.lib {
				ceil = max(ceil-min(ceil, t.in.Used-t.lib), t.in.Request)
			}
			gpath := t.c.Places.ShareFile()
			mp := b.maps[gpath]
			if mp == nil {
				if mp, err = arbiter.Map(gpath); err != nil {
					continue // no grant file of this release: held to its request
				}
				b.maps[gpath] = mp
			}
			seen[gpath] = true
			mp.SetCeiling(t.dev, ceil)
			mp.StampMemory(until)
			if b.Ceilings[t.c.ID] == nil {
				b.Ceilings[t.c.ID] = map[int]uint64{}
			}
			b.Ceilings[t.c.ID][t.dev] = ceil
		}
	}
	for p, mp := range b.maps {
		if !seen[p] {
			mp.Close()
			delete(b.maps, p)
		}
	}
}

// reclaim takes memory back on GPU uuid for an owner whose allocation waits
// (its region's need): the claim is checked against the driver's figures
// (borrow.Victim: what the owner holds with the need stays within its
// request) and only while the GPU has not the room; then the borrower most
// over its request loses its largest process, through the enforcement
// path's kill, with an event naming owner, request, borrower and bytes.
func (d *Daemon) reclaim(now time.Time, m *procmap.Map, uuid string, total, outside uint64, ts []memTenant, samples []nvmlfeed.Sample, owner map[int]string) {
	b := &d.bor
	if b.reclaimed == nil {
		b.reclaimed = map[int]time.Time{}
		b.lastWhy = map[string]string{}
	}
	for pid, until := range b.reclaimed {
		if now.After(until) {
			delete(b.reclaimed, pid)
		}
	}
	used := outside
	hs := make([]borrow.Holder, len(ts))
	for i, t := range ts {
		used += t.in.Used
		hs[i].Tenant = t.in
	}
	for _, s := range samples {
		if s.GPU != uuid || owner[s.HostPID] == "" {
			continue
		}
		if _, dead := b.reclaimed[s.HostPID]; dead {
			return // a kill of ours not yet gone from the driver: wait for it to land
		}
		if p, ok := d.sus.held[s.HostPID]; ok && p.Suspending {
			return // a suspension of ours not landed yet: wait for it
		}
		for i := range hs {
			if hs[i].ID == owner[s.HostPID] {
				hs[i].Procs = append(hs[i].Procs, borrow.Proc{PID: s.HostPID, Used: s.UsedBytes})
			}
		}
	}
	free := uint64(0)
	if used < total {
		free = total - used
	}
	asked := false
	for _, t := range ts {
		if t.in.Request >= t.in.Limit && !t.asks {
			continue // no request given: nothing is owed it
		}
		need := readNeed(d.regions[t.c.Places.Region()], t.dev)
		d.needSeen(now, uuid, t.c.ID, need)
		if need > 0 && !asked {
			// the driver keeps memory of its own beside the processes':
			// the GPU's own figure, when NVML gives it, is the truth, for
			// whether the room is there as for what a take-back must free
			asked = true
			tenants := used - outside
			outside = d.withDriverOwn(uuid, outside, tenants)
			used = tenants + outside
			free = 0
			if used < total {
				free = total - used
			}
		}
		if need == 0 || need <= free {
			continue // nothing asked, or the room is there: the retry takes it
		}
		if why := d.ownerUnproven(uuid, t.c.ID, need, samples, owner); why != "" {
			if why != d.bor.lastWhy[t.c.ID] {
				d.logf("vgpu node: %s", why)
			}
			d.bor.lastWhy[t.c.ID] = why
			continue
		}
		if d.o.Suspend != nil || d.noSuspendWhy != "" {
			if d.takeBack(now, m, uuid, total, outside, t, need, ts, hs, samples, owner) {
				return // what it took back shows in the next round
			}
			continue
		}
		id, pid, why, ok := borrow.Victim(t.in, need, hs)
		if !ok {
			if why != d.bor.lastWhy[t.c.ID] {
				d.logf("vgpu node: %s", why)
			}
			d.bor.lastWhy[t.c.ID] = why
			continue
		}
		delete(d.bor.lastWhy, t.c.ID)
		b.reclaimed[pid] = now.Add(5 * time.Second)
		var v borrow.Tenant
		dev := -1
		for _, u := range ts {
			if u.in.ID == id {
				v, dev = u.in, u.dev
			}
		}
		d.actTakeBack(now, m, enforce.Action{Kind: enforce.Kill, Container: id, PID: pid, GPU: uuid, Reason: ReasonBorrow,
			Used: v.Used, Limit: v.Request, Detail: why}, dev, t.c.ID, need, samples, owner)
		return // one kill a round: the next sees what it gave back
	}
}

// withDriverOwn is outside raised to what GPU uuid's own used figure
// (NVML's) holds beyond tenants, the bytes the tenants' processes hold:
// the driver keeps memory that no process lists (its reserve, what its
// contexts keep; about 620 MiB on an H200 beside one process), and a
// decision that counts only the processes' figures sees room that is not
// there: a take-back that frees too little, a restore that cannot fit
// (which on this driver fails for good). outside unchanged where the driver
// gives no figure.
func (d *Daemon) withDriverOwn(uuid string, outside, tenants uint64) uint64 {
	gs, _ := d.gpuFigures() // none: outside as it is
	for _, g := range gs {
		if g.UUID == uuid && g.MemoryUsed > tenants && g.MemoryUsed <= g.MemoryTotal {
			outside = max(outside, g.MemoryUsed-tenants)
		}
	}
	return outside
}

// readNeed reads, from the region r (nil: none read), the bytes an
// allocation of device dev waits for (its need, in MiB); 0 for none or a
// region of a layout without the field.
func readNeed(r *regionRead, dev int) uint64 {
	if r == nil || !r.ok {
		return 0
	}
	h := &r.header
	if h.Magic != contract.RegionMagic || h.Version < 5 || h.Version > contract.RegionVersion || dev < 0 || dev >= contract.RegionDevices {
		return 0
	}
	return uint64(h.NeedMib[dev]) << 20
}

// totals are the GPUs' memory, asked of NVML again only when a container
// names a GPU not known yet; none without NVML's totals (nobody borrows:
// the library holds each tenant to its request).
func (b *borrowing) totals(src nvmlfeed.Source, m *procmap.Map) map[string]uint64 {
	fresh := b.total == nil
	for _, c := range m.Containers {
		if c.Record == nil {
			continue
		}
		for _, dv := range c.Record.Devices {
			if _, ok := b.total[dv.GPU.UUID]; !ok {
				fresh = true
			}
		}
	}
	if !fresh {
		return b.total
	}
	l, ok := src.(nvmlfeed.GPULister)
	if !ok {
		return nil
	}
	gs, err := l.GPUs()
	if err != nil {
		return b.total
	}
	b.total = map[string]uint64{}
	for _, g := range gs {
		b.total[g.UUID] = g.MemoryTotal
	}
	return b.total
}

// memoryHold is how long a round's ceilings hold: three rounds, at least
// 2 s, at most what the library believes.
func (d *Daemon) memoryHold() time.Duration {
	return min(max(3*d.o.Interval, 2*time.Second), time.Duration(contract.ShareMemMaxMS)*time.Millisecond)
}

// MemoryCeilings are the last round's memory ceilings, by container id and
// device index (bytes).
func (d *Daemon) MemoryCeilings() map[string]map[int]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]map[int]uint64{}
	for id, m := range d.bor.Ceilings {
		out[id] = map[int]uint64{}
		for k, v := range m {
			out[id][k] = v
		}
	}
	return out
}

// memOwners is owner (host pid -> container id, enforcement's attribution)
// with the processes of `vgpu exec` commands added (procmap.ExecOwner):
// their memory is their tenant's for ceilings and take-backs, while
// enforcement, with no cgroup to freeze, leaves them alone.
func memOwners(m *procmap.Map, samples []nvmlfeed.Sample, owner map[int]string, byID map[string]*procmap.Container) map[int]string {
	out := make(map[int]string, len(owner))
	for pid, id := range owner {
		out[pid] = id
	}
	for _, s := range samples {
		if out[s.HostPID] != "" {
			continue
		}
		if c := m.ExecOwner(s.HostPID); c != nil && byID[c.ID] != nil {
			out[s.HostPID] = c.ID
		}
	}
	return out
}
