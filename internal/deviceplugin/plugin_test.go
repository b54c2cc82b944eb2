package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-dev/vgpu/internal/allocation"
	"github.com/vgpu-dev/vgpu/internal/discover"
)

// fakeKubelet serves the real Registration service on kubelet.sock.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	got chan *pluginapi.RegisterRequest
	srv *grpc.Server
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{got: make(chan *pluginapi.RegisterRequest, 16)}
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, fmt.Errorf("version %q", r.Version)
	}
	k.got <- r
	return &pluginapi.Empty{}, nil
}

// registrations waits for n registrations and returns them by resource.
func (k *fakeKubelet) registrations(t *testing.T, n int) map[string]*pluginapi.RegisterRequest {
	t.Helper()
	out := map[string]*pluginapi.RegisterRequest{}
	for len(out) < n {
		select {
		case r := <-k.got:
			out[r.ResourceName] = r
		case <-time.After(20 * time.Second):
			t.Fatalf("registrations: got %d of %d", len(out), n)
		}
	}
	return out
}

type fakeInventory struct {
	mu   sync.Mutex
	gpus []discover.GPU
	err  error
}

func (f *fakeInventory) GPUs() ([]discover.GPU, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]discover.GPU(nil), f.gpus...), f.err
}

func (f *fakeInventory) set(gpus []discover.GPU) {
	f.mu.Lock()
	f.gpus = gpus
	f.mu.Unlock()
}

func gpus(n int, gib uint64) []discover.GPU {
	var out []discover.GPU
	for i := 0; i < n; i++ {
		out = append(out, discover.GPU{Index: i, UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i), MemoryBytes: gib << 30})
	}
	return out
}

type harness struct {
	dir, grants string
	kubelet     *fakeKubelet
	inv         *fakeInventory
	plugin      *Plugin
	cancel      func()
	done        chan error
}

func start(t *testing.T, n int, gib uint64) *harness {
	t.Helper()
	return startWith(t, n, gib, func(*Options) {})
}

// startWith is start with options edited by edit.
func startWith(t *testing.T, n int, gib uint64, edit func(*Options)) *harness {
	t.Helper()
	// A short path: unix socket names are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &harness{dir: dir, grants: filepath.Join(dir, "grants"), inv: &fakeInventory{gpus: gpus(n, gib)}}
	h.kubelet = startKubelet(t, dir)
	o := Options{PluginDir: dir, GrantDir: h.grants, Inventory: h.inv, HealthInterval: time.Hour}
	edit(&o)
	h.plugin, err = New(o)
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

func (h *harness) client(t *testing.T, endpoint string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(h.dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

func count(devs []*pluginapi.Device) (healthy, unhealthy int) {
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			healthy++
		} else {
			unhealthy++
		}
	}
	return
}

func TestPreferredAllocationOneGPU(t *testing.T) {
	h := start(t, 4, 8)
	regs := h.kubelet.registrations(t, 2)
	ctx := context.Background()
	mc := h.client(t, regs[allocation.ResourceMemory].Endpoint)
	g := h.inv.gpus
	// GPU 0 has 2 units left, GPU 1 has 5, GPUs 2 and 3 have 8: a request for
	// 4 units must come from GPU 1 (the first that fits), all of them.
	var avail []string
	for gi, free := range []int{2, 5, 8, 8} {
		for n := 0; n < free; n++ {
			avail = append(avail, unitID(g[gi].UUID, 8-free+n))
		}
	}
	resp, err := mc.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: avail, AllocationSize: 4},
		{AvailableDeviceIDs: avail, MustIncludeDeviceIDs: []string{unitID(g[3].UUID, 0)}, AllocationSize: 3},
		{AvailableDeviceIDs: avail, AllocationSize: 9},
	}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(i int, want string, size int) {
		t.Helper()
		ids := resp.ContainerResponses[i].DeviceIDs
		if len(ids) != size {
			t.Fatalf("request %d: preferred %v, want %d units", i, ids, size)
		}
		for _, id := range ids {
			if u, _ := unitGPU(id); u != want {
				t.Fatalf("request %d: preferred %v, want every unit on %s", i, ids, want)
			}
		}
	}
	check(0, g[1].UUID, 4)
	check(1, g[3].UUID, 3)
	if ids := resp.ContainerResponses[2].DeviceIDs; len(ids) != 0 {
		t.Fatalf("9 units with at most 8 per GPU: preferred %v, want none (no GPU fits)", ids)
	}
	// Units the kubelet picked across GPUs anyway are refused, naming why.
	_, err = mc.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{unitID(g[0].UUID, 7), unitID(g[1].UUID, 7)}}}})
	if err == nil {
		t.Fatal("Allocate of units on two GPUs succeeded")
	}
	t.Logf("units on two GPUs: %v", err)

	// Memory on GPU 0 and cores on GPU 1: vgpu-runtime refuses the container.
	mr, err := mc.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{unitID(g[0].UUID, 0)}}}})
	if err != nil {
		t.Fatal(err)
	}
	cr, err := h.client(t, regs[allocation.ResourceCores].Endpoint).Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{unitID(g[1].UUID, 0)}}}})
	if err != nil {
		t.Fatal(err)
	}
	ann := map[string]string{}
	for _, r := range []*pluginapi.AllocateResponse{mr, cr} {
		for k, v := range r.ContainerResponses[0].Annotations {
			ann[k] = v
		}
	}
	if req, err := allocation.ForContainer(h.grants, ann); err == nil {
		t.Fatalf("memory and cores granted on two GPUs: runtime request %+v, want an error", req)
	}
}

