// Package checkpoint suspends a process's GPU state to host memory and
// restores it through the driver's checkpoint API
// (cuCheckpointProcessLock, …Checkpoint, …Restore, …Unlock; driver 570 and
// later), called on the process by pid from outside it. What the API does
// on the card, and what it cannot do, is in docs/node.md ("Suspension
// probe").
//
// The calls run in a short-lived helper process (Runner: the daemon's own
// binary re-executed), never in the daemon: a call on a process that hangs
// the caller costs the helper, which the deadline kills.
package checkpoint

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoAPI: the driver library has no checkpoint API.
var ErrNoAPI = errors.New("the driver has no checkpoint API")

// State is the driver's CUprocessState of a process.
type State int

// The driver's process states; StateUnknown when it could not say.
const (
	StateUnknown      State = -1
	StateRunning      State = 0
	StateLocked       State = 1
	StateCheckpointed State = 2
	StateFailed       State = 3
)

func (s State) String() string {
	switch s {
	case StateRunning:
		return "running"
	case StateLocked:
		return "locked"
	case StateCheckpointed:
		return "checkpointed"
	case StateFailed:
		return "failed"
	}
	return "unknown"
}

// Op is what a helper does to a process.
type Op string

// Suspend locks the process (waiting for its work in flight up to the lock
// timeout) and checkpoints it, unlocking it again if the checkpoint is
// refused (the driver leaves a refused process locked). Resume restores
// and unlocks it. Query only reads its state.
const (
	Suspend Op = "suspend"
	Resume  Op = "resume"
	Query   Op = "state"
)

// Result is what one operation did.
type Result struct {
	Op       Op     `json:"op"`
	PID      int    `json:"pid"`
	Done     bool   `json:"done"`               // the operation took effect
	Step     string `json:"step,omitempty"`     // the driver call that failed
	CUresult int    `json:"curesult,omitempty"` // its CUresult
	Error    string `json:"error,omitempty"`    // the driver's name of it
	State    State  `json:"state"`              // the process's state after
	// Lost: a restore failed, and on driver 580 a process whose restore
	// failed is never restored (it can only be killed).
	Lost    bool          `json:"lost,omitempty"`
	Elapsed time.Duration `json:"elapsed"`
}

// Busy says the lock timed out on work in flight: the process runs on
// untouched and may be tried again later.
func (r Result) Busy() bool { return r.Step == "lock" && r.CUresult == cudaErrorNotReady }

func (r Result) String() string {
	if r.Done {
		return fmt.Sprintf("%s pid %d: done in %v, %s", r.Op, r.PID, r.Elapsed.Round(time.Millisecond), r.State)
	}
	s := fmt.Sprintf("%s pid %d: %s failed with %s (%d), process %s", r.Op, r.PID, r.Step, r.Error, r.CUresult, r.State)
	if r.Lost {
		s += ", no longer restorable"
	}
	return s
}

const cudaErrorNotReady = 600

type step int

const (
	stepLock step = iota
	stepCheckpoint
	stepRestore
	stepUnlock
)

var stepNames = map[step]string{stepLock: "lock", stepCheckpoint: "checkpoint", stepRestore: "restore", stepUnlock: "unlock"}

// driver is the checkpoint API of a loaded driver library.
type driver interface {
	state(pid int) (State, int)
	do(s step, pid int, lockTimeout time.Duration) int // a CUresult
	name(rc int) string
}

// apply runs op on pid through d.
func apply(d driver, op Op, pid int, lockTimeout time.Duration, now func() time.Time) Result {
	start := now()
	r := Result{Op: op, PID: pid}
	fail := func(s step, rc int) Result {
		r.Step, r.CUresult, r.Error = stepNames[s], rc, d.name(rc)
		return r
	}
	run := func(s step) bool {
		rc := d.do(s, pid, lockTimeout)
		if rc != 0 {
			fail(s, rc)
		}
		return rc == 0
	}
	switch op {
	case Suspend:
		if run(stepLock) {
			if run(stepCheckpoint) {
				r.Done = true
			} else {
				d.do(stepUnlock, pid, 0) // a refused checkpoint leaves it locked
			}
		}
	case Resume:
		if !run(stepRestore) {
			r.Lost = true
		} else if run(stepUnlock) {
			r.Done = true
		}
	case Query:
		r.Done = true
	default:
		r.Step, r.Error = "op", fmt.Sprintf("unknown operation %q (suspend, resume, state)", op)
	}
	r.State, _ = d.state(pid)
	r.Elapsed = now().Sub(start)
	return r
}
