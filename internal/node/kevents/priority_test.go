package kevents

import (
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/events"
)

// A pod's Event that names its limit names its priority when not normal.
func TestMessageNamesPriority(t *testing.T) {
	e := events.Event{Kind: "kill", Device: 0, PID: 7, Reason: "compute", Used: 70, Limit: 50}
	if s := Message(e); strings.Contains(s, "priority") {
		t.Errorf("normal: %s", s)
	}
	e.Priority = "high"
	if s := Message(e); !strings.Contains(s, "> limit 50% (priority high)") {
		t.Errorf("high: %s", s)
	}
}
