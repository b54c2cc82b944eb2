package plan

import (
	"slices"
	"testing"
)

// A priority moves no SM share on a spatial GPU (docs/spatial.md,
// "Priority"): the share is the limit, high or low, and the priority is on
// the device for the share file.
func TestPlanSpatialPriorityKeepsShare(t *testing.T) {
	cfg := memConfig()
	cfg.Spatial.GPUs = []string{"1"}
	for _, prio := range []string{"high", "low"} {
		p, err := New(mustReq(t, "VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=40", "VGPU_PRIORITY="+prio), cfg, memHost(), "c-"+prio)
		if err != nil {
			t.Fatal(err)
		}
		d := p.Devices[0]
		if d.Compute != 40 || d.ComputeRequest != nil || d.Priority.String() != prio || !slices.Contains(p.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40") {
			t.Errorf("%s: compute %d request %v priority %s env %v, want the share 40 and priority %s", prio, d.Compute, d.ComputeRequest, d.Priority, p.Env, prio)
		}
	}
}