func TestReregisterAfterKubeletRestart(t *testing.T) {
	h := start(t, 1, 4)
	regs := h.kubelet.registrations(t, 2)
	// A kubelet restart: it stops, removes every socket in the directory,
	// and serves kubelet.sock anew.
	h.kubelet.srv.Stop()
	ents, err := os.ReadDir(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".sock" {
			os.Remove(filepath.Join(h.dir, e.Name()))
		}
	}
	k2 := startKubelet(t, h.dir)
	again := k2.registrations(t, 2)
	for name, r := range again {
		if r.Endpoint != regs[name].Endpoint {
			t.Errorf("%s: endpoint %s after restart, was %s", name, r.Endpoint, regs[name].Endpoint)
		}
		// The endpoint serves again.
		s, err := h.client(t, r.Endpoint).ListAndWatch(context.Background(), &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatalf("%s after restart: %v", name, err)
		}
	}
}

// A restarting kubelet binds kubelet.sock (the watch sees it created) before
// it listens: a connection then is refused. The plugin must register once
// the kubelet listens, with no further event (seen in the real-kubelet e2e
// test: one of the two resources stayed unregistered for good).
func TestRegisterWhenKubeletListensLate(t *testing.T) {
	h := start(t, 1, 4)
	h.kubelet.registrations(t, 2)
	h.kubelet.srv.Stop()
	ents, err := os.ReadDir(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".sock" {
			os.Remove(filepath.Join(h.dir, e.Name()))
		}
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: filepath.Join(h.dir, "kubelet.sock")}); err != nil {
		t.Fatal(err)
	}
	// Bound, not listening: a connect is refused now.
	probe, err := net.Dial("unix", filepath.Join(h.dir, "kubelet.sock"))
	if err == nil {
		probe.Close()
		t.Fatal("connect to a bound socket that does not listen: want refused")
	}
	time.Sleep(1500 * time.Millisecond) // the plugin's first tries meet the refusal
	if err := syscall.Listen(fd, 16); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "kubelet.sock")
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{got: make(chan *pluginapi.RegisterRequest, 16)}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	if regs := k.registrations(t, 2); len(regs) != 2 {
		t.Fatalf("registrations after the kubelet listened: %d, want 2", len(regs))
	}
}
