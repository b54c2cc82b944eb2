//go:build integration

package dra

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/vgpu-dev/vgpu/internal/cdispec"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// A claim's priority is its DeviceClass's (FromClass), else the host's
// defaults.priority; a claim that asks for a priority itself (FromClaim
// parameters for vgpu.io) is refused and nothing is written.
func TestClaimPriorityFromClass(t *testing.T) {
	requireRoot(t)
	cfg := testConfig(t)
	cfg.Defaults.Priority = "low"
	cdiDir := filepath.Join(t.TempDir(), "cdi")
	d := newDriver(t, cfg, cdiDir)
	ctx := context.Background()
	gpu0 := result{request: "gpu", pool: "node-a", device: "gpu-0", memory: "1Gi", cores: "30"}
	const high = `{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "priority": "high"}`
	for _, tc := range []struct {
		name, uid string
		c         func(uid string) *resourceapi.ResourceClaim
		want      tenant.Priority
		refused   string
	}{
		{"host default", "00000000-0000-4000-8000-0000000000d1",
			func(u string) *resourceapi.ResourceClaim { return claim(u, gpu0) }, tenant.Low, ""},
		{"class high", "00000000-0000-4000-8000-0000000000d2",
			func(u string) *resourceapi.ResourceClaim {
				return withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, high)
			}, tenant.High, ""},
		{"claim asks high", "00000000-0000-4000-8000-0000000000d3",
			func(u string) *resourceapi.ResourceClaim {
				return withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClaim, DriverName, high, "gpu")
			}, 0, "the priority are set by the DeviceClass or the host"},
		{"claim asks high beside the class's", "00000000-0000-4000-8000-0000000000d4",
			func(u string) *resourceapi.ResourceClaim {
				c := withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, classNone)
				return withConfig(c, resourceapi.AllocationConfigSourceClaim, DriverName, high)
			}, 0, "never by a claim"},
	} {
		c := tc.c(tc.uid)
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		if err != nil {
			t.Fatal(err)
		}
		e := res[c.UID].Err
		if tc.refused != "" {
			if e == nil || !strings.Contains(e.Error(), tc.refused) {
				t.Errorf("%s: %v, want %q", tc.name, e, tc.refused)
			}
			if _, err := os.Stat(filepath.Join(cdiDir, cdispec.ClaimFileName(string(c.UID)))); !os.IsNotExist(err) {
				t.Errorf("%s: a CDI spec was written (%v)", tc.name, err)
			}
			if _, err := state.Read(cfg.StateDir, StateID(c.UID)); !os.IsNotExist(err) {
				t.Errorf("%s: state was written (%v)", tc.name, err)
			}
			continue
		}
		if e != nil {
			t.Fatalf("%s: %v", tc.name, e)
		}
		rec, err := state.Read(cfg.StateDir, StateID(c.UID))
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Devices[0].Priority; got != tc.want {
			t.Errorf("%s: priority %s, want %s", tc.name, got, tc.want)
		}
		unprepare(t, d, kubeletplugin.NamespacedObject{UID: c.UID})
	}
}
