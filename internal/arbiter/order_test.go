package arbiter

import "testing"

const (
	rankLow, rankNormal, rankHigh = 0, 1, 2
	ms                            = uint64(1_000_000)
)

// at is a clock value well past 0 (0 means never).
func at(msAfter uint64) uint64 { return 1_000_000*ms + msAfter*ms }

func yields(o Order, now uint64) bool { return o.YieldUntil > now }

// bounded: the bound holds at now.
func bounded(o Order, now uint64) bool { return o.BoundUntil > now && o.BoundNs == OrderBoundNs }

// A tenant alone is never told to yield nor bounded, active or not.
func TestOrderHighAlone(t *testing.T) {
	now := at(0)
	for _, last := range []uint64{0, now, now - 10*ms} {
		o := Ordering([]OrderTenant{{Rank: rankHigh, Request: 30, LastActive: last}}, now)
		if o[0] != (Order{}) {
			t.Errorf("high alone, last active %d: %+v, want no order", last, o[0])
		}
	}
}

// High and low: while the high one is active the low one yields (and not
// the other way); for OrderYieldHold after it was last active it still
// yields; after that it no longer yields but stays bounded until
// OrderBoundHold; then free. A high one never active orders nothing.
func TestOrderHighAndLow(t *testing.T) {
	start := at(0)
	hi := OrderTenant{Rank: rankHigh, Request: 20, LastActive: start}
	lo := OrderTenant{Rank: rankLow, Request: 30, Use: 9000, LastActive: start}
	for _, c := range []struct {
		name         string
		now          uint64
		yield, bound bool
	}{
		{"high active now", start, true, true},
		{"within the yield hold", start + OrderYieldHold - 1, true, true},
		{"past the yield hold", start + OrderYieldHold, false, true},
		{"a second later", start + 1000*ms, false, true},
		{"just before the bound hold ends", start + OrderBoundHold - 1, false, true},
		{"past the bound hold", start + OrderBoundHold, false, false},
	} {
		o := Ordering([]OrderTenant{hi, lo}, c.now)
		if o[0] != (Order{}) {
			t.Errorf("%s: the high tenant is told %+v, want nothing", c.name, o[0])
		}
		if yields(o[1], c.now) != c.yield || bounded(o[1], c.now) != c.bound {
			t.Errorf("%s: the low tenant is told %+v: yields %v bounded %v, want %v %v", c.name, o[1], yields(o[1], c.now), bounded(o[1], c.now), c.yield, c.bound)
		}
		if o[1].YieldUntil > c.now+orderAhead || o[1].BoundUntil > c.now+orderAhead {
			t.Errorf("%s: deadlines %+v further than %d ns ahead", c.name, o[1], orderAhead)
		}
	}
	never := Ordering([]OrderTenant{{Rank: rankHigh, Request: 20}, lo}, start)
	if never[1] != (Order{}) {
		t.Errorf("a high tenant never active: the low one is told %+v", never[1])
	}
}

// High and low, the low one with a request: the order still tells it to
// yield (the library lets it start work while it used less than its
// request this period); the arbitration's shares do not depend on
// priorities (the order only says who goes first inside the period).
func TestOrderHighAndLowWithRequest(t *testing.T) {
	now := at(0)
	o := Ordering([]OrderTenant{{Rank: rankHigh, Request: 50, Use: 6000, LastActive: now}, {Rank: rankLow, Request: 30, Use: 3000, LastActive: now}}, now)
	if !yields(o[1], now) || !bounded(o[1], now) || o[0] != (Order{}) {
		t.Errorf("high and low with a request, both active: %+v", o)
	}
}

// Two highs beside a low: neither high yields to the other (both at or
// above their due), the low one yields to both, until the later one's
// hold.
func TestOrderTwoHighs(t *testing.T) {
	now := at(0)
	ts := []OrderTenant{
		{Rank: rankHigh, Request: 30, Use: 5000, LastActive: now},
		{Rank: rankHigh, Request: 30, Use: 4000, LastActive: now - ms},
		{Rank: rankLow, Request: 10, Use: 1000, LastActive: now},
	}
	o := Ordering(ts, now)
	if o[0] != (Order{}) || o[1] != (Order{}) {
		t.Errorf("two highs at their due order each other: %+v %+v", o[0], o[1])
	}
	if o[2].YieldUntil != now+OrderYieldHold || !bounded(o[2], now) {
		t.Errorf("the low one beside two highs: %+v, want a yield until the later one's hold", o[2])
	}
}

