//go:build integration

package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-dev/vgpu/internal/allocation"
	"github.com/vgpu-dev/vgpu/internal/config"
)

// PlacementSequence is a fixed sequence of 20 pods of mixed sizes (memory
// in 1 GiB units, cores in percent) that fits two 16 GiB GPUs; the e2e test
// (test/e2e/kubernetes_test.go) runs the same one through a real kubelet.
var placementSequence = [][2]int{
	{4, 25}, {1, 5}, {2, 15}, {1, 10}, {2, 10}, {1, 20}, {2, 5}, {1, 10}, {2, 15}, {1, 5},
	{1, 10}, {1, 5}, {1, 10}, {2, 5}, {1, 5}, {1, 5}, {1, 5}, {1, 10}, {1, 5}, {1, 5},
}

// kubeletSim makes the device manager's calls of a kubelet 1.37 for one
// container (pkg/kubelet/cm/devicemanager: for each resource,
// GetPreferredAllocation with every free unit, then Allocate of what it
// preferred), keeping the kubelet's account of the units in use.
type kubeletSim struct {
	t       *testing.T
	h       *harness
	clients map[string]pluginapi.DevicePluginClient
	all     map[string][]string        // resource → every unit
	used    map[string]map[string]bool // resource → unit → allocated
}

func newKubeletSim(t *testing.T, h *harness) *kubeletSim {
	regs := h.kubelet.registrations(t, 2)
	k := &kubeletSim{t: t, h: h, clients: map[string]pluginapi.DevicePluginClient{}, all: map[string][]string{}, used: map[string]map[string]bool{}}
	for res, r := range regs {
		k.clients[res] = h.client(t, r.Endpoint)
		s, err := k.clients[res].ListAndWatch(context.Background(), &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range l.Devices {
			k.all[res] = append(k.all[res], d.ID)
		}
		sort.Strings(k.all[res])
		k.used[res] = map[string]bool{}
	}
	return k
}

// admit allocates a container's resources in the given order and returns
// the GPU vgpu-runtime gives it, or its refusal.
func (k *kubeletSim) admit(order []string, size map[string]int) (string, error) {
	ctx := context.Background()
	ann := map[string]string{}
	for _, res := range order {
		var free []string
		for _, id := range k.all[res] {
			if !k.used[res][id] {
				free = append(free, id)
			}
		}
		if len(free) < size[res] {
			return "", fmt.Errorf("requested number of devices unavailable for %s", res)
		}
		pr, err := k.clients[res].GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: free, AllocationSize: int32(size[res])}}})
		if err != nil {
			k.t.Fatal(err)
		}
		ids := pr.ContainerResponses[0].DeviceIDs
		if len(ids) != size[res] {
			ids = free[:size[res]] // the kubelet's fallback: any free units
		}
		for _, id := range ids {
			k.used[res][id] = true
		}
		ar, err := k.clients[res].Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		if err != nil {
			return "", err
		}
		for a, v := range ar.ContainerResponses[0].Annotations {
			ann[a] = v
		}
	}
	a, err := allocation.ForContainer(k.h.grants, ann)
	if err != nil {
		return "", err
	}
	return a.UUID, nil
}

// startPolicy is start with a placement policy and a clock that stands still.
func startPolicy(t *testing.T, n int, gib uint64, policy string) *harness {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &harness{dir: dir, grants: filepath.Join(dir, "grants"), inv: &fakeInventory{gpus: gpus(n, gib)}}
	h.kubelet = startKubelet(t, dir)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.plugin, err = New(Options{PluginDir: dir, GrantDir: h.grants, Inventory: h.inv, HealthInterval: time.Hour,
		Placement: policy, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.plugin.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Errorf("the plugin's Run: %v", err)
		}
	})
	return h
}

// gpuLoad is what the pods placed so far hold of one GPU.
type gpuLoad struct{ mem, cores, pods int }

// CheckPolicy asserts what the policy promises of pod i (mem, cores), put on
// GPU at, given the loads before it (GPUs of 16 units, 100 cores).
func checkPolicy(t *testing.T, policy string, i int, pod [2]int, at int, load []gpuLoad, gib int) {
	t.Helper()
	room := func(l gpuLoad) bool { return l.mem+pod[0] <= gib && l.cores+pod[1] <= 100 }
	for j, l := range load {
		if j == at || !room(l) {
			continue
		}
		switch policy {
		case config.PlacementBinpack:
			if load[at].pods == 0 && l.pods > 0 {
				t.Errorf("binpack: pod %d (%d GiB, %d cores) opened empty GPU %d while GPU %d (%+v) had room", i, pod[0], pod[1], at, j, l)
			}
		case config.PlacementSpread:
			if load[at].pods > 0 && l.pods == 0 {
				t.Errorf("spread: pod %d (%d GiB, %d cores) went to used GPU %d (%+v) while GPU %d was empty", i, pod[0], pod[1], at, load[at], j)
			}
		}
	}
}

