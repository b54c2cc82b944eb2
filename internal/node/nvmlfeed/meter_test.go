package nvmlfeed

import (
	"math"
	"testing"
)

// driver is a GPU's utilization sampler the test controls: every period
// µs it records, for each process busy in that period, the percent of it
// the process was busy (busy reports it, µs from 0); a read returns the
// samples newer than lastSeen, all of them or (collapse) each process's
// latest only.
type driver struct {
	period   uint64
	busy     func(pid uint32, from, to uint64) uint64 // busy µs of pid in [from, to)
	pids     []uint32
	collapse bool
}

func (d *driver) read(now, lastSeen uint64) []UtilSample {
	var out []UtilSample
	latest := map[uint32]int{}
	for t := (lastSeen/d.period + 1) * d.period; t <= now; t += d.period {
		for _, pid := range d.pids {
			b := d.busy(pid, t-d.period, t)
			if b == 0 {
				continue // NVML: only processes busy in the last period
			}
			s := UtilSample{PID: pid, TimeStamp: t, SMUtil: uint32(b * 100 / d.period)}
			if i, ok := latest[pid]; ok && d.collapse {
				out[i] = s
				continue
			}
			latest[pid] = len(out)
			out = append(out, s)
		}
	}
	return out
}

// measure reads every step µs (or as steps says) from start for dur and
// returns pid's time-weighted share, as the daemon's window sees it, and
// the share a read finding no new sample counts as 0 (the first version).
func measure(d *driver, pid uint32, steps func(i int) uint64, dur uint64) (share, naive float64) {
	var m Meter
	now := uint64(1_000_000)
	m.Read(now, d.read(now, m.LastSeen))
	var sum, nsum, cover float64
	for i := 0; now < 1_000_000+dur; i++ {
		now += steps(i)
		raw := d.read(now, m.LastSeen)
		got := m.Read(now, raw)
		dt := float64(steps(i))
		sum += float64(got[pid]) * dt
		var n, tot float64
		for _, s := range raw {
			if s.PID == pid {
				n, tot = n+1, tot+float64(s.SMUtil)
			}
		}
		if n > 0 {
			nsum += tot / n * dt
		}
		cover += dt
	}
	return sum / cover, nsum / cover
}

func every(us uint64) func(int) uint64 { return func(int) uint64 { return us } }

// always busy at pct percent
func steady(pct uint64) func(uint32, uint64, uint64) uint64 {
	return func(_ uint32, from, to uint64) uint64 { return (to - from) * pct / 100 }
}

// The H200 pattern: the driver samples at about 6 Hz, the daemon reads at
// 10 Hz; a process spinning at 95 % measured 95 %, where counting reads
// without a new sample as idle measured about 57 %.
func TestMeterDriverSlowerThanReads(t *testing.T) {
	for _, collapse := range []bool{false, true} {
		for _, period := range []uint64{166_667, 200_000, 250_000} {
			d := &driver{period: period, busy: steady(95), pids: []uint32{7}, collapse: collapse}
			share, naive := measure(d, 7, every(100_000), 10_000_000)
			if math.Abs(share-95) > 3 {
				t.Errorf("driver period %d µs (collapse %v): measured %.1f %%, want 95", period, collapse, share)
			}
			if period == 166_667 && naive > 70 {
				t.Errorf("the first version's measure %.1f %%: the test does not reproduce the H200's", naive)
			}
		}
	}
}

// A daemon slowed down (reads every 400 ms, or irregularly) still measures
// the share when NVML returns every sample since the last read; when it
// returns each process's latest only, a sample stands for at most one read
// interval, and the share is measured low by up to 15 %.
func TestMeterReadsSlowerThanDriver(t *testing.T) {
	irregular := func(i int) uint64 { return []uint64{100_000, 300_000, 150_000, 420_000}[i%4] }
	for _, collapse := range []bool{false, true} {
		for name, steps := range map[string]func(int) uint64{"400 ms": every(400_000), "irregular": irregular} {
			d := &driver{period: 166_667, busy: steady(60), pids: []uint32{7}, collapse: collapse}
			share, _ := measure(d, 7, steps, 20_000_000)
			if lo := 60.0 - 4; (collapse && (share < 60*0.85 || share > 64)) || (!collapse && (share < lo || share > 64)) {
				t.Errorf("%s (collapse %v): measured %.1f %%, want 60", name, collapse, share)
			}
		}
	}
}

// Short bursts after idle time are not stretched over the idle time: 100 ms
// busy every 2 s is 5 %, measured at most 250/166.7 times that when no
// burst ever shows the driver's period (they all fall in one sample).
func TestMeterBurstsAfterIdle(t *testing.T) {
	burst := func(_ uint32, from, to uint64) uint64 {
		var b uint64
		for s := from; s < to; s += 1000 {
			if s%2_000_000 < 100_000 {
				b += 1000
			}
		}
		return b
	}
	d := &driver{period: 166_667, busy: burst, pids: []uint32{7}}
	if share, _ := measure(d, 7, every(100_000), 30_000_000); share < 4.5 || share > 7.5 {
		t.Errorf("bursts: measured %.2f %%, want 5, at most 7.5", share)
	}
}

// The simulated GPU's NVML: a sample per read, stamped at the read, over
// the time since lastSeen.
func TestMeterSamplesSinceLastSeen(t *testing.T) {
	var m Meter
	now := uint64(1_000_000)
	m.Read(now, nil)
	var sum, cover float64
	steps := []uint64{100_000, 250_000, 120_000, 400_000, 90_000}
	for i := 0; i < 200; i++ {
		dt := steps[i%len(steps)]
		now += dt
		got := m.Read(now, []UtilSample{{PID: 7, TimeStamp: now, SMUtil: 50}, {PID: 8, TimeStamp: now, SMUtil: 20}})
		sum += float64(got[7]) * float64(dt)
		cover += float64(dt)
		if i > 0 && (got[8] < 18 || got[8] > 22) { // the first of a process stands for a driver period
			t.Fatalf("read %d: pid 8 at %d %%, want 20", i, got[8])
		}
	}
	if share := sum / cover; math.Abs(share-50) > 1 {
		t.Errorf("measured %.1f %%, want 50", share)
	}
}

// A process that stops is reported idle within a driver period or two.
func TestMeterStops(t *testing.T) {
	stopAt := uint64(5_000_000)
	d := &driver{period: 166_667, pids: []uint32{7}, busy: func(_ uint32, from, to uint64) uint64 {
		if from >= stopAt {
			return 0
		}
		return to - from
	}}
	var m Meter
	now := uint64(1_000_000)
	m.Read(now, d.read(now, 0))
	for now < 10_000_000 {
		now += 100_000
		got := m.Read(now, d.read(now, m.LastSeen))
		if now > stopAt+400_000 && got[7] != 0 {
			t.Fatalf("%d µs after it stopped: still %d %%", now-stopAt, got[7])
		}
	}
}
