// Package nvmlfeed reads the driver's own per-process figures through NVML
// (go-nvml against the driver's libnvidia-ml.so.<version>): the device
// memory each process holds (nvmlDeviceGetComputeRunningProcesses) and how
// busy its kernels kept each GPU (nvmlDeviceGetProcessUtilization). NVML
// reports host pids, whatever pid namespace a process lives in. What the
// library inside a container counts plays no part: this is what the driver
// itself charges, bypassing routes included.
package nvmlfeed

import "sort"

// Sample is one process on one GPU.
type Sample struct {
	HostPID   int
	GPU       string // UUID
	UsedBytes uint64
	SMUtil    int // percent of the time since the previous Read (Meter)
	// MPS: listed with an MPS compute context
	// (nvmlDeviceGetMPSComputeRunningProcesses): an MPS client
	MPS bool
}

// Source is what the daemon reads each round (the NVML feed, or a test's).
type Source interface {
	Read() ([]Sample, error)
	Close() error
}

// UtilSample is one of the driver's per-process utilization samples
// (nvmlProcessUtilizationSample_t): SMUtil percent over the driver's sample
// period that ended at TimeStamp (µs, CLOCK_REALTIME).
type UtilSample struct {
	PID       uint32
	TimeStamp uint64
	SMUtil    uint32
}

// Meter turns one GPU's utilization samples into each process's share of
// the time between two reads. The driver samples at its own period (NVML:
// between 1/6 s and 1 s, depending on the product), not at ours: a read
// that finds no new sample does not mean the process was idle, and one
// sample may cover more than one of our intervals. Counting such reads as
// 0 % (as the first version of the daemon did) measured about half of a
// spinning process's share on an H200 (docs/archive/gpu-runs.md).
// So each sample is taken as busy time: SMUtil × the period it covers,
// which is the time since the same process's previous sample, at most the
// driver's period (the smallest gap seen between a process's samples, at
// most 250 ms) or our own read interval, whichever is longer; the busy
// time is reported
// over the reads that follow, at most 100 % of each, the rest carried.
type Meter struct {
	LastSeen uint64 // newest sample timestamp read: pass it back to NVML
	lastRead uint64
	prevTS   map[uint32]uint64  // each process's newest sample timestamp
	gaps     []uint64           // recent gaps between a process's samples (µs)
	pending  map[uint32]float64 // busy µs measured, not yet reported
}

const (
	minGapUS      = 20_000  // shorter gaps between a process's samples are not the driver's period
	defaultPeriod = 166_667 // NVML's shortest documented sample period, until one is seen
	// The longest driver period believed. A process busy in short bursts
	// shows only gaps of its idle time between samples; believing them
	// would stretch each burst over the idle time before it. The H200
	// samples faster (about half the daemon's reads there found a new sample).
	maxDriverPeriodUS = 250_000
	maxPeriodUS       = 1_000_000 // the most one sample stands for (a slow read)
	keepGaps          = 32
)

// Read takes the samples NVML returned at now (µs; only differences
// between reads count; none when it answered NVML_ERROR_NOT_FOUND) and returns each process's share
// of the time since the previous Read, in percent (processes with none are
// left out). The first Read only primes the meter.
func (m *Meter) Read(now uint64, samples []UtilSample) map[uint32]int {
	if m.prevTS == nil {
		m.prevTS, m.pending = map[uint32]uint64{}, map[uint32]float64{}
	}
	first := m.lastRead == 0
	interval := uint64(0)
	if !first && now > m.lastRead {
		interval = now - m.lastRead
	}
	m.lastRead = now
	sort.Slice(samples, func(i, j int) bool { return samples[i].TimeStamp < samples[j].TimeStamp })
	for _, s := range samples {
		if s.TimeStamp > m.LastSeen {
			m.LastSeen = s.TimeStamp
		}
		prev, known := m.prevTS[s.PID]
		if known && s.TimeStamp <= prev {
			continue // seen already
		}
		m.prevTS[s.PID] = s.TimeStamp
		if first {
			continue
		}
		if known {
			if gap := s.TimeStamp - prev; gap >= minGapUS {
				m.gaps = append(m.gaps, gap)
				if len(m.gaps) > keepGaps {
					m.gaps = m.gaps[1:]
				}
			}
		}
		// what this sample stands for: the driver's period, or our
		// interval when we read more slowly (NVML may return only the
		// latest sample), never more than since the process's last one
		period := m.period()
		if interval > period {
			period = interval
		}
		if known && s.TimeStamp-prev < period {
			period = s.TimeStamp - prev
		}
		if period > maxPeriodUS {
			period = maxPeriodUS
		}
		util := s.SMUtil
		if util > 100 {
			util = 100
		}
		m.pending[s.PID] += float64(util) / 100 * float64(period)
	}
	for pid, ts := range m.prevTS {
		// gone: the map does not grow with every pid ever seen (judged on
		// the samples' own clock, which need not be ours)
		if m.LastSeen-ts > 60*maxPeriodUS {
			delete(m.prevTS, pid)
		}
	}
	if interval == 0 {
		return nil
	}
	out := map[uint32]int{}
	for pid, busy := range m.pending {
		rep := busy
		if rep > float64(interval) {
			rep = float64(interval)
		}
		if pct := int(rep/float64(interval)*100 + 0.5); pct > 0 {
			out[pid] = pct
		}
		left := busy - rep
		if left > maxPeriodUS {
			left = maxPeriodUS
		}
		if left < 1 {
			delete(m.pending, pid)
		} else {
			m.pending[pid] = left
		}
	}
	return out
}

// period is the driver's sample period as seen: the smallest recent gap
// between a process's samples.
func (m *Meter) period() uint64 {
	if len(m.gaps) == 0 {
		return defaultPeriod
	}
	p := m.gaps[0]
	for _, g := range m.gaps[1:] {
		if g < p {
			p = g
		}
	}
	if p > maxDriverPeriodUS {
		p = maxDriverPeriodUS
	}
	return p
}
