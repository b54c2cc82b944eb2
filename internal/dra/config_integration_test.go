//go:build integration

package dra

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/vgpu-dev/vgpu/internal/cdispec"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// withConfig adds an allocation config for driver, as the scheduler copies
// it from the class (FromClass) or the claim (FromClaim).
func withConfig(c *resourceapi.ResourceClaim, src resourceapi.AllocationConfigSource, driver, params string, requests ...string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source: src, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}},
	})
	return c
}

// The limits of a claim's devices: the DeviceClass's config for vgpu.io
// where there is one, else the host's kubernetes.cores_limit and
// memory_limit (memory capacity is the request); never the
// claim's: a claim that gives vgpu.io parameters is refused, naming the
// claim and saying where the limit comes from, and nothing is written.
func TestClaimLimitFromClassOrHost(t *testing.T) {
	requireRoot(t)
	cfg := testConfig(t) // cores_limit "request": the limit is the request
	cdiDir := filepath.Join(t.TempDir(), "cdi")
	d := newDriver(t, cfg, cdiDir)
	ctx := context.Background()
	gpu0 := result{request: "gpu", pool: "node-a", device: "gpu-0", memory: "1Gi", cores: "30"}
	for _, tc := range []struct {
		name, uid string
		c         func(uid string) *resourceapi.ResourceClaim
		want      string // in the quota file, or the error
		refused   bool
	}{
		{"host policy", "00000000-0000-4000-8000-0000000000c1",
			func(u string) *resourceapi.ResourceClaim { return claim(u, gpu0) }, "memory=1073741824 memory-request=1073741824 compute=30 compute-request=30 ", false},
		{"class: none", "00000000-0000-4000-8000-0000000000c2",
			func(u string) *resourceapi.ResourceClaim {
				return withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, classNone)
			}, "memory=1073741824 memory-request=1073741824 compute-request=30 ", false},
		{"class: for another request", "00000000-0000-4000-8000-0000000000c3",
			func(u string) *resourceapi.ResourceClaim {
				return withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, classNone, "other")
			}, "memory=1073741824 memory-request=1073741824 compute=30 compute-request=30 ", false},
		{"another driver's config", "00000000-0000-4000-8000-0000000000c4",
			func(u string) *resourceapi.ResourceClaim {
				return withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClaim, "gpu.example.com", `{"x": 1}`)
			}, "memory=1073741824 memory-request=1073741824 compute=30 compute-request=30 ", false},
		{"claim's own config", "00000000-0000-4000-8000-0000000000c5",
			func(u string) *resourceapi.ResourceClaim {
				return withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClaim, DriverName, classNone, "gpu")
			}, "never by a claim; remove that config from the claim", true},
		{"claim's config beside the class's", "00000000-0000-4000-8000-0000000000c6",
			func(u string) *resourceapi.ResourceClaim {
				c := withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, classNone)
				return withConfig(c, resourceapi.AllocationConfigSourceClaim, DriverName, classNone)
			}, "never by a claim", true},
		{"class config that does not parse", "00000000-0000-4000-8000-0000000000c7",
			func(u string) *resourceapi.ResourceClaim {
				return withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, `{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "coresLimit": "50"}`)
			}, `coresLimit "50": use "request"`, true},
		{"class: memoryLimit none", "00000000-0000-4000-8000-0000000000c9",
			func(u string) *resourceapi.ResourceClaim {
				return withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, `{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "memoryLimit": "none"}`)
			}, "device 0 GPU-5e3b6a2e-0000-4000-8000-000000000000 memory=85899345920 memory-request=1073741824 compute=30 compute-request=30 ", false}, // no limit: the GPU's memory, the most it may borrow
		{"class: memoryLimit a size", "00000000-0000-4000-8000-0000000000ca",
			func(u string) *resourceapi.ResourceClaim {
				return withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, `{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "memoryLimit": "2Gi"}`)
			}, "memory=2147483648 memory-request=1073741824 compute=30 compute-request=30 ", false},
		{"classes that disagree on memory", "00000000-0000-4000-8000-0000000000cb",
			func(u string) *resourceapi.ResourceClaim {
				c := withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, `{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "memoryLimit": "none"}`)
				return withConfig(c, resourceapi.AllocationConfigSourceClass, DriverName, `{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "coresLimit": "none", "memoryLimit": "2Gi"}`)
			}, `memoryLimit "none"`, true},
		{"classes that disagree", "00000000-0000-4000-8000-0000000000c8",
			func(u string) *resourceapi.ResourceClaim {
				c := withConfig(claim(u, gpu0), resourceapi.AllocationConfigSourceClass, DriverName, classNone)
				return withConfig(c, resourceapi.AllocationConfigSourceClass, DriverName, `{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "coresLimit": "request"}`)
			}, "disagree", true},
	} {
		c := tc.c(tc.uid)
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		if err != nil {
			t.Fatal(err)
		}
		e := res[c.UID].Err
		if tc.refused {
			if e == nil || !strings.Contains(e.Error(), tc.want) || !strings.Contains(e.Error(), "ns/"+c.Name) {
				t.Errorf("%s: %v, want an error naming the claim with %q", tc.name, e, tc.want)
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
			t.Errorf("%s: %v", tc.name, e)
			continue
		}
		if q := quotaOf(t, cfg, string(c.UID)); !strings.Contains(q, tc.want) {
			t.Errorf("%s: quota:\n%s\nwant %q", tc.name, q, tc.want)
		}
		unprepare(t, d, kubeletplugin.NamespacedObject{UID: c.UID})
	}
}
