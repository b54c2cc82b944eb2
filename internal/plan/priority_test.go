package plan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// TestPlanPriority: the plan gives each device the priority its request
// names, else defaults.priority, else normal; per-device priorities follow
// the request's order as the limits do, and a normal device's record is
// the same as before priorities existed.
func TestPlanPriority(t *testing.T) {
	cfg, h := memConfig(), memHost()
	for _, tc := range []struct {
		name string
		def  string
		env  []string
		want []tenant.Priority // by container device (host order)
	}{
		{"none", "", []string{"VGPU_VISIBLE_DEVICES=0,1"}, []tenant.Priority{tenant.Normal, tenant.Normal}},
		{"all high", "", []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_PRIORITY=high"}, []tenant.Priority{tenant.High, tenant.High}},
		{"per device", "", []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_PRIORITY=1=low"}, []tenant.Priority{tenant.Normal, tenant.Low}},
		{"default", "low", []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_PRIORITY=0=high"}, []tenant.Priority{tenant.High, tenant.Low}},
		{"request order", "", []string{"VGPU_VISIBLE_DEVICES=1,0", "VGPU_PRIORITY=0=high"}, []tenant.Priority{tenant.Normal, tenant.High}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg.Defaults.Priority = tc.def
			p, err := New(mustReq(t, tc.env...), cfg, h, "c1")
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range p.Devices {
				if d.Priority != tc.want[i] {
					t.Errorf("device %d (GPU %d): priority %s, want %s", i, d.GPU.Index, d.Priority, tc.want[i])
				}
				b, _ := json.Marshal(d)
				if has := strings.Contains(string(b), `"priority"`); has != (d.Priority != tenant.Normal) {
					t.Errorf("device %d record %s: a priority word only when not normal", i, b)
				}
			}
		})
	}
}
