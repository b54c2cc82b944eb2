package deviceplugin

import (
	"context"
	"errors"
	"os"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-dev/vgpu/internal/allocation"
)

// Each Allocate writes the node's pods' PriorityClasses (from the API
// server) beside the records, so that vgpu-runtime finds the class of the
// pod it creates a container for; a failed listing keeps the last file
// and the allocation goes on.
func TestAllocateWritesPodClasses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the pod classes are read back only when root owns them")
	}
	listed := map[string]string{"uid-a": "online"}
	var listErr error
	h := startWith(t, 1, 8, func(o *Options) {
		o.PodClasses = func(context.Context) (map[string]string, error) { return listed, listErr }
	})
	regs := h.kubelet.registrations(t, 2)
	ctx := context.Background()
	cc := h.client(t, regs[allocation.ResourceCores].Endpoint)
	alloc := func(unit int) {
		t.Helper()
		if _, err := cc.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{unitID(h.inv.gpus[0].UUID, unit)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	class := func(uid string) string {
		t.Helper()
		c, _, err := allocation.PodClass(h.grants, uid)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := class("uid-a"); c != "" {
		t.Fatalf("class %q before any Allocate", c)
	}
	alloc(0)
	if c := class("uid-a"); c != "online" {
		t.Errorf("after Allocate: pod uid-a class %q, want online", c)
	}
	listed = map[string]string{"uid-b": "batch"}
	alloc(1)
	if a, b := class("uid-a"), class("uid-b"); a != "" || b != "batch" {
		t.Errorf("after the second Allocate: uid-a %q, uid-b %q; want the new list only", a, b)
	}
	listErr = errors.New("API server down")
	alloc(2)
	if b := class("uid-b"); b != "batch" {
		t.Errorf("a failed listing: uid-b %q, want the last file kept", b)
	}
}
