package daemon

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// The compute arbitration (internal/arbiter), kept apart from enforcement:
// once per pacing period it reads what each paced tenant did (its region:
// the launches' device time, and when a launch last waited for the pacer),
// computes each GPU's grants and publishes them in the tenants' grant files,
// which only the host writes. The library believes a grant for
// contract.GrantStaleMS; without this loop every tenant is held to its
// admission share (its request).

// tenant is one paced device of one state entry, between rounds.
type tenant struct {
	id, gpu   string
	request   int       // percent
	busySince uint64    // CLOCK_MONOTONIC ns since when it has been busy without a break; 0: not busy
	grants    []grantAt // its grants over the last enforcement window
	grant     *arbiter.Mapped
	grantPath string
	region    string // the region file
	dev       int
	busyNS    uint64 // the region's cumulative busy time at the last round
	at        uint64 // CLOCK_MONOTONIC ns of the last round
	share     int    // the live share published last
	seen      bool
}

type arbitration struct {
	tenants map[string]*tenant // by entry id + "/" + device index
	last    uint64             // CLOCK_MONOTONIC ns of the last arbitration
	// Grants is the last round's result, for tests and metrics: by entry id,
	// per device index.
	Grants map[string]map[int]arbiter.Grant
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

// readWant reads, from the region at path, device dev's cumulative busy ns
// and when a launch last waited; ok false for a region this vgpu does not
// arbitrate (another layout: a library of another release).
func readWant(path string, dev int) (busy, want uint64, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	b := make([]byte, contract.RegionHeaderSize)
	if n, err := f.ReadAt(b, 0); n < len(b) && err != nil {
		return 0, 0, false
	}
	h, ok := contract.DecodeRegionHeader(b)
	if !ok || h.Magic != contract.RegionMagic || h.Version != contract.RegionVersion || dev < 0 || dev >= contract.RegionDevices {
		return 0, 0, false
	}
	return h.Compute[dev].BusyNs, h.WantNs[dev], true
}

// arbitrate runs one arbitration when a pacing period has passed since the
// last (now: CLOCK_MONOTONIC ns). Entries it cannot read are left to their
// admission shares.
func (a *arbitration) arbitrate(stateDir string, now uint64) {
	if a.tenants == nil {
		a.tenants = map[string]*tenant{}
	}
	period := uint64(contract.DefaultPeriodMS) * 1e6
	entries, _ := state.List(stateDir)
	type cand struct {
		key string
		t   *tenant
		in  arbiter.Tenant
		id  string
	}
	byGPU := map[string][]cand{}
	for _, e := range entries {
		info := e.Info
		if e.Err != nil || len(info.PIDs) > 0 && info.PIDs[0] > 0 && unix.Kill(info.PIDs[0], 0) == unix.ESRCH {
			continue
		}
		q := info.Quota()
		if q.ComputePeriodMS != nil {
			if *q.ComputePeriodMS == 0 {
				continue // launch by launch: no periods to share
			}
			period = min(period, uint64(*q.ComputePeriodMS)*1e6)
		}
		rdir, gpath := arbiter.Paths(stateDir, info.ID, q.SharedDir)
		for _, d := range q.Devices {
			if !d.Paced() {
				continue
			}
			key := info.ID + "/" + strconv.Itoa(d.Index)
			t := a.tenants[key]
			if t == nil || t.grantPath != gpath {
				m, err := arbiter.Map(gpath)
				if err != nil {
					continue // no grant file (another release's entry): its admission share holds
				}
				t = &tenant{grant: m, grantPath: gpath, region: filepath.Join(rdir, contract.RegionFile), dev: d.Index}
				a.tenants[key] = t
			}
			t.id, t.gpu, t.request = info.ID, d.UUID, d.Request()
			t.seen = true
			byGPU[d.UUID] = append(byGPU[d.UUID], cand{key: key, t: t, id: info.ID,
				in: arbiter.Tenant{ID: key, Request: d.Request(), Limit: d.Compute, Explicit: d.ComputeRequest != nil}})
		}
	}
	for key, t := range a.tenants {
		if !t.seen {
			t.grant.Close()
			delete(a.tenants, key)
		}
		t.seen = false
	}
	if a.last != 0 && now-a.last < period {
		for _, cs := range byGPU {
			for _, c := range cs {
				c.t.grant.Stamp(now, int(period/1e6)) // still believed until the next arbitration
			}
		}
		return
	}
	a.Grants = map[string]map[int]arbiter.Grant{}
	for _, cs := range byGPU {
		sort.Slice(cs, func(i, j int) bool { return cs[i].key < cs[j].key })
		ts := make([]arbiter.Tenant, len(cs))
		for i, c := range cs {
			busy, want, ok := readWant(c.t.region, c.t.dev)
			in := c.in
			if ok && c.t.at != 0 && now > c.t.at && busy >= c.t.busyNS {
				used := int((busy - c.t.busyNS) * contract.GrantFull / (now - c.t.at))
				in.Used = used / 100 * 100 // whole percent: grants move only when use does
				in.Busy = want >= c.t.at || (c.t.share > 0 && used >= c.t.share*9/10)
			} else if ok {
				in.Busy = want+period >= now
			}
			c.t.busyNS, c.t.at = busy, now
			if !in.Busy {
				c.t.busySince = 0
			} else if c.t.busySince == 0 {
				c.t.busySince = now
			}
			ts[i] = in
		}
		for i, g := range arbiter.Arbitrate(ts) {
			c := cs[i]
			c.t.share = g.Share
			c.t.grants = append(c.t.grants, grantAt{now, g.Share})
			c.t.grant.SetLive(c.t.dev, arbiter.Word(g.Share, g.Phase))
			c.t.grant.Stamp(now, int(period/1e6))
			if a.Grants[c.id] == nil {
				a.Grants[c.id] = map[int]arbiter.Grant{}
			}
			a.Grants[c.id][c.t.dev] = g
		}
	}
	a.last = now
}

// close unmaps every grant file.
func (a *arbitration) close() {
	for _, t := range a.tenants {
		t.grant.Close()
	}
	a.tenants = nil
}

// judged is what enforcement holds each tenant to instead of its limit,
// by container id and GPU, in percent: on a GPU where a tenant that has been
// busy for the whole window gets less than its request - slack (shares: the
// policy's window averages, by container and GPU), every other tenant there
// is held to the largest grant it had over the window (an honest tenant's
// average never passes that). window: the policy's; now: CLOCK_MONOTONIC.
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
		if t.busySince != 0 && now-t.busySince >= window && t.request > 0 {
			if sh, ok := shares[[2]string{t.id, t.gpu}]; ok && sh < float64(t.request-slack) {
				starved[t.gpu] = t.id
			}
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
