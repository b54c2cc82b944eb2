package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// What holds a memory limit, as the text says it: "library + node" only
// while vgpu node runs, since the header says host enforcement is off
// otherwise.
func TestMemoryHeldByFollowsHostEnforcement(t *testing.T) {
	f := newFixture(t)
	f.container("c1", &tenant.Record{ID: "c1", Created: time.Now().Add(-time.Hour).UTC()}, quotaOf(2*gib))
	text := func() string {
		r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
		var b bytes.Buffer
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if s := text(); strings.Contains(s, "library + node") || !strings.Contains(s, "2.00 GiB (library)") {
		t.Errorf("without vgpu node:\n%s", s)
	}
	w, err := events.NewWriter(f.state)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := w.Beat(events.Heartbeat{PID: 4242, Started: now, Beat: now, Interval: "100ms", Grace: "500ms"}); err != nil {
		t.Fatal(err)
	}
	if s := text(); !strings.Contains(s, "2.00 GiB (library + node)") {
		t.Errorf("with vgpu node:\n%s", s)
	}
}
