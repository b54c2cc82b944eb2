package enforce

import (
	"testing"
	"time"
)

// The memory kill threshold from both sides: a container holding its limit
// plus the tolerance for an hour is left alone; one MiB more, held past the
// grace, is killed, and the kill says how much it held against which limit.
func TestMemoryKillThresholdBothSides(t *testing.T) {
	limit := 2 * gib
	at := limit + DefaultConfig().Tolerance(limit)
	for _, tc := range []struct {
		used uint64
		kill bool
	}{{at, false}, {at + 1<<20, true}} {
		f := newFeed(t, memLimited("a", limit))
		f.procs = []Proc{{HostPID: 10, GPU: gpu0, UsedBytes: tc.used, Container: "a"}}
		d := time.Hour
		if tc.kill {
			d = DefaultConfig().Grace + 200*time.Millisecond
		}
		kills := kinds(f.run(d, 100*time.Millisecond), Kill)
		if !tc.kill && len(kills) != 0 {
			t.Errorf("holding %d, the limit %d plus its tolerance: killed %+v", tc.used, limit, kills)
		}
		if tc.kill && (len(kills) != 1 || kills[0].PID != 10 || kills[0].Used != tc.used || kills[0].Limit != limit) {
			t.Errorf("holding %d, 1 MiB above the limit %d plus its tolerance, past the grace: kills %+v, want pid 10 once", tc.used, limit, kills)
		}
	}
}