// A high tenant that never idles: the low one is told to yield at every
// look, and the yield never ends while the high one is active (its
// request is the library's to keep: the grant says it starts work below it).
func TestOrderHighNeverIdles(t *testing.T) {
	start := at(0)
	for k := uint64(0); k < 4000; k++ { // 1 s of looks every 250 us
		now := start + k*250_000
		o := Ordering([]OrderTenant{{Rank: rankHigh, Request: 60, Use: 10000, LastActive: now}, {Rank: rankLow, Request: 40, Use: 4000, LastActive: now}}, now)
		if o[1].YieldUntil < now+OrderYieldHold || !bounded(o[1], now) {
			t.Fatalf("look %d: the low one is told %+v beside a high one that never idles", k, o[1])
		}
	}
}

// Wake and sleep: a low tenant flooding alone is free; a high one wakes:
// from that look the low one yields; the high one sleeps: the low one stops
// yielding after the hold, and its bound lapses after the bound hold.
func TestOrderWakeAndSleep(t *testing.T) {
	start := at(0)
	hiLast := uint64(0)
	for k := uint64(0); k < 800; k++ { // every 10 ms
		now := start + k*10*ms
		awake := k >= 100 && k < 200
		if awake {
			hiLast = now
		}
		o := Ordering([]OrderTenant{{Rank: rankHigh, Request: 10, Use: 500, LastActive: hiLast}, {Rank: rankLow, Request: 10, Use: 9000, LastActive: now}}, now)
		wantYield := awake
		wantBound := k >= 100 && now < hiLast+OrderBoundHold
		if yields(o[1], now) != wantYield || bounded(o[1], now) != wantBound {
			t.Fatalf("at %d ms (high awake %v, last active %d ms): low told %+v, want yield %v bound %v",
				k*10, awake, (hiLast-start)/ms, o[1], wantYield, wantBound)
		}
	}
}

