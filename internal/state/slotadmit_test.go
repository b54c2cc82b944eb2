package state

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Without `vgpu node`, each paced tenant runs in its admission slot at its
// admission share: whatever order tenants whose requests fit in 100 % are
// admitted in, their slots on one GPU must not overlap and their shares must
// sum to at most 100 %; and every tenant gets at least its request (the
// other side of the bound: disjoint slots bought by starving one would not do).
func TestAdmissionSlotsDisjoint(t *testing.T) {
	type holder struct{ limit, request int } // request 0: none given
	cases := [][]holder{
		{{100, 60}, {30, 0}},
		{{30, 0}, {100, 60}},
		{{100, 60}, {30, 30}},
		{{100, 60}, {40, 0}},
		{{100, 50}, {100, 0}, {30, 0}},
		{{20, 0}, {30, 0}, {100, 40}, {10, 0}},
	}
	for n, tc := range cases {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dir := t.TempDir()
			gpu := tenant.GPU{UUID: "GPU-0", MemoryBytes: 16 << 30}
			type got struct{ start, width, request int }
			var all []got
			for i, tn := range tc {
				d := tenant.Device{GPU: gpu, Memory: 1 << 30, Compute: tn.limit}
				if tn.request > 0 {
					r := tn.request
					d.ComputeRequest = &r
				}
				id := fmt.Sprintf("c%d", i)
				info, err := Create(dir, tenant.Record{ID: id, Library: &tenant.Library{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s"}, Devices: []tenant.Device{d}}, nil)
				if err != nil {
					t.Fatalf("%s (limit %d, request %d): %v", id, tn.limit, tn.request, err)
				}
				if info.Devices[0].Phase == nil {
					t.Fatalf("%s: no slot recorded", id)
				}
				all = append(all, got{*info.Devices[0].Phase, 0, info.Devices[0].Request()})
			}
			// as the library reads them now, all admitted
			for i := range all {
				g, err := arbiter.Read(filepath.Join(dir, fmt.Sprintf("c%d", i), config.StateHost, contract.ShareFile))
				if err != nil {
					t.Fatal(err)
				}
				share, phase := arbiter.Unword(g.Static[0])
				if phase != all[i].start*100 {
					t.Fatalf("c%d: the word's phase %d is not the record's %d%%", i, phase, all[i].start)
				}
				all[i].width = width(share)
			}
			sum := 0
			for i, a := range all {
				sum += a.width
				if a.width < a.request {
					t.Errorf("c%d: slot %d-%d%% is narrower than its request %d%%", i, a.start, a.start+a.width, a.request)
				}
				for j, b := range all[:i] {
					if a.start < b.start+b.width && b.start < a.start+a.width {
						t.Errorf("c%d's slot %d-%d%% overlaps c%d's %d-%d%%", i, a.start, a.start+a.width, j, b.start, b.start+b.width)
					}
				}
			}
			if sum > 100 {
				t.Errorf("admission shares sum to %d%%: %+v", sum, all)
			}
		})
	}
}

// A container refused on one of its GPUs narrows no one's slot on another.
func TestRefusedContainerNarrowsNothing(t *testing.T) {
	dir := t.TempDir()
	lib := &tenant.Library{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s"}
	req := func(n int) *int { return &n }
	g0, g1 := tenant.GPU{UUID: "GPU-0", MemoryBytes: 16 << 30}, tenant.GPU{UUID: "GPU-1", MemoryBytes: 16 << 30}
	for _, in := range []tenant.Record{
		{ID: "a", Library: lib, Devices: []tenant.Device{{GPU: g0, Compute: 100, ComputeRequest: req(50)}}},
		{ID: "surplus", Library: lib, Devices: []tenant.Device{{GPU: g0, Compute: 100}}},
		{ID: "b", Library: lib, Devices: []tenant.Device{{GPU: g1, Compute: 100, ComputeRequest: req(80)}}},
	} {
		if _, err := Create(dir, in, nil); err != nil {
			t.Fatal(err)
		}
	}
	word := func() uint64 {
		g, err := arbiter.Read(filepath.Join(dir, "surplus", config.StateHost, contract.ShareFile))
		if err != nil {
			t.Fatal(err)
		}
		return g.Static[0]
	}
	before := word()
	_, err := Create(dir, tenant.Record{ID: "refused", Library: lib, Devices: []tenant.Device{
		{GPU: g0, Compute: 100, ComputeRequest: req(20)}, {GPU: g1, Compute: 100, ComputeRequest: req(30)}}}, nil)
	if err == nil {
		t.Fatal("80 + 30 on GPU-1 admitted")
	}
	if after := word(); after != before {
		sb, _ := arbiter.Unword(before)
		sa, _ := arbiter.Unword(after)
		t.Errorf("the surplus tenant's share went from %d to %d bp for a refused container", sb, sa)
	}
}
