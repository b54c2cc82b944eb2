//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// The one wait of test/e2e: every "until this holds, or fail after so long"
// goes through poll (eventually is its failing form). A wait never asserts
// how soon something happens, only that it does within a limit generous for
// a loaded 2-core machine.

// pollEvery is how often a condition is asked again.
const pollEvery = 100 * time.Millisecond

// errGaveUp marks a condition's error that no later call can change (a
// daemon that exited): poll returns it at once.
var errGaveUp = errors.New("gave up")

// giveUp makes cond's error final: poll stops waiting and returns it.
func giveUp(err error) error { return fmt.Errorf("%w: %w", errGaveUp, err) }

// poll calls cond every pollEvery until it returns nil (poll returns nil),
// an error made by giveUp, or timeout passes: then the last error, saying
// how long it waited.
func poll(timeout time.Duration, cond func() error) error {
	return pollAt(timeout, pollEvery, cond)
}

// pollAt is poll asking every interval.
func pollAt(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if errors.Is(err, errGaveUp) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// eventually waits for cond (poll) and fails the test, naming what it
// waited for and cond's last error, when it does not hold in time.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// holds turns a boolean condition into poll's: nil when ok, else an error
// saying what is not yet so.
func holds(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// eventuallyTrue is eventually for a condition that has nothing to say
// but whether it holds.
func eventuallyTrue(t testing.TB, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	eventually(t, timeout, what, func() error { return holds(ok(), "not yet") })
}
