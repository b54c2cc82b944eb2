//go:build e2e

package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-dev/vgpu/internal/allocation"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// registrar is the kubelet's Registration service (the real API) on kubelet.sock.
type registrar struct {
	pluginapi.UnimplementedRegistrationServer
	got chan *pluginapi.RegisterRequest
}

func (r *registrar) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.got <- req
	return &pluginapi.Empty{}, nil
}

// TestDevicePluginSimulatedHost runs `vgpu node --device-plugin` (what the
// DaemonSet runs: the host daemon serving the plugin too) on the simulated
// 4-GPU host (NVML of the simulator, through the driver root of the config):
// it advertises each GPU's memory in GiB and 100 cores units per GPU, and a
// container's units stay on one GPU.
func TestDevicePluginSimulatedHost(t *testing.T) {
	requireRoot(t)
	e := newEnvSim(t, "dp", simroot.Options{Devices: []simroot.Device{{MemoryBytes: 8 << 30}, {MemoryBytes: 8 << 30}, {MemoryBytes: 16 << 30}, {MemoryBytes: 16 << 30}}})
	grants := filepath.Join(e.dir, "grants")
	appendConfig(t, e, "[kubernetes]\ngrant_dir = \""+grants+"\"\n")
	pluginDir := filepath.Join(e.dir, "dp")
	mkdirAll(t, pluginDir, 0o700)
	l, err := net.Listen("unix", filepath.Join(pluginDir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	reg := &registrar{got: make(chan *pluginapi.RegisterRequest, 4)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, reg)
	// Serve returns when Stop below ends it; the registration the test
	// waits for is what says it served.
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	bin := binaries(t)
	// Through the alias that DaemonSets written before vgpu-node run.
	startDaemon(t, "vgpu node --device-plugin", filepath.Join(e.dir, "dp.log"), e.dir, e.vars(),
		filepath.Join(bin, "vgpu"), "node", "--device-plugin", "--state-dir", e.stateDir, "--listen", "", "--plugin-dir", pluginDir)
	endpoints := map[string]string{}
	for len(endpoints) < 2 {
		select {
		case r := <-reg.got:
			endpoints[r.ResourceName] = r.Endpoint
		case <-time.After(60 * time.Second):
			b, _ := os.ReadFile(filepath.Join(e.dir, "dp.log"))
			t.Fatalf("the plugin registered %v in 60 s\n%s", endpoints, b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list := func(res string) (pluginapi.DevicePluginClient, map[string]int) {
		conn, err := grpc.NewClient("unix://"+filepath.Join(pluginDir, endpoints[res]), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		c := pluginapi.NewDevicePluginClient(conn)
		s, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, d := range r.Devices {
			if d.Health != pluginapi.Healthy {
				t.Errorf("%s: %s is %s", res, d.ID, d.Health)
			}
			uuid, _, _ := strings.Cut(d.ID, "::")
			per[uuid]++
		}
		return c, per
	}
	mc, mem := list(allocation.ResourceMemory)
	_, cores := list(allocation.ResourceCores)
	if len(mem) != 4 || len(cores) != 4 {
		t.Fatalf("GPUs advertised: memory %v, cores %v; want 4 each", mem, cores)
	}
	var sizes []int
	var uuids []string
	for _, gpu := range e.sim.Devices() {
		sizes = append(sizes, mem[gpu.UUID])
		uuids = append(uuids, gpu.UUID)
		if cores[gpu.UUID] != 100 {
			t.Errorf("%s: %d cores units, want 100", gpu.UUID, cores[gpu.UUID])
		}
	}
	if want := []int{8, 8, 16, 16}; !equalInts(sizes, want) {
		t.Errorf("memory units per GPU %v, want %v (GiB)", sizes, want)
	}
	// 10 units fit only GPU 2 or 3: the preference is all on GPU 2.
	var avail []string
	for _, u := range uuids {
		for n := 0; n < mem[u]; n++ {
			avail = append(avail, u+"::"+strconv.Itoa(n))
		}
	}
	pr, err := mc.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	ids := pr.ContainerResponses[0].DeviceIDs
	if len(ids) != 10 {
		t.Fatalf("preferred %v", ids)
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, uuids[2]+"::") {
			t.Fatalf("preferred %v, want all 10 on GPU 2 (%s)", ids, uuids[2])
		}
	}
	ar, err := mc.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := allocation.ForContainer(grants, ar.ContainerResponses[0].Annotations)
	if err != nil {
		t.Fatal(err)
	}
	if req == nil || req.MemoryBytes != 10<<30 || req.UUID != uuids[2] {
		t.Errorf("granted %+v, want 10 GiB on %s", req, uuids[2])
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
