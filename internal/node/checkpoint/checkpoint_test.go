package checkpoint

import (
	"reflect"
	"testing"
	"time"
)

// fakeDriver answers each step with a CUresult and records the calls.
type fakeDriver struct {
	rc    map[step]int
	calls []string
	st    State
}

func (f *fakeDriver) state(int) (State, int) { return f.st, 0 }
func (f *fakeDriver) name(int) string        { return "CUDA_ERROR_X" }
func (f *fakeDriver) do(s step, _ int, _ time.Duration) int {
	f.calls = append(f.calls, stepNames[s])
	return f.rc[s]
}

func TestApplySequences(t *testing.T) {
	clock := func() time.Time { return time.Unix(0, 0) }
	for _, c := range []struct {
		name   string
		op     Op
		rc     map[step]int
		calls  []string
		done   bool
		failed string
		busy   bool
		lost   bool
	}{
		{"suspend", Suspend, nil, []string{"lock", "checkpoint"}, true, "", false, false},
		{"suspend, busy", Suspend, map[step]int{stepLock: 600}, []string{"lock"}, false, "lock", true, false},
		// a refused checkpoint (managed memory: 801) leaves it locked: unlock
		{"suspend, refused", Suspend, map[step]int{stepCheckpoint: 801}, []string{"lock", "checkpoint", "unlock"}, false, "checkpoint", false, false},
		{"resume", Resume, nil, []string{"restore", "unlock"}, true, "", false, false},
		// a restore without room fails for good on driver 580
		{"resume, no room", Resume, map[step]int{stepRestore: 2}, []string{"restore"}, false, "restore", false, true},
		{"state", Query, nil, nil, true, "", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &fakeDriver{rc: c.rc}
			r := apply(d, c.op, 42, time.Second, clock)
			if !reflect.DeepEqual(d.calls, c.calls) || r.Done != c.done || r.Step != c.failed || r.Busy() != c.busy || r.Lost != c.lost {
				t.Errorf("calls %v, result %+v (busy %v); want calls %v, done %v, failed step %q, busy %v, lost %v",
					d.calls, r, r.Busy(), c.calls, c.done, c.failed, c.busy, c.lost)
			}
		})
	}
}
