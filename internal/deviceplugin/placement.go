package deviceplugin

import (
	"sort"
	"sync"
	"time"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
)

// pairWindow: how long after an allocation of one resource a preferred allocation
// of the other counts as the same container's. The kubelet makes a
// container's calls back to back (GetPreferredAllocation and Allocate of
// one resource, then of the other), so its partner comes within
// milliseconds; an allocation older than this is another container's.
const pairWindow = 5 * time.Second

// placer chooses the GPU of a preferred allocation. The kubelet asks for a
// container's two resources one after the other, in no fixed order, and a
// request carries neither the pod nor the other resource's size; so:
//
//   - the second resource of a container goes where its first went, if it
//     fits there: the first is the last allocation, if it is of the other
//     resource, made within pairWindow and not itself the second of a pair
//     (so the next container's first resource does not follow this one);
//   - the first goes by the policy, among the GPUs with enough of the
//     requested resource, preferring those that also have the other
//     resource's proportional share free (a container that asks x % of a
//     GPU's memory is assumed to want about x % of its cores, and the other
//     way round); binpack takes the fullest such GPU, spread the emptiest.
//
// What it knows of the other resource's free units is what the kubelet last
// offered of it, less what was allocated since; units freed meanwhile count
// as used until the kubelet asks for that resource again.
type placer struct {
	policy string
	now    func() time.Time

	mu    sync.Mutex
	free  map[string]map[string]int // resource → GPU UUID → free units, as last known
	last  lastAllocation
	total map[string]func(discover.GPU) int // resource → units per GPU
}

// lastAllocation is the most recent Allocate; paired when it was the second
// resource of a container (it completed a pair).
type lastAllocation struct {
	resource, gpu string
	at            time.Time
	paired        bool
}

// pairs reports whether an allocation of res now is the partner of l.
func (l lastAllocation) pairs(res string, now time.Time) bool {
	return l.gpu != "" && !l.paired && l.resource != res && now.Sub(l.at) <= pairWindow
}

func newPlacer(policy string, resources []resource, now func() time.Time) *placer {
	if policy == "" {
		policy = config.PlacementBinpack
	}
	p := &placer{policy: policy, now: now, free: map[string]map[string]int{}, total: map[string]func(discover.GPU) int{}}
	for _, r := range resources {
		p.total[r.name] = r.unitsOf
	}
	return p
}

// other is the resource that is not res.
func (p *placer) other(res string) string {
	for r := range p.total {
		if r != res {
			return r
		}
	}
	return ""
}

// freeOf is res's free units on g as last known (all of them if never seen).
func (p *placer) freeOf(res string, g discover.GPU) int {
	if m, ok := p.free[res]; ok {
		return m[g.UUID]
	}
	return p.total[res](g)
}

// offered records what the kubelet offers of res now (exact for res).
func (p *placer) offered(res string, avail map[string][]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for uuid, ids := range avail {
		m[uuid] = len(ids)
	}
	p.free[res] = m
}

// allocated records an Allocate of n units of res on GPU uuid (of gpus).
func (p *placer) allocated(res, uuid string, n int, gpus []discover.GPU) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.free[res]; !ok {
		m := map[string]int{}
		for _, g := range gpus {
			m[g.UUID] = p.total[res](g)
		}
		p.free[res] = m
	}
	p.free[res][uuid] = max(0, p.free[res][uuid]-n)
	now := p.now()
	p.last = lastAllocation{resource: res, gpu: uuid, at: now, paired: p.last.pairs(res, now)}
}

// partner returns the GPU of the container's other resource, if its allocation
// was the last one and is recent.
func (p *placer) partner(res string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.last.pairs(res, p.now()) {
		return "", false
	}
	return p.last.gpu, true
}

// order returns fits (GPUs with size units of res free) in the order the
// policy prefers them for a container's first resource.
func (p *placer) order(res string, size int, fits []discover.GPU) []discover.GPU {
	p.mu.Lock()
	defer p.mu.Unlock()
	oth := p.other(res)
	type cand struct {
		g     discover.GPU
		room  bool    // the other resource has its proportional share free
		usage float64 // used fraction of both resources, 0..2
	}
	cs := make([]cand, 0, len(fits))
	for _, g := range fits {
		c := cand{g: g, room: true}
		for _, r := range []string{res, oth} {
			if r == "" {
				continue
			}
			if tot := p.total[r](g); tot > 0 {
				c.usage += float64(tot-p.freeOf(r, g)) / float64(tot)
			}
		}
		if oth != "" {
			tot, otot := p.total[res](g), p.total[oth](g)
			want := 1
			if tot > 0 {
				want = max(1, (size*otot+tot-1)/tot)
			}
			c.room = p.freeOf(oth, g) >= want
		}
		cs = append(cs, c)
	}
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.room != b.room {
			return a.room
		}
		if a.usage != b.usage {
			if p.policy == config.PlacementSpread {
				return a.usage < b.usage
			}
			return a.usage > b.usage
		}
		return a.g.Index < b.g.Index
	})
	out := make([]discover.GPU, len(cs))
	for i, c := range cs {
		out[i] = c.g
	}
	return out
}
