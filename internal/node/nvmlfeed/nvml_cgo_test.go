//go:build cgo

package nvmlfeed

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// growingProcesses answers as go-nvml does when a process starts between
// its sizing call and its read: the first reads panic slicing past the
// buffer, a later one succeeds.
type growingProcesses struct{ panics, calls int }

func (g *growingProcesses) GetProcessUtilization(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	g.calls++
	if g.calls <= g.panics {
		buf := make([]nvml.ProcessUtilizationSample, 1)
		n := 1 + g.calls
		return buf[:n], nvml.ERROR_INSUFFICIENT_SIZE // panics: the count grew
	}
	return []nvml.ProcessUtilizationSample{{Pid: 1, SmUtil: 40}, {Pid: 2, SmUtil: 20}}, nvml.SUCCESS
}

func TestProcessUtilizationSurvivesAProcessStartingMidRead(t *testing.T) {
	g := &growingProcesses{panics: 2}
	s, r := processUtilization(g, 0)
	if r != nvml.SUCCESS || len(s) != 2 {
		t.Fatalf("after two torn reads: %d samples, %v; want the 2 samples of the third read", len(s), r)
	}
	// a driver whose count keeps growing gives a failed read, not a crash
	g = &growingProcesses{panics: 100}
	if s, r := processUtilization(g, 0); r != nvml.ERROR_INSUFFICIENT_SIZE || s != nil {
		t.Fatalf("count growing on every read: %d samples, %v; want none and ERROR_INSUFFICIENT_SIZE", len(s), r)
	}
	if g.calls != 3 {
		t.Errorf("count growing on every read: %d reads, want 3", g.calls)
	}
}
