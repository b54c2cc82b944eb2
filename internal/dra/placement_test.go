//go:build integration

package dra

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
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

// A container that names two vgpu.io claims would get one claim's quota
// and both GPUs: both claims are refused, naming the container; two
// containers with a claim each are fine.
func TestContainerWithTwoClaimsRefused(t *testing.T) {
	str := func(s string) *string { return &s }
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "pod-uid"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "a", ResourceClaimTemplateName: str("t")}, {Name: "b", ResourceClaimName: str("c-b")}},
			Containers: []corev1.Container{
				{Name: "both", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "a"}, {Name: "b"}}}},
				{Name: "one", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "a"}}}},
			},
		},
		Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "a", ResourceClaimName: str("p-a-x")}}},
	}
	client := fake.NewClientset(pod)
	d, err := New(Options{NodeName: "node-a", Config: config.Default(), Inventory: inventoryOf(config.Default()), KubeClient: client})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string) *resourceapi.ResourceClaim {
		c := claim("uid-"+name, result{request: "g", pool: "node-a", device: "gpu-0", memory: "1Gi", cores: "10"})
		c.Name = name
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-uid"}}
		return c
	}
	claims := []*resourceapi.ResourceClaim{mk("p-a-x"), mk("c-b")}
	errs := d.claimsTogether(context.Background(), claims)
	for _, c := range claims {
		if err := errs[c.UID]; err == nil || !strings.Contains(err.Error(), `container "both" of pod ns/p names 2 vgpu.io claims`) {
			t.Errorf("claim %s: %v, want a refusal naming container both", c.Name, err)
		}
	}
	t.Log(errs[claims[0].UID])
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "b"}}
	if _, err := client.CoreV1().Pods("ns").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if errs := d.claimsTogether(context.Background(), claims); len(errs) != 0 {
		t.Errorf("one claim per container: %v, want no refusal", errs)
	}
}

// One claim, two requests on two GPUs: the claim's quota lists both, each
// with its request's limits (what a container that needs two GPUs names).
func TestClaimOnTwoGPUs(t *testing.T) {
	requireRoot(t)
	cfg := testConfig(t)
	d := newDriver(t, cfg, filepath.Join(t.TempDir(), "cdi"))
	ctx := context.Background()
	c := claim("00000000-0000-4000-8000-000000000301",
		result{request: "a", pool: "node-a", device: "gpu-0", memory: "8Gi", cores: "30"},
		result{request: "b", pool: "node-a", device: "gpu-1", memory: "2Gi", cores: "50"})
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil {
		t.Fatal(err, res[c.UID].Err)
	}
	t.Cleanup(func() { unprepare(t, d, kubeletplugin.NamespacedObject{UID: c.UID}) })
	q := quotaOf(t, cfg, string(c.UID))
	for _, want := range []string{"device 0 " + simroot.DefaultUUID(0) + " memory=8589934592 memory-request=8589934592 compute=30", "device 1 " + simroot.DefaultUUID(1) + " memory=2147483648 memory-request=2147483648 compute=50"} {
		if !strings.Contains(q, want) {
			t.Errorf("quota:\n%s\nwant %q", q, want)
		}
	}
}
