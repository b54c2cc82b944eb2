package daemon

import (
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// gpuFeed also reports the GPUs' totals, as the NVML feed does.
type gpuFeed struct{ feed }

func (f *gpuFeed) GPUs() ([]nvmlfeed.GPU, error) {
	return []nvmlfeed.GPU{{Index: 0, UUID: uuid, Name: "sim", MemoryTotal: 80 << 30, MemoryUsed: 1 << 30, Busy: 97}}, nil
}

// What only the node measures reaches vgpu status and vgpu top through the
// heartbeat: the container's share as the policy judges it, its throttle's
// duty once frozen, the GPU's totals; and each recorded event reaches
// Notify (Kubernetes Events).
func TestHeartbeatCarriesSharesAndNotifies(t *testing.T) {
	h := newHost(t, "device 0 "+uuid+" compute=25")
	f := &gpuFeed{feed{samples: []nvmlfeed.Sample{{HostPID: 101, GPU: uuid, SMUtil: 97}}}}
	now := time.Unix(1_800_000_000, 0)
	var got []events.Event
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f,
		Now: func() time.Time { return now }, Kill: func(int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	d.Notify(func(e events.Event) { got = append(got, e) })
	for i := 0; i < 150 && len(got) == 0; i++ {
		d.Round()
		now = now.Add(100 * time.Millisecond)
	}
	if len(got) == 0 || got[0].Kind != "freeze" || got[0].Container != "c1" || got[0].Limit != 25 {
		t.Fatalf("notified %+v, want the freeze of c1", got)
	}
	now = now.Add(time.Second) // the next round beats
	d.Round()
	hb, err := events.ReadHeartbeat(h.state)
	if err != nil || hb == nil {
		t.Fatal(hb, err)
	}
	if len(hb.Shares) != 1 || hb.Shares[0].Container != "c1" || hb.Shares[0].GPU != uuid || hb.Shares[0].Percent < 90 || hb.Shares[0].Duty <= 0 {
		t.Errorf("heartbeat shares %+v, want c1 at about 97%% with a duty", hb.Shares)
	}
	if len(hb.GPUs) != 1 || hb.GPUs[0].UUID != uuid || hb.GPUs[0].MemoryTotal != 80<<30 || hb.GPUs[0].Busy != 97 {
		t.Errorf("heartbeat GPUs %+v", hb.GPUs)
	}
}
