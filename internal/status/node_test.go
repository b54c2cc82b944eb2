package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/node/events"
	"github.com/vgpu-dev/vgpu/internal/state"
)

func TestHostEnforcementShown(t *testing.T) {
	f := newFixture(t)
	created := time.Now().Add(-time.Hour).UTC()
	f.container("c1", &state.Info{ID: "c1", Created: created}, quotaOf(2*gib))
	text := func() (string, *Report) {
		r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
		var b bytes.Buffer
		r.WriteText(&b)
		return b.String(), r
	}
	// no daemon has ever run
	if s, r := text(); !strings.Contains(s, "host enforcement: off (vgpu node is not running)") || r.HostEnforcement.On {
		t.Fatalf("without vgpu node:\n%s", s)
	}
	w, err := events.NewWriter(f.state)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	w.Beat(events.Heartbeat{PID: 4242, Started: now, Beat: now, Interval: "100ms", Grace: "500ms", Tolerance: "64 MiB + 1% of the limit"})
	at := now.Add(-time.Minute)
	w.Append(events.Event{Time: created.Add(-time.Hour), Kind: "kill", Container: "c1", PID: 1, Reason: "memory", Used: 3 * gib, Limit: 2 * gib}) // an earlier container of that id
	w.Append(events.Event{Time: at, Kind: "kill", Container: "c1", PID: 1234, Device: 0, Reason: "memory", Used: 10*gib + 400<<20, Limit: 2 * gib})
	w.Append(events.Event{Time: at, Kind: "kill", Container: "other", PID: 99, Reason: "memory", Used: 3 * gib, Limit: gib})
	s, r := text()
	want := "killed pid 1234: 10.39 GiB on GPU 0 > limit 2.00 GiB at " + at.Local().Format("15:04:05")
	if !strings.Contains(s, "host enforcement: on (vgpu node pid 4242") || !strings.Contains(s, want) || strings.Contains(s, "pid 99") || strings.Contains(s, "killed pid 1:") {
		t.Fatalf("with vgpu node, want %q:\n%s", want, s)
	}
	if c := find(t, r, "c1"); !r.HostEnforcement.On || len(c.Enforcement) != 1 || c.Enforcement[0].PID != 1234 {
		t.Fatalf("report: %+v %+v", r.HostEnforcement, c.Enforcement)
	}
	// a heartbeat too old: the daemon died without removing it
	old := now.Add(-time.Minute)
	w.Beat(events.Heartbeat{PID: 4242, Started: old, Beat: old})
	if s, r := text(); !strings.Contains(s, "host enforcement: off (vgpu node's last heartbeat") || r.HostEnforcement.On {
		t.Fatalf("stale heartbeat:\n%s", s)
	}
	// a clean stop removes it
	w.Stop()
	if s, _ := text(); !strings.Contains(s, "host enforcement: off (vgpu node is not running)") {
		t.Fatalf("after stop:\n%s", s)
	}
}
