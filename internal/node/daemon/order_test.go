package daemon

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/contract"
)

// orderFixture is one tenant's files for the order loop: a share file the
// host wrote (its priority word set) and a region the test writes as the
// library (or a lying tenant) would.
type orderFixture struct {
	member orderMember
	share  string
}

func newOrderFixture(t *testing.T, key string, priority uint64, request int) orderFixture {
	t.Helper()
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	share := filepath.Join(dir, "grant")
	b, err := arbiter.Encode([]uint64{arbiter.Word(request*100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(share, b, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := arbiter.Map(share)
	if err != nil {
		t.Fatal(err)
	}
	m.SetPriority(0, priority)
	m.Close()
	f := orderFixture{member: orderMember{key: key, gpu: "GPU-0", sharePath: share, sharedDir: shared, dev: 0, request: request}, share: share}
	f.region(t, 0, 0, 0)
	return f
}

// region writes the tenant's region: cumulative busy ns, queue end, last
// wait (CLOCK_MONOTONIC ns).
func (f orderFixture) region(t *testing.T, busy uint64, queue int64, want uint64) {
	t.Helper()
	h := contract.NewRegionHeader(contract.RegionVersion)
	h.Compute[0].BusyNs, h.QueueEnd[0], h.WantNs[0] = busy, queue, want
	// in place, as the library writes it: the loop keeps its descriptor
	fd, err := os.OpenFile(filepath.Join(f.member.sharedDir, contract.RegionFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt(contract.EncodeRegion(h, nil)[:contract.RegionHeaderSize], 0); err != nil {
		t.Fatal(err)
	}
}

func (f orderFixture) order(t *testing.T) arbiter.Order {
	t.Helper()
	m, err := arbiter.Map(f.share)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return m.Order(0)
}

// The loop on two tenants of one GPU, a high one and a low one, with an
// injected clock: the low one flooding alone is told nothing; once the
// high one's region shows queued work the low one's share file says yield
// and bound (and the high one's nothing); a region in which the low one
// claims anything does not change what it is told, nor make it high; when
// the high one has been idle past the hold the yield ends and the bound
// stays; a tenant alone on its GPU is told nothing; the loop looks fast
// only while someone is active.
func TestOrderLoopWritesTheOrder(t *testing.T) {
	// request 0: never below its due, so only its priority puts it first
	hi := newOrderFixture(t, "hi/0", contract.PriorityHigh, 0)
	lo := newOrderFixture(t, "lo/0", contract.PriorityLow, 30)
	now := uint64(1_000_000_000_000)
	l := newOrderLoop(func() uint64 { return now })
	defer l.close()
	l.take([]orderMember{hi.member, lo.member})
	l.look(now) // the first look: a baseline
	step := func(d time.Duration) time.Duration { now += uint64(d); return l.look(now) }

	lo.region(t, 1e9, int64(now+50e6), 0) // flooding: 50 ms queued
	if next := step(OrderTick); next != OrderTick {
		t.Errorf("a tenant active: next look in %v, want %v", next, OrderTick)
	}
	if o := lo.order(t); o != (arbiter.Order{}) {
		t.Errorf("low flooding alone: told %+v, want nothing", o)
	}
	hi.region(t, 0, int64(now+2e6), 0) // the high one's request arrives
	step(OrderTick)
	o := lo.order(t)
	if o.YieldUntil <= now || o.BoundUntil <= now || o.BoundNs != arbiter.OrderBoundNs {
		t.Errorf("high active: the low one is told %+v, want a yield and the bound", o)
	}
	if o := hi.order(t); o != (arbiter.Order{}) {
		t.Errorf("high active: the high one is told %+v, want nothing", o)
	}
	// the low one writes its region to look idle, or busy: what it is told
	// comes from the high one's activity and the share files' priorities
	for _, claim := range []struct{ busy, want uint64 }{{0, 0}, {5e9, now}} {
		lo.region(t, claim.busy, 0, claim.want)
		step(OrderTick)
		if o := lo.order(t); o.YieldUntil <= now {
			t.Errorf("the low one claiming busy %d want %d: told %+v, want still a yield", claim.busy, claim.want, o)
		}
		if o := hi.order(t); o != (arbiter.Order{}) {
			t.Errorf("the low one claiming busy %d want %d: the high one is told %+v", claim.busy, claim.want, o)
		}
	}
	// the high one done: its queue ended; past the hold the yield is over
	hi.region(t, 2e6, int64(now), 0)
	step(arbiter.OrderYieldHold * time.Nanosecond)
	step(arbiter.OrderYieldHold * time.Nanosecond)
	o = lo.order(t)
	if o.YieldUntil > now || o.BoundUntil <= now || o.BoundNs != arbiter.OrderBoundNs {
		t.Errorf("high idle past the hold: the low one is told %+v, want no yield and the bound", o)
	}
	// the high one goes: the low one alone is told nothing
	l.take([]orderMember{lo.member})
	step(OrderTick)
	if o := lo.order(t); o != (arbiter.Order{}) {
		t.Errorf("alone on its GPU: told %+v, want nothing", o)
	}
	lo.region(t, 5e9, 0, 0)
	step(OrderTick)
	step(orderBusyFor)
	if next := step(OrderTick); next != OrderIdleTick {
		t.Errorf("nobody active: next look in %v, want %v", next, OrderIdleTick)
	}
}

// The loop gives a tenant of limit 100 a free run while its neighbour is
// idle past the yield hold, ends it at the first look that finds the
// neighbour active, and gives none at a limit below 100.
func TestOrderLoopFreeRun(t *testing.T) {
	a := newOrderFixture(t, "a/0", contract.PriorityNormal, 50)
	b := newOrderFixture(t, "b/0", contract.PriorityNormal, 50)
	a.member.limit, b.member.limit = 100, 100
	now := uint64(1_000_000_000_000)
	l := newOrderLoop(func() uint64 { return now })
	defer l.close()
	l.take([]orderMember{a.member, b.member})
	l.look(now)
	step := func(d time.Duration) { now += uint64(d); l.look(now) }

	b.region(t, 1e9, int64(now+1e6), 0) // b active
	step(OrderTick)
	a.region(t, 2e9, int64(now+50e6), 0) // a floods
	step(OrderTick)
	if o := a.order(t); o.FreeUntil > now {
		t.Errorf("the neighbour active: a is told %+v, want no free run", o)
	}
	step(arbiter.OrderYieldHold * time.Nanosecond) // b's queue ended, its busy unchanged: idle
	a.region(t, 3e9, int64(now+50e6), 0)
	step(OrderTick)
	o := a.order(t)
	// the run's bound is the library's: none in the words (there it held
	// the launches a's own slot lets start too)
	if o.FreeUntil <= now || o.FreeUntil > now+arbiter.OrderFreeAhead || o.BoundUntil != 0 {
		t.Errorf("the neighbour idle past the hold: a is told %+v, want a free run and no bound", o)
	}
	b.region(t, 1e9, 0, now) // b idle, its launch waiting for its pacer
	step(OrderTick)
	if o := a.order(t); o.FreeUntil > now {
		t.Errorf("the neighbour's launch waits: a is told %+v, want the free run ended", o)
	}
	step(arbiter.OrderYieldHold * time.Nanosecond)
	a.region(t, 3e9+1, int64(now+50e6), 0)
	step(OrderTick)
	if o := a.order(t); o.FreeUntil <= now {
		t.Errorf("the neighbour's wait past the hold: a is told %+v, want a free run", o)
	}
	b.region(t, 1e9+1, int64(now+1e6), 0) // b wakes
	step(OrderTick)
	if o := a.order(t); o.FreeUntil > now {
		t.Errorf("the neighbour woke: a is told %+v, want the free run ended", o)
	}
	// at limit 99: never free
	a.member.limit = 99
	l.take([]orderMember{a.member, b.member})
	step(10 * arbiter.OrderYieldHold * time.Nanosecond)
	a.region(t, 4e9, int64(now+50e6), 0)
	step(OrderTick)
	if o := a.order(t); o.FreeUntil > now {
		t.Errorf("limit 99, the neighbour idle: a is told %+v, want no free run", o)
	}
}

// The loop's CPU on this machine: looks at two tenants, each one pread of
// the region header and the policy. Logged (the figure, not a bound: the
// machine is shared); it fails only far above what a look should cost.
func TestOrderLoopCPU(t *testing.T) {
	hi := newOrderFixture(t, "hi/0", contract.PriorityHigh, 20)
	lo := newOrderFixture(t, "lo/0", contract.PriorityLow, 30)
	now := uint64(1_000_000_000_000)
	l := newOrderLoop(func() uint64 { return now })
	defer l.close()
	l.take([]orderMember{hi.member, lo.member})
	lo.region(t, 1e9, int64(now+50e9), now)
	var r0, r1 syscall.Rusage
	const looks = 20000
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for i := 0; i < looks; i++ {
		now += uint64(OrderTick)
		l.look(now)
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := time.Duration(r1.Utime.Nano()-r0.Utime.Nano()) + time.Duration(r1.Stime.Nano()-r0.Stime.Nano())
	per := cpu / looks
	t.Logf("order loop: %v CPU a look at two tenants: %.1f%% of a core at one look every %v", per, 100*float64(per)/float64(OrderTick), OrderTick)
	if per > 200*time.Microsecond {
		t.Errorf("a look costs %v of CPU", per)
	}
}
