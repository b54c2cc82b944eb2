package dra

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/discover"
)

func names(gpus []discover.GPU) string {
	s := ""
	for _, g := range gpus {
		s += DeviceName(g.Index) + " "
	}
	return s
}

// The ResourceSlice lists the GPUs in the policy's order: the scheduler
// takes the first with room.
func TestOrdered(t *testing.T) {
	gpus := []discover.GPU{
		{Index: 0, UUID: "GPU-a", MemoryBytes: 80 << 30},
		{Index: 1, UUID: "GPU-b", MemoryBytes: 80 << 30},
		{Index: 2, UUID: "GPU-c", MemoryBytes: 16 << 30},
		{Index: 3, UUID: "GPU-d", MemoryBytes: 80 << 30},
	}
	// a: 40 GiB + 10 cores (0.6); b: none; c: 8 GiB of 16 + 0 (0.5); d: 0 + 60 cores (0.6).
	mem := map[string]uint64{"GPU-a": 40 << 30, "GPU-c": 8 << 30}
	cores := map[string]int{"GPU-a": 10, "GPU-d": 60}
	for _, tc := range []struct{ policy, want string }{
		{config.PlacementBinpack, "gpu-0 gpu-3 gpu-2 gpu-1 "},
		{config.PlacementSpread, "gpu-1 gpu-2 gpu-0 gpu-3 "},
	} {
		if got := names(Ordered(gpus, mem, cores, tc.policy)); got != tc.want {
			t.Errorf("%s: order %q, want %q", tc.policy, got, tc.want)
		}
	}
	if got := names(Ordered(gpus, nil, nil, config.PlacementSpread)); got != "gpu-0 gpu-1 gpu-2 gpu-3 " {
		t.Errorf("nothing committed: order %q, want NVML order", got)
	}
}

// Prepared claims change the order: binpack puts the GPU that holds a
// claim first, spread last; unprepared, NVML order is back.
func TestOrderFollowsPreparedClaims(t *testing.T) {
	requireRoot(t)
	for _, policy := range []string{config.PlacementBinpack, config.PlacementSpread} {
		t.Run(policy, func(t *testing.T) {
			cfg := testConfig(t)
			d, err := New(Options{NodeName: "node-a", Config: cfg, Inventory: inventoryOf(cfg), CDIDir: filepath.Join(t.TempDir(), "cdi"), Placement: policy})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			gpus, err := d.o.Inventory.GPUs()
			if err != nil {
				t.Fatal(err)
			}
			c := claim(fmt.Sprintf("00000000-0000-4000-8000-0000000002%02d", len(policy)), result{request: "g", pool: "node-a", device: "gpu-1", memory: "4Gi", cores: "20"})
			res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
			if err != nil || res[c.UID].Err != nil {
				t.Fatal(err, res[c.UID].Err)
			}
			select {
			case <-d.republish:
			default:
				t.Error("prepare did not ask for the ResourceSlice to be published again")
			}
			want := map[string]string{config.PlacementBinpack: "gpu-1 gpu-0 ", config.PlacementSpread: "gpu-0 gpu-1 "}[policy]
			if got := names(d.ordered(gpus)); got != want {
				t.Errorf("with a claim on gpu-1: order %q, want %q", got, want)
			}
			if _, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: c.UID}}); err != nil {
				t.Fatal(err)
			}
			if got := names(d.ordered(gpus)); got != "gpu-0 gpu-1 " {
				t.Errorf("unprepared: order %q, want NVML order", got)
			}
		})
	}
	if _, err := New(Options{NodeName: "n", Config: config.Default(), Inventory: inventoryOf(config.Default()), Placement: "pack"}); err == nil {
		t.Error("placement \"pack\" accepted")
	}
}

func inventoryOf(cfg *config.Config) Inventory { return deviceplugin.HostInventory{Config: cfg} }
