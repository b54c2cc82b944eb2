package arbiter

import "testing"

// Checks 100 ms apart: a tenant counted busy with no device time and no
// waiting launch in the last check is asleep (an arbitration now, which sees
// it idle and using nothing, whatever it did earlier in the period); one
// counted idle whose launch waited is awake. Activity in every check changes
// nothing.
func TestWatch(t *testing.T) {
	const ms = uint64(1e6)
	period := 500 * ms
	now := 1000 * ms
	var w Watch
	r := Reading{Busy: 0, Want: now - 5*ms}
	w.Check(r, now)
	if busy, _ := w.Judge(r, now, period); !busy {
		t.Fatal("first judgement: a launch waited within the period: busy")
	}
	w.Granted(true, 3000)
	// busy: device time in its slot or a waiting launch in every check
	for i := 0; i < 5; i++ {
		now += 100 * ms
		if i%2 == 0 {
			r.Busy += 100 * ms
		} else {
			r.Want = now - ms
		}
		if w.Check(r, now) {
			t.Fatalf("check %d: busy throughout, seen changed", i)
		}
	}
	// sleeps: the check after a whole quiet one says so
	now += 100 * ms
	r.Busy += 40 * ms // the last launches before the sleep
	if w.Check(r, now) {
		t.Fatal("device time in the check: not asleep yet")
	}
	now += 100 * ms
	if !w.Check(r, now) {
		t.Fatal("a quiet check: asleep, arbitrate now")
	}
	if busy, used := w.Judge(r, now, period); busy || used != 0 {
		t.Fatalf("asleep: judged busy %v used %d, want idle using nothing", busy, used)
	}
	w.Granted(false, 7000)
	now += 100 * ms
	if w.Check(r, now) {
		t.Fatal("still asleep: nothing changed")
	}
	// wakes: a launch waited
	now += 100 * ms
	r.Busy += 30 * ms
	r.Want = now - 20*ms
	if !w.Check(r, now) {
		t.Fatal("a launch waited while counted idle: awake, arbitrate now")
	}
	if busy, _ := w.Judge(r, now, period); !busy {
		t.Fatal("awake: judged idle")
	}
	w.Granted(true, 7000)
	// one long kernel: no device time counted and no wait, but its queued
	// work runs past the last check: not asleep, until the queue has ended
	now += 100 * ms
	r.Queue = now + 250*ms
	w.Check(r, now)
	for i := 0; i < 3; i++ {
		now += 100 * ms
		if w.Check(r, now) {
			t.Fatalf("a long kernel queued until %d ms, at %d ms: seen asleep", r.Queue/ms, now/ms)
		}
	}
	now += 100 * ms
	if !w.Check(r, now) {
		t.Fatal("its queue ended a whole check ago and nothing since: asleep")
	}
	// counted idle and using its grant without waiting (a grant it fills): awake too
	var v Watch
	v.Check(Reading{}, now)
	v.Judge(Reading{}, now, period)
	v.Granted(false, 2000)
	if !v.Check(Reading{Busy: 19 * ms}, now+100*ms) {
		t.Fatal("95 % of its grant used while counted idle: awake")
	}
}
