package daemon

import (
	"path/filepath"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The compute arbitration (internal/arbiter), kept apart from enforcement:
// once per pacing period it reads what each paced tenant did (its region:
// the launches' device time, and when a launch last waited for the pacer),
// computes each GPU's grants and publishes them in the tenants' grant files,
// which only the host writes. The library believes a grant for
// contract.ShareStaleMS; without this loop every tenant is held to its
// admission share (its request).

// pacedTenant is one paced device of one state entry, between rounds.
type pacedTenant struct {
	id, gpu string
	request int // percent
	limit   int // percent
	// demandSince: CLOCK_MONOTONIC ns since when its region has shown work
	// (device time, a waiting launch, queued work) with no pacing period
	// without any; 0: none now. activeAt: the last check that showed some.
	demandSince, activeAt uint64
	// starvedIn: the demandSince of the stretch of work in which it was
	// found starved; its neighbours stay held while that stretch lasts
	// (freed, they would take its share again as soon as it recovers)
	starvedIn uint64
	grants    []grantAt // its grants over the last enforcement window
	grant     *arbiter.Mapped
	grantPath string
	region    string // the region file
	dev       int
	watch     arbiter.Watch // its checks and arbitrations (asleep, awake)
	last      arbiter.Grant // its grant from the last arbitration
	granted   bool
	seen      bool
}

type arbitration struct {
	tenants map[string]*pacedTenant // by entry id + "/" + device index
	last    uint64                  // CLOCK_MONOTONIC ns of the last periodic arbitration
	// Grants is the last round's result, for tests and metrics: by entry id,
	// per device index.
	Grants map[string]map[int]arbiter.Grant
	// regions: this round's regions, read before the daemon's lock
	regions regionReads
}

type grantAt struct {
	at    uint64
	share int // basis points
}

// monoNow is CLOCK_MONOTONIC in ns: the clock the library's slots and the
// grant file's stamp are on.
func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// readWant reads, from the region r (nil: none read), device dev's
// cumulative busy ns, when a launch last waited and when its queued
// launches end; ok false for a region this vgpu does not arbitrate
// (another layout: a library of another release) or none.
func readWant(r *regionRead, dev int) (w arbiter.Reading, ok bool) {
	if r == nil || !r.ok {
		return w, false
	}
	h := &r.header
	if h.Magic != contract.RegionMagic || h.Version < 4 || h.Version > contract.RegionVersion || dev < 0 || dev >= contract.RegionDevices {
		return w, false
	}
	w.Busy, w.Want = h.Compute[dev].BusyNs, h.WantNs[dev]
	if q := h.QueueEnd[dev]; q > 0 {
		w.Queue = uint64(q)
	}
	return w, true
}

// arbitrate checks every paced tenant (now: CLOCK_MONOTONIC ns) and
// arbitrates all GPUs when a pacing period has passed since the last such
// round, and a GPU at once when a check finds one of its tenants asleep or
// awake against its last arbitration (arbiter.Watch): so an idle tenant's
// time goes to the others within one period, and one that wakes has its
// request back within one. Entries it cannot read are left to their
// admission shares.
func (a *arbitration) arbitrate(stateDir string, now uint64) {
	if a.tenants == nil {
		a.tenants = map[string]*pacedTenant{}
	}
	period := uint64(contract.DefaultPeriodMS) * 1e6
	ledger, _ := state.Ledger(stateDir)
	type cand struct {
		key string
		t   *pacedTenant
		in  arbiter.Tenant
		id  string
	}
	byGPU := map[string][]cand{}
	for _, info := range ledger.Records() {
		if info.Library != nil && info.Library.ComputePeriodMS != nil {
			if *info.Library.ComputePeriodMS == 0 {
				continue // launch by launch: no periods to share
			}
			period = min(period, uint64(*info.Library.ComputePeriodMS)*1e6)
		}
		places := tenant.PlacesOf(stateDir, info.ID)
		for _, d := range info.Devices {
			if !d.Paced() {
				continue
			}
			key := info.ID + "/" + strconv.Itoa(d.Index)
			t := a.tenants[key]
			gpath := places.ShareFile()
			if t == nil || t.grantPath != gpath {
				m, err := arbiter.Map(gpath)
				if err != nil {
					continue // no grant file (another release's entry): its admission share holds
				}
				t = &pacedTenant{grant: m, grantPath: gpath, region: places.Region(), dev: d.Index}
				a.tenants[key] = t
			}
			uuid := d.GPU.UUID
			t.id, t.gpu, t.request, t.limit = info.ID, uuid, d.Request(), d.Compute
			t.seen = true
			byGPU[uuid] = append(byGPU[uuid], cand{key: key, t: t, id: info.ID,
				in: arbiter.Tenant{ID: key, Request: d.Request(), Limit: d.Compute, Explicit: d.ComputeRequest != nil, Rank: d.Priority.Rank()}})
		}
	}
	for key, t := range a.tenants {
		if !t.seen {
			t.grant.Close()
			delete(a.tenants, key)
		}
		t.seen = false
	}
	due := a.last == 0 || now-a.last >= period
	changed := false
	for _, cs := range byGPU {
		sort.Slice(cs, func(i, j int) bool { return cs[i].key < cs[j].key })
		reads := make([]arbiter.Reading, len(cs))
		oks := make([]bool, len(cs))
		flip := false
		for i, c := range cs {
			reads[i], oks[i] = readWant(a.regions[c.t.region], c.t.dev)
			if reads[i].Queue > now+period {
				reads[i].Queue = 0 // as the library: a queue end more than a period ahead is not believed
			}
			ok := oks[i]
			if ok && c.t.watch.Check(reads[i], now) {
				flip = true
			}
			switch {
			case ok && c.t.watch.Active():
				if c.t.demandSince == 0 {
					c.t.demandSince = now
				}
				c.t.activeAt = now
			case !ok || now-c.t.activeAt > period:
				c.t.demandSince = 0
			}
		}
		if !due && !flip {
			for _, c := range cs {
				c.t.grant.Stamp(now, int(period/1e6)) // still believed until the next arbitration
			}
			continue
		}
		changed = true
		ts := make([]arbiter.Tenant, len(cs))
		for i, c := range cs {
			in := c.in
			if oks[i] {
				in.Busy, in.Used = c.t.watch.Judge(reads[i], now, period)
			}
			ts[i] = in
		}
		for i, g := range arbiter.Arbitrate(ts) {
			c := cs[i]
			c.t.watch.Granted(ts[i].Busy, g.Share)
			c.t.last, c.t.granted = g, true
			c.t.grants = append(c.t.grants, grantAt{now, g.Share})
			c.t.grant.SetLive(c.t.dev, arbiter.Word(g.Share, g.Phase))
			c.t.grant.Stamp(now, int(period/1e6))
		}
	}
	if due {
		a.last = now
	}
	if changed || due {
		a.Grants = map[string]map[int]arbiter.Grant{}
		for _, t := range a.tenants {
			if !t.granted {
				continue
			}
			if a.Grants[t.id] == nil {
				a.Grants[t.id] = map[int]arbiter.Grant{}
			}
			a.Grants[t.id][t.dev] = t.last
		}
	}
}

// roster is the paced tenants for the order loop (order.go).
func (a *arbitration) roster() []orderMember {
	out := make([]orderMember, 0, len(a.tenants))
	for key, t := range a.tenants {
		out = append(out, orderMember{key: key, gpu: t.gpu, sharePath: t.grantPath, sharedDir: filepath.Dir(t.region), dev: t.dev, request: t.request, limit: t.limit})
	}
	return out
}

// close unmaps every grant file.
func (a *arbitration) close() {
	for _, t := range a.tenants {
		t.grant.Close()
	}
	a.tenants = nil
}

// judged is what enforcement holds each tenant to instead of its limit,
// by container id and GPU, in percent: on a GPU where a tenant whose region
// has shown work for the whole window gets less than its request - slack
// (shares: the policy's window averages from the driver's per-process
// samples, by container and GPU), every other tenant there is held to the
// largest grant it had over the window (an honest tenant's average never
// passes that; one that goes around its pacer is granted its request, not
// what it takes). Starvation is the node's own measure against the request,
// not the starved tenant's pacer waiting: a neighbour's kernels slow it on
// the device without its pacer ever waiting. The neighbours stay held for
// as long as the starved tenant's work goes on without a break. window: the
// policy's; now: CLOCK_MONOTONIC.
func (a *arbitration) judged(shares map[[2]string]float64, window uint64, slack int, now uint64) map[[2]string]int {
	starved := map[string]string{} // GPU -> the starved tenant's container
	for _, t := range a.tenants {
		if len(t.grants) > 0 && now-t.grants[0].at > window {
			k := 0
			for k < len(t.grants) && now-t.grants[k].at > window {
				k++
			}
			t.grants = append(t.grants[:0], t.grants[k:]...)
		}
		if t.demandSince == 0 || t.request <= 0 {
			continue
		}
		if sh, ok := shares[[2]string{t.id, t.gpu}]; ok && sh < float64(t.request-slack) && now-t.demandSince >= window {
			t.starvedIn = t.demandSince
		}
		if t.starvedIn == t.demandSince {
			starved[t.gpu] = t.id
		}
	}
	out := map[[2]string]int{}
	for _, t := range a.tenants {
		who, ok := starved[t.gpu]
		if !ok || who == t.id || len(t.grants) == 0 {
			continue
		}
		hi := 0
		for _, g := range t.grants {
			hi = max(hi, g.share)
		}
		out[[2]string{t.id, t.gpu}] = (hi + 99) / 100
	}
	return out
}
