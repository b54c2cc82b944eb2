package shim

import (
	"testing"
)

// A delete forwards the signals that stop a process to the runtime and
// outlives them, so that it still decides about the state by the runtime's
// exit status. The child sends SIGTERM to the shim (this test process)
// itself, so the signal arrives while forkRuntime waits; it then spins in
// the shell (no command to wait for, so the signal acts at once).
func TestForkRuntimeForwardsStopSignals(t *testing.T) {
	script := `trap 'exit 7' TERM; kill -TERM $PPID; while :; do :; done`
	if code := forkRuntime("/bin/sh", []string{"-c", script}, stopSignals...); code != 7 {
		t.Errorf("exit status %d, want 7 (the runtime's trap for the forwarded SIGTERM)", code)
	}
	// Killed by a forwarded signal it does not catch: 128+signal.
	script = `kill -INT $PPID; while :; do :; done`
	if code := forkRuntime("/bin/sh", []string{"-c", script}, stopSignals...); code != 128+2 {
		t.Errorf("exit status %d, want 130 (killed by the forwarded SIGINT)", code)
	}
}