// TestPlacementSequence runs the fixed sequence of 20 pods through the
// kubelet's calls, with memory or cores first (the kubelet's order is a map
// order), on 2 and 4 GPUs, under both policies: no container is refused,
// each has both resources on one GPU, and the GPUs fill as the policy says.
func TestPlacementSequence(t *testing.T) {
	const gib = 16
	for _, n := range []int{2, 4} {
		for _, policy := range []string{config.PlacementBinpack, config.PlacementSpread} {
			for _, first := range []string{allocation.ResourceMemory, allocation.ResourceCores} {
				t.Run(fmt.Sprintf("%dgpus-%s-%s-first", n, policy, filepath.Base(first)), func(t *testing.T) {
					h := startPolicy(t, n, gib, policy)
					k := newKubeletSim(t, h)
					order := []string{allocation.ResourceMemory, allocation.ResourceCores}
					if first == allocation.ResourceCores {
						order[0], order[1] = order[1], order[0]
					}
					load := make([]gpuLoad, n)
					var at []int
					for i, pod := range placementSequence {
						uuid, err := k.admit(order, map[string]int{allocation.ResourceMemory: pod[0], allocation.ResourceCores: pod[1]})
						if err != nil {
							t.Fatalf("pod %d (%d GiB, %d cores), placed so far %v: %v", i, pod[0], pod[1], at, err)
						}
						g := -1
						for _, gpu := range h.inv.gpus {
							if gpu.UUID == uuid {
								g = gpu.Index
							}
						}
						checkPolicy(t, policy, i, pod, g, load, gib)
						load[g].mem += pod[0]
						load[g].cores += pod[1]
						load[g].pods++
						at = append(at, g)
					}
					t.Logf("GPUs of the 20 pods: %v; loads %+v", at, load)
					if policy == config.PlacementSpread {
						lo, hi := load[0].mem, load[0].mem
						for _, l := range load {
							lo, hi = min(lo, l.mem), max(hi, l.mem)
						}
						if hi-lo > 4 {
							t.Errorf("spread: memory per GPU %+v differs by %d GiB, more than the largest pod (4)", load, hi-lo)
						}
					}
				})
			}
		}
	}
}

// TestPairing: the second resource follows the first only when it is the
// first's partner: within pairWindow, and not after a completed pair.
func TestPairing(t *testing.T) {
	g := gpus(2, 16)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pl := newPlacer(config.PlacementSpread, []resource{memoryResource(1 << 30), coresResource()}, func() time.Time { return clock })
	avail := func(res resource) map[string][]string {
		m := map[string][]string{}
		for _, gpu := range g {
			for n := 0; n < res.unitsOf(gpu); n++ {
				m[gpu.UUID] = append(m[gpu.UUID], unitID(gpu.UUID, n))
			}
		}
		return m
	}
	on := func(ids []string) string { u, _ := unitGPU(ids[0]); return u }
	mem, cores := allocation.ResourceMemory, allocation.ResourceCores
	// GPU 1 holds 4 GiB: spread puts a first resource on GPU 0.
	pl.allocated(mem, g[1].UUID, 4, g)
	pl.allocated(cores, g[1].UUID, 10, g) // completes the pair: no partner for what follows
	if got := on(preferred(pl, mem, g, avail(memoryResource(1<<30)), nil, 1)); got != g[0].UUID {
		t.Fatalf("after a completed pair: memory on %s, want the emptier GPU 0", got)
	}
	// A container's memory went to GPU 1: its cores follow it there, although spread would pick GPU 0.
	pl.allocated(mem, g[1].UUID, 1, g)
	if got := on(preferred(pl, cores, g, avail(coresResource()), nil, 5)); got != g[1].UUID {
		t.Fatalf("cores after this container's memory on GPU 1: on %s, want GPU 1", got)
	}
	// The same, with the cores asked after pairWindow: another container's.
	clock = clock.Add(pairWindow + time.Second)
	if got := on(preferred(pl, cores, g, avail(coresResource()), nil, 5)); got != g[0].UUID {
		t.Fatalf("cores %v after a memory grant: on %s, want the policy's GPU 0", pairWindow+time.Second, got)
	}
}

// TestRoomForTheOtherResource: a container's first resource avoids a GPU
// whose other resource is nearly gone, even under binpack.
func TestRoomForTheOtherResource(t *testing.T) {
	g := gpus(2, 16)
	pl := newPlacer(config.PlacementBinpack, []resource{memoryResource(1 << 30), coresResource()}, time.Now)
	pl.allocated(allocation.ResourceMemory, g[0].UUID, 2, g)
	pl.allocated(allocation.ResourceCores, g[0].UUID, 95, g)
	m := map[string][]string{}
	for _, gpu := range g {
		for n := 0; n < 14; n++ {
			m[gpu.UUID] = append(m[gpu.UUID], unitID(gpu.UUID, n))
		}
	}
	// 4 GiB is a quarter of a GPU: about 25 cores are to come, GPU 0 has 5.
	ids := preferred(pl, allocation.ResourceMemory, g, m, nil, 4)
	if u, _ := unitGPU(ids[0]); u != g[1].UUID {
		t.Fatalf("4 GiB beside a GPU with 5 cores left: on %s, want GPU 1", u)
	}
}