// Equal priority: a tenant below its due that is waking (active, within
// OrderWakeFor of the start of its stretch of activity) makes a busy
// neighbour (at or above its due) yield and be bounded; once it has had its
// due over the window, or has been active a window, it does not; two below
// their due leave each other alone; a request-0 tenant never goes first.
func TestOrderEqualPriorityWake(t *testing.T) {
	now := at(0)
	busy := OrderTenant{Rank: rankNormal, Request: 50, Use: 9000, LastActive: now}
	for _, c := range []struct {
		name  string
		waker OrderTenant
		yield bool
	}{
		{"wakes below its due", OrderTenant{Rank: rankNormal, Request: 50, Use: 200, LastActive: now, ActiveSince: now}, true},
		{"just below its due", OrderTenant{Rank: rankNormal, Request: 50, Use: 4999, LastActive: now, ActiveSince: now}, true},
		{"has had its due", OrderTenant{Rank: rankNormal, Request: 50, Use: 5000, LastActive: now, ActiveSince: now}, false},
		{"asleep past the hold", OrderTenant{Rank: rankNormal, Request: 50, Use: 0, LastActive: now - OrderYieldHold, ActiveSince: now - OrderYieldHold}, false},
		{"request 0", OrderTenant{Rank: rankNormal, Request: 0, Use: 0, LastActive: now, ActiveSince: now}, false},
		// busy all the time: the window slides it under its due by turns
		// with its neighbour, and yielding by turns held a server's bursts
		{"still waking", OrderTenant{Rank: rankNormal, Request: 50, Use: 4999, LastActive: now, ActiveSince: now - OrderWakeFor + 1}, true},
		{"active since a window", OrderTenant{Rank: rankNormal, Request: 50, Use: 4999, LastActive: now, ActiveSince: now - OrderWakeFor}, false},
		{"active since a window, at four fifths of its due", OrderTenant{Rank: rankNormal, Request: 50, Use: 4000, LastActive: now, ActiveSince: now - OrderWakeFor}, false},
		// a light tenant's frequent requests make one long stretch: far
		// below its due it still goes first
		{"active since a window, far below its due", OrderTenant{Rank: rankNormal, Request: 50, Use: 3999, LastActive: now, ActiveSince: now - OrderWakeFor}, true},
		{"never seen starting, far below its due", OrderTenant{Rank: rankNormal, Request: 50, Use: 200, LastActive: now}, true},
		{"never seen starting", OrderTenant{Rank: rankNormal, Request: 50, Use: 4000, LastActive: now}, false},
	} {
		o := Ordering([]OrderTenant{busy, c.waker}, now)
		if yields(o[0], now) != c.yield {
			t.Errorf("%s: the busy one is told %+v, want yield %v", c.name, o[0], c.yield)
		}
		if o[1] != (Order{}) {
			t.Errorf("%s: the waking one is told %+v, want nothing", c.name, o[1])
		}
	}
	both := Ordering([]OrderTenant{{Rank: rankNormal, Request: 50, Use: 100, LastActive: now, ActiveSince: now}, {Rank: rankNormal, Request: 50, Use: 300, LastActive: now, ActiveSince: now}}, now)
	if both[0] != (Order{}) || both[1] != (Order{}) {
		t.Errorf("two below their due: %+v", both)
	}
	// a normal tenant below its due does not make a high one yield
	o := Ordering([]OrderTenant{{Rank: rankHigh, Request: 10, Use: 9000, LastActive: now}, {Rank: rankNormal, Request: 50, Use: 0, LastActive: now}}, now)
	if o[0] != (Order{}) {
		t.Errorf("a high one beside a waking normal one is told %+v", o[0])
	}
	if !yields(o[1], now) {
		t.Errorf("a waking normal one beside an active high one is told %+v, want a yield", o[1])
	}
}

// A clock value read before a tenant's last activity (a look that raced a
// newer one) orders nothing from it rather than a deadline far ahead.
func TestOrderLastActiveAhead(t *testing.T) {
	now := at(0)
	o := Ordering([]OrderTenant{{Rank: rankHigh, LastActive: now + 10*OrderBoundHold}, {Rank: rankLow, Use: 100, LastActive: now}}, now)
	if o[1] != (Order{}) {
		t.Errorf("high last active ahead of now: the low one is told %+v", o[1])
	}
}

func runsFree(o Order, now uint64) bool { return o.FreeUntil > now }

