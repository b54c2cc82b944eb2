package daemon

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/regionread"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/internal/tenantfile"
)

// The order loop (docs/design.md "The order inside the period"): between
// the rounds, per GPU with two or more paced tenants, it looks at each
// tenant's region every OrderTick while any of them has been active lately
// (else every OrderIdleTick), runs the pure policy (arbiter.Ordering) and
// writes each tenant's order words into its share file, which only the host
// writes. The round hands it the roster (who is paced where); the loop owns
// its own mappings and region descriptors, so a tenant's going (the round
// unmaps its grant file) never races a write here.

const (
	// OrderTick: how often the loop looks while a GPU's tenants are active.
	// A yield starts within this of the first launch of the tenant others
	// yield to; the bound, in force for seconds after, needs no look.
	OrderTick = 250 * time.Microsecond
	// OrderIdleTick: how often it looks while none of a GPU's tenants was
	// active within orderBusyFor: whoever wakes there first is alone.
	OrderIdleTick = 10 * time.Millisecond
	orderBusyFor  = 100 * time.Millisecond
	// orderWindow: the window over which a tenant's use is set against its
	// request (its due): about the default pacing period.
	orderWindow = 500 * time.Millisecond
	// orderReopen: how often a region is opened anew (a tenant may replace
	// the file; the descriptor would keep reading the old one).
	orderReopen = time.Second
)

// orderMember is one paced device on a GPU, as the round hands it over.
type orderMember struct {
	key, gpu  string
	sharePath string // the share file
	sharedDir string // the region's directory
	dev       int
	request   int // percent
	limit     int // percent
}

// orderTenant is a member as the loop follows it.
type orderTenant struct {
	orderMember
	share      *arbiter.Mapped
	region     *os.File // nil: none readable now
	openedAt   time.Time
	prevBusy   uint64
	prevAt     uint64
	lastActive uint64
	// activeSince: the first look of its present stretch of activity (one
	// with no gap of OrderWakeGap); 0 while never active
	activeSince uint64
	samples     []busyAt // over orderWindow, oldest first
	written     arbiter.Order
}

type busyAt struct{ at, busy uint64 }

// orderLoop is the loop's state; only its goroutine touches it, but for
// the roster, which the round offers through a channel of one.
type orderLoop struct {
	roster  chan []orderMember
	tenants map[string]*orderTenant
	buf     []byte
	mono    func() uint64
	// Looks counts the looks taken (tests and the CPU figure).
	looks uint64
}

func newOrderLoop(mono func() uint64) *orderLoop {
	return &orderLoop{roster: make(chan []orderMember, 1), tenants: map[string]*orderTenant{}, buf: make([]byte, contract.RegionHeaderSize), mono: mono}
}

// offer hands the round's roster to the loop, replacing one not yet taken.
func (l *orderLoop) offer(ms []orderMember) {
	for {
		select {
		case l.roster <- ms:
			return
		default:
		}
		select {
		case <-l.roster:
		default:
		}
	}
}

// run looks until ctx ends, then closes what it opened. Deadlines it wrote
// end within a second (the library believes none further).
func (l *orderLoop) run(ctx context.Context) {
	defer l.close()
	next := OrderIdleTick
	t := time.NewTimer(next)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ms := <-l.roster:
			l.take(ms)
		case <-t.C:
		}
		next = l.look(l.mono())
		t.Reset(next)
	}
}

// take reconciles the loop's tenants with the roster ms: a tenant's share
// file is mapped once (a path that changes is mapped anew); one that left
// is unmapped.
func (l *orderLoop) take(ms []orderMember) {
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.key] = true
		t := l.tenants[m.key]
		if t != nil && t.sharePath != m.sharePath {
			t.closeFiles()
			t = nil
		}
		if t == nil {
			sh, err := arbiter.Map(m.sharePath)
			if err != nil {
				continue // no share file: the admission's share and no order hold
			}
			t = &orderTenant{share: sh}
			l.tenants[m.key] = t
		}
		t.orderMember = m
	}
	for k, t := range l.tenants {
		if !seen[k] {
			t.closeFiles()
			delete(l.tenants, k)
		}
	}
}

func (t *orderTenant) closeFiles() {
	if t.region != nil {
		t.region.Close()
		t.region = nil
	}
	if t.share != nil {
		t.share.Close()
		t.share = nil
	}
}

func (l *orderLoop) close() {
	for k, t := range l.tenants {
		t.share.SetOrder(t.dev, arbiter.Order{})
		t.closeFiles()
		delete(l.tenants, k)
	}
}

// Offsets of the region fields the loop reads, from the generated layout.
var (
	offVersion  = int(unsafe.Offsetof(contract.RegionHeader{}.Version))
	offCompute  = int(unsafe.Offsetof(contract.RegionHeader{}.Compute))
	offBusy     = int(unsafe.Offsetof(contract.RegionCompute{}.BusyNs))
	sizeCompute = int(unsafe.Sizeof(contract.RegionCompute{}))
	offQueueEnd = int(unsafe.Offsetof(contract.RegionHeader{}.QueueEnd))
	offWant     = int(unsafe.Offsetof(contract.RegionHeader{}.WantNs))
)

