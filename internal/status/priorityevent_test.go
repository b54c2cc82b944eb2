package status

import (
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
)

// An event that names a tenant's limit names its priority when not normal.
func TestEventNamesPriority(t *testing.T) {
	e := events.Event{Time: time.Unix(1700000000, 0), Kind: "freeze", Device: 0, Reason: "compute", Used: 70, Limit: 50}
	if s := eventText(e); strings.Contains(s, "priority") {
		t.Errorf("normal: %s", s)
	}
	e.Priority = "low"
	if s := eventText(e); !strings.Contains(s, "> limit 50% at") || !strings.HasSuffix(s, "(priority low)") {
		t.Errorf("low: %s", s)
	}
}