// A tenant of limit 100 runs free while no neighbour was active or waiting
// within OrderYieldHold, whatever the ranks; not while a neighbour is
// active or waits, and never at a limit below 100. The run itself puts no
// bound in the order words (the library bounds what the run starts): there
// it held the tenant's own launches too.
func TestOrderFreeRun(t *testing.T) {
	start := at(0)
	a := OrderTenant{Rank: rankNormal, Request: 50, Limit: 100, Use: 7000}
	for _, c := range []struct {
		name        string
		bLast, now  uint64
		bLimit      int
		free, bound bool
	}{
		// below its due: it goes first (TestOrderEqualPriorityWake)
		{"the neighbour active now", start, start, 100, false, true},
		{"the neighbour within the yield hold", start, start + OrderYieldHold - 1, 100, false, true},
		{"the neighbour idle past the yield hold", start, start + OrderYieldHold, 100, true, true},
		{"the neighbour idle past the bound hold", start, start + OrderBoundHold, 100, true, false},
		{"the neighbour never active", 0, start, 100, true, false},
	} {
		a.LastActive = c.now // busy throughout
		b := OrderTenant{Rank: rankNormal, Request: 50, Limit: c.bLimit, LastActive: c.bLast, ActiveSince: c.bLast}
		o := Ordering([]OrderTenant{a, b}, c.now)
		if runsFree(o[0], c.now) != c.free || bounded(o[0], c.now) != c.bound {
			t.Errorf("%s: the busy tenant is told %+v: free %v bounded %v, want %v %v", c.name, o[0], runsFree(o[0], c.now), bounded(o[0], c.now), c.free, c.bound)
		}
		if o[0].FreeUntil > c.now+OrderFreeAhead || o[0].BoundUntil > c.now+orderAhead {
			t.Errorf("%s: deadlines %+v further ahead than %d / %d ns", c.name, o[0], OrderFreeAhead, orderAhead)
		}
		if runsFree(o[1], c.now) {
			t.Errorf("%s: the idle neighbour runs free beside an active tenant: %+v", c.name, o[1])
		}
	}
	// a neighbour with nothing on the device whose launches wait (for its
	// pacer or the order) wants it: no free run beside it
	now0 := start + 10*OrderBoundHold
	a.LastActive = now0
	for _, waited := range []uint64{now0, now0 - OrderYieldHold + 1} {
		o := Ordering([]OrderTenant{a, {Rank: rankNormal, Request: 50, Limit: 100, LastActive: start, LastWaited: waited}}, now0)
		if runsFree(o[0], now0) {
			t.Errorf("a neighbour idle whose launch waited %d ns ago: told %+v, want no free run", now0-waited, o[0])
		}
	}
	if o := Ordering([]OrderTenant{a, {Rank: rankNormal, Request: 50, Limit: 100, LastActive: start, LastWaited: now0 - OrderYieldHold}}, now0); !runsFree(o[0], now0) {
		t.Errorf("a neighbour idle whose launch waited a yield hold ago: told %+v, want a free run", o[0])
	}
	// a limit below the whole GPU: never free, whatever the neighbours do
	capped := a
	capped.Limit, capped.LastActive = 99, start
	now := start + OrderBoundHold
	if o := Ordering([]OrderTenant{capped, {Rank: rankNormal, Request: 50, Limit: 100}}, now); runsFree(o[0], now) {
		t.Errorf("a tenant of limit 99 runs free: %+v", o[0])
	}
	// a higher neighbour idle past the hold frees a low one too; active, not
	lo := OrderTenant{Rank: rankLow, Request: 10, Limit: 100, LastActive: start}
	hi := OrderTenant{Rank: rankHigh, Request: 10, Limit: 100, LastActive: start}
	if o := Ordering([]OrderTenant{lo, hi}, start+1); runsFree(o[0], start+1) || !yields(o[0], start+1) {
		t.Errorf("a low tenant beside an active high one: %+v, want a yield and no free run", o[0])
	}
	if o := Ordering([]OrderTenant{lo, hi}, start+OrderYieldHold); !runsFree(o[0], start+OrderYieldHold) || !bounded(o[0], start+OrderYieldHold) {
		t.Errorf("a low tenant beside a high one idle past the yield hold: %+v, want a free run, bounded by the high one", o[0])
	}
	// a high tenant beside a low one idle past the hold: free, not
	// yielding, and its order words bound nothing (what the run starts, the
	// library bounds)
	hi.LastActive, lo.LastActive = start+OrderYieldHold, start
	if o := Ordering([]OrderTenant{hi, lo}, start+OrderYieldHold); !runsFree(o[0], start+OrderYieldHold) || o[0].BoundUntil != 0 || o[0].YieldUntil != 0 {
		t.Errorf("a high tenant beside a low one idle past the yield hold: %+v, want a free run, no bound and no yield", o[0])
	}
	// a high tenant beside a busy low one, or one that waits: neither
	// free, bounded nor yielding, for as long as the low one works: the
	// high one's slot and bucket are all that hold it
	for _, now := range []uint64{start + OrderYieldHold + 1, start + OrderFreeAhead, start + OrderBoundHold} {
		hi.LastActive = now
		for _, low := range []OrderTenant{
			{Rank: rankLow, Request: 50, Limit: 100, LastActive: now},
			{Rank: rankLow, Request: 0, Limit: 100, LastActive: start, LastWaited: now},
		} {
			if o := Ordering([]OrderTenant{hi, low}, now); o[0] != (Order{}) {
				t.Errorf("at %d ns, a high tenant beside a low one (%+v): told %+v, want nothing", now-start, low, o[0])
			}
		}
	}
}
