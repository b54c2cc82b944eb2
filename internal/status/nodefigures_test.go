package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The node's share, duty and GPU totals are read from its heartbeat while
// it is current, and shown by vgpu status; a stale one adds none of them.
func TestNodeFiguresFromHeartbeat(t *testing.T) {
	f := newFixture(t)
	f.container("c1", &tenant.Record{ID: "c1", Created: time.Now().Add(-time.Hour)}, quotaOf(2*gib, 2*gib))
	w, err := events.NewWriter(f.state)
	if err != nil {
		t.Fatal(err)
	}
	u1 := quotaOf(0, 0).Devices[1].GPU.UUID
	now := time.Now()
	if err := w.Beat(events.Heartbeat{PID: 1, Beat: now, Shares: []events.Share{{Container: "c1", GPU: u1, Percent: 41, Duty: 0.4}, {Container: "gone", GPU: u1, Percent: 9}},
		GPUs: []events.GPU{{Index: 3, UUID: u1, MemoryTotal: 80 * gib}}}); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	c := find(t, r, "c1")
	if c.Devices[0].NodeShare != nil || c.Devices[1].NodeShare == nil || *c.Devices[1].NodeShare != 41 || *c.Devices[1].ThrottleDuty != 0.4 {
		t.Fatalf("devices %+v", c.Devices)
	}
	if len(r.GPUs) != 1 || r.GPUs[0].Index != 3 {
		t.Errorf("GPUs %+v", r.GPUs)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "node 41% (frozen 40% of the time)") {
		t.Errorf("vgpu status does not show the node's share and duty:\n%s", b.String())
	}
	if err := w.Beat(events.Heartbeat{PID: 1, Beat: now.Add(-time.Minute), Shares: []events.Share{{Container: "c1", GPU: u1, Percent: 41}}}); err != nil {
		t.Fatal(err)
	}
	r = Collect(Options{StateDir: f.state, ProcRoot: f.proc})
	if c := find(t, r, "c1"); c.Devices[1].NodeShare != nil || r.GPUs != nil {
		t.Errorf("a stale heartbeat's figures were taken: %+v %+v", c.Devices, r.GPUs)
	}
}