// readRegion reads t's busy ns, queue end and last wait from its region:
// one pread of the header on a descriptor opened (as the round opens
// regions: tenantfile, no link, a regular file) at most orderReopen ago.
// ok false: no region of a layout that has these fields.
func (l *orderLoop) readRegion(t *orderTenant, wall time.Time) (busy, queue, want uint64, ok bool) {
	if t.region == nil || wall.Sub(t.openedAt) >= orderReopen {
		if t.region != nil {
			t.region.Close()
			t.region = nil
		}
		f, err := tenantfile.Within(filepath.Join(t.sharedDir, contract.RegionFile), tenantfile.Deadline, func() (*os.File, error) {
			f, _, err := tenantfile.Open(t.sharedDir, contract.RegionFile, regionread.MaxRegionBytes)
			return f, err
		})
		t.openedAt = wall
		if err != nil {
			return 0, 0, 0, false
		}
		t.region = f
	}
	// a regular file on the tenant's tmpfs: pread answers at once; one
	// truncated comes back short
	n, err := unix.Pread(int(t.region.Fd()), l.buf, 0)
	if err != nil || n < len(l.buf) {
		return 0, 0, 0, false
	}
	le := binary.LittleEndian
	if le.Uint64(l.buf) != contract.RegionMagic {
		return 0, 0, 0, false
	}
	if v := le.Uint32(l.buf[offVersion:]); v < 4 || v > contract.RegionVersion || t.dev < 0 || t.dev >= contract.RegionDevices {
		return 0, 0, 0, false
	}
	busy = le.Uint64(l.buf[offCompute+t.dev*sizeCompute+offBusy:])
	if q := int64(le.Uint64(l.buf[offQueueEnd+8*t.dev:])); q > 0 {
		queue = uint64(q)
	}
	return busy, queue, le.Uint64(l.buf[offWant+8*t.dev:]), true
}

// rankOf is the policy's rank of a share file's priority word; a word this
// vgpu does not know is normal.
func rankOf(w uint64) int {
	switch w {
	case contract.PriorityHigh:
		return tenant.High.Rank()
	case contract.PriorityLow:
		return tenant.Low.Rank()
	}
	return tenant.Normal.Rank()
}

// look reads every tenant on a GPU shared by two or more, orders each such
// GPU at now (CLOCK_MONOTONIC ns) and writes the words that changed; it
// returns how long until the next look.
func (l *orderLoop) look(now uint64) time.Duration {
	l.looks++
	wall := time.Now()
	byGPU := map[string][]*orderTenant{}
	for _, t := range l.tenants {
		byGPU[t.gpu] = append(byGPU[t.gpu], t)
	}
	next := OrderIdleTick
	for _, ts := range byGPU {
		if len(ts) < 2 {
			for _, t := range ts { // alone: nothing goes before it
				l.write(t, arbiter.Order{})
			}
			continue
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].key < ts[j].key })
		in := make([]arbiter.OrderTenant, len(ts))
		for i, t := range ts {
			in[i] = l.observe(t, now, wall)
			if t.lastActive != 0 && now-t.lastActive < uint64(orderBusyFor) {
				next = OrderTick
			}
		}
		for i, o := range arbiter.Ordering(in, now) {
			l.write(ts[i], o)
		}
	}
	return next
}

// observe reads t's region at now and is t as the policy sees it: active
// when its region shows queued work running past now or device time since
// the last look; its use over the window from its busy ns.
func (l *orderLoop) observe(t *orderTenant, now uint64, wall time.Time) arbiter.OrderTenant {
	in := arbiter.OrderTenant{Rank: rankOf(t.share.Priority(t.dev)), Request: t.request, Limit: t.limit}
	busy, queue, want, ok := l.readRegion(t, wall)
	if !ok {
		t.samples, t.prevAt = t.samples[:0], 0
		in.LastActive, in.ActiveSince = t.lastActive, t.activeSince
		return in
	}
	if want <= now { // a wait ahead of the clock is not believed
		in.LastWaited = want
	}
	if queue > now+uint64(orderWindow) {
		queue = 0 // as the library: a queue end far ahead is not believed
	}
	// not a launch that waited for its pacer (want): that work is not on
	// the device, and holding the others back for it would leave the
	// device idle
	if t.prevAt != 0 && (queue > now || busy != t.prevBusy) {
		if t.lastActive == 0 || now-t.lastActive >= arbiter.OrderWakeGap {
			t.activeSince = now
		}
		t.lastActive = now
	}
	t.prevAt, t.prevBusy = now, busy
	// the use over the window: a sample every sixteenth of it
	if n := len(t.samples); n == 0 || now-t.samples[n-1].at >= uint64(orderWindow)/16 || busy < t.samples[n-1].busy {
		if n > 0 && busy < t.samples[n-1].busy {
			t.samples = t.samples[:0] // a region scribbled back: start over
		}
		t.samples = append(t.samples, busyAt{now, busy})
	}
	k := 0
	for k < len(t.samples)-1 && now-t.samples[k+1].at >= uint64(orderWindow) {
		k++
	}
	t.samples = t.samples[k:]
	if s := t.samples[0]; now > s.at && busy >= s.busy {
		in.Use = int(min(busy-s.busy, now-s.at) * contract.ShareFull / (now - s.at))
	}
	in.LastActive, in.ActiveSince = t.lastActive, t.activeSince
	return in
}

// write stores t's order when it changed.
func (l *orderLoop) write(t *orderTenant, o arbiter.Order) {
	if o == t.written {
		return
	}
	t.share.SetOrder(t.dev, o)
	t.written = o
}
