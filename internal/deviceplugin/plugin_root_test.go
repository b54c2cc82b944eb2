//go:build integration

package deviceplugin

// Root only: allocation.ForContainer trusts a grant directory that root owns, as
// vgpu-runtime does.

import (
	"context"
	"os"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-dev/vgpu/internal/allocation"
)

func TestRegisterListAllocate(t *testing.T) {
	h := start(t, 1, 16)
	regs := h.kubelet.registrations(t, 2)
	mem, cores := regs[allocation.ResourceMemory], regs[allocation.ResourceCores]
	if mem == nil || cores == nil {
		t.Fatalf("registered %v, want %s and %s", regs, allocation.ResourceMemory, allocation.ResourceCores)
	}
	if !mem.Options.GetPreferredAllocationAvailable {
		t.Error("GetPreferredAllocationAvailable not advertised")
	}
	ctx := context.Background()
	mc := h.client(t, mem.Endpoint)
	stream, err := mc.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ok, bad := count(first.Devices); ok != 16 || bad != 0 {
		t.Fatalf("vgpu.io/memory: %d healthy, %d unhealthy units; want 16 (16 GiB in 1 GiB units)", ok, bad)
	}
	cc := h.client(t, cores.Endpoint)
	cs, err := cc.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := cs.Recv(); err != nil || len(r.Devices) != 100 {
		t.Fatalf("vgpu.io/cores: %v units, %v; want 100", r, err)
	}

	// Allocate 3 memory units and 30 cores units for one container.
	var ids []string
	for _, d := range first.Devices[:3] {
		ids = append(ids, d.ID)
	}
	ar, err := mc.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	ann := ar.ContainerResponses[0].Annotations
	var cids []string
	for i := 0; i < 30; i++ {
		cids = append(cids, unitID(h.inv.gpus[0].UUID, i))
	}
	car, err := cc.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: cids}}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range car.ContainerResponses[0].Annotations {
		ann[k] = v
	}
	if len(ar.ContainerResponses[0].Envs) != 0 {
		t.Errorf("Allocate returned env %v: env is the pod's to write and must carry no grant", ar.ContainerResponses[0].Envs)
	}
	// What vgpu-runtime makes of the annotations.
	req, err := allocation.ForContainer(h.grants, ann)
	if err != nil {
		t.Fatal(err)
	}
	if req == nil || req.MemoryBytes != 3<<30 || req.ComputePercent != 30 || req.UUID != h.inv.gpus[0].UUID {
		t.Fatalf("request from grants %v = %+v; want 3 GiB, 30 %% on %s", ann, req, h.inv.gpus[0].UUID)
	}
	fi, err := os.Stat(h.grants)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("grant directory mode %v, %v; want 0700 (only root writes it)", fi.Mode(), err)
	}

	// A GPU that disappears from the inventory turns Unhealthy in ListAndWatch.
	h.inv.set(nil)
	if !h.plugin.refresh() {
		t.Fatal("refresh saw no change")
	}
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ok, bad := count(next.Devices); ok != 0 || bad != 16 {
		t.Fatalf("after the GPU vanished: %d healthy, %d unhealthy; want 0, 16", ok, bad)
	}
	if _, err := mc.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err == nil {
		t.Fatal("Allocate on an unhealthy GPU succeeded")
	}
}
