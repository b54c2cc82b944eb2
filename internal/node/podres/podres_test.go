//go:build integration

package podres

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/vgpu-dev/vgpu/internal/allocation"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// fakeKubelet serves the real PodResourcesLister service on a unix socket,
// answering List with pods (the kubelet itself is tested end to end in
// test/e2e/kubernetes_test.go).
type fakeKubelet struct {
	podresv1.UnimplementedPodResourcesListerServer
	mu    sync.Mutex
	pods  []*podresv1.PodResources
	calls int
}

func (f *fakeKubelet) List(context.Context, *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return &podresv1.ListPodResourcesResponse{PodResources: f.pods}, nil
}

func (f *fakeKubelet) set(pods ...*podresv1.PodResources) {
	f.mu.Lock()
	f.pods = pods
	f.mu.Unlock()
}

func (f *fakeKubelet) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func serve(t *testing.T, f *fakeKubelet) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	podresv1.RegisterPodResourcesListerServer(g, f)
	// Serve returns when t.Cleanup stops it; a server that fails shows as
	// the client's error.
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return sock
}

func pod(ns, name, ctr string, devs map[string][]string) *podresv1.PodResources {
	c := &podresv1.ContainerResources{Name: ctr}
	for res, ids := range devs {
		c.Devices = append(c.Devices, &podresv1.ContainerDevices{ResourceName: res, DeviceIds: ids})
	}
	return &podresv1.PodResources{Namespace: ns, Name: name, Containers: []*podresv1.ContainerResources{c}}
}

type fixture struct {
	t                     *testing.T
	stateDir, grants, tmp string
}

// container makes a state directory entry whose bundle's spec carries the
// given annotations, as vgpu-runtime leaves it for a CRI container.
func (f *fixture) container(id string, ann map[string]string) {
	f.t.Helper()
	bundle := filepath.Join(f.tmp, "bundles", id)
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		f.t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "annotations": ann})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		f.t.Fatal(err)
	}
	dir := filepath.Join(f.stateDir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	info, _ := json.Marshal(tenant.Record{Version: state.InfoVersion, ID: id, Bundle: bundle})
	if err := os.WriteFile(filepath.Join(dir, config.StateInfo), info, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// grant writes a record of res holding units and returns its annotation.
func (f *fixture) grant(res string, units ...string) map[string]string {
	f.t.Helper()
	id, _ := allocation.NewID()
	if err := allocation.Write(f.grants, &allocation.Record{ID: id, Resource: res, GPUUUID: "GPU-1", Units: len(units), DeviceIDs: units}); err != nil {
		f.t.Fatal(err)
	}
	return map[string]string{allocation.AnnotationKey(res): id}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func (f *fixture) pods() map[string]events.Pod {
	f.t.Helper()
	p, err := events.ReadPods(f.stateDir)
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func TestNamer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("grants are trusted only when root owns them: run as root (make test does)")
	}
	tmp := t.TempDir()
	f := &fixture{t: t, stateDir: filepath.Join(tmp, "state"), grants: filepath.Join(tmp, "grants"), tmp: tmp}
	if err := os.MkdirAll(f.stateDir, 0o711); err != nil {
		t.Fatal(err)
	}
	kl := &fakeKubelet{}
	sock := serve(t, kl)
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	n, err := New(Options{StateDir: f.stateDir, GrantDir: f.grants, Owners: Kubelet{Socket: sock}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scan := func() {
		t.Helper()
		if err := n.Scan(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A container with no grants (docker, a pod without vgpu resources):
	// the kubelet is never asked.
	f.container("plain", map[string]string{"io.kubernetes.cri.container-type": "container"})
	scan()
	if kl.count() != 0 || len(f.pods()) != 0 {
		t.Fatalf("a container without grants: %d List calls, pods %v", kl.count(), f.pods())
	}

	// A container granted memory and cores: named from the devices the kubelet lists.
	mem := f.grant(allocation.ResourceMemory, "GPU-1-m-0", "GPU-1-m-1")
	cores := f.grant(allocation.ResourceCores, "GPU-1-c-0")
	f.container("train", merge(mem, cores, map[string]string{"io.kubernetes.cri.container-type": "container"}))
	kl.set(pod("ml", "trainer-0", "main", map[string][]string{"vgpu.io/memory": {"GPU-1-m-0", "GPU-1-m-1"}, "vgpu.io/cores": {"GPU-1-c-0"}}),
		pod("ml", "other", "side", map[string][]string{"vgpu.io/memory": {"GPU-1-m-7"}, "example.com/fpga": {"GPU-1-m-0"}}))
	scan()
	want := events.Pod{Namespace: "ml", Name: "trainer-0", Container: "main"}
	if got := f.pods()["train"]; got != want || kl.count() != 1 {
		t.Fatalf("train: %+v after %d List calls, want %+v after 1", got, kl.count(), want)
	}
	// Named: no more questions, however often the state is scanned.
	for i := 0; i < 5; i++ {
		now = now.Add(time.Minute)
		scan()
	}
	if kl.count() != 1 {
		t.Errorf("%d List calls once every container was named, want 1", kl.count())
	}

	// A container the kubelet does not list yet: asked again after
	// FirstRetry, then twice that, not at every scan.
	late := f.grant(allocation.ResourceMemory, "GPU-1-m-2")
	f.container("late", late)
	kl.set(pod("ml", "trainer-0", "main", map[string][]string{"vgpu.io/memory": {"GPU-1-m-0", "GPU-1-m-1"}}))
	scan()
	if kl.count() != 2 {
		t.Fatalf("%d List calls, want 2", kl.count())
	}
	scan()
	now = now.Add(500 * time.Millisecond)
	scan()
	if kl.count() != 2 {
		t.Errorf("asked again before the retry time: %d List calls", kl.count())
	}
	now = now.Add(500 * time.Millisecond)
	scan()
	if kl.count() != 3 {
		t.Errorf("not asked again after 1 s: %d List calls", kl.count())
	}
	now = now.Add(time.Second)
	scan()
	if kl.count() != 3 {
		t.Errorf("asked again 1 s later, want 2 s (backoff): %d List calls", kl.count())
	}
	kl.set(pod("ml", "trainer-0", "main", map[string][]string{"vgpu.io/memory": {"GPU-1-m-0", "GPU-1-m-1"}}),
		pod("web", "late-pod", "app", map[string][]string{"vgpu.io/memory": {"GPU-1-m-2"}}))
	now = now.Add(time.Second)
	scan()
	if got := f.pods()["late"]; got != (events.Pod{Namespace: "web", Name: "late-pod", Container: "app"}) || kl.count() != 4 {
		t.Errorf("late: %+v after %d List calls", got, kl.count())
	}

	// A container that leaves the state directory leaves pods.json.
	os.RemoveAll(filepath.Join(f.stateDir, "late"))
	scan()
	if _, ok := f.pods()["late"]; ok || len(f.pods()) != 1 {
		t.Errorf("pods.json after late left: %v", f.pods())
	}

	// A restarted daemon starts from pods.json and asks nothing for what it names.
	n2, err := New(Options{StateDir: f.stateDir, GrantDir: f.grants, Owners: Kubelet{Socket: sock}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := n2.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if kl.count() != 4 || n2.Pods()["train"] != want {
		t.Errorf("restart: %d List calls, pods %v", kl.count(), n2.Pods())
	}
}

// Names longer than Kubernetes allows are cut before they are stored
// (control characters are kept, vgpu status escapes them; proto3 strings
// are UTF-8 already); a kubelet that is not there is an error of the
// scan, retried later, not a crash.
func TestNamerHostileNamesAndNoKubelet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("grants are trusted only when root owns them: run as root (make test does)")
	}
	tmp := t.TempDir()
	f := &fixture{t: t, stateDir: filepath.Join(tmp, "state"), grants: filepath.Join(tmp, "grants"), tmp: tmp}
	if err := os.MkdirAll(f.stateDir, 0o711); err != nil {
		t.Fatal(err)
	}
	f.container("c", f.grant(allocation.ResourceMemory, "u0"))
	now := time.Unix(1000, 0)
	n, _ := New(Options{StateDir: f.stateDir, GrantDir: f.grants, Owners: Kubelet{Socket: filepath.Join(tmp, "none.sock"), Timeout: 2 * time.Second},
		Now: func() time.Time { return now }})
	if err := n.Scan(context.Background()); err == nil {
		t.Error("no kubelet: no error")
	}
	// Not asked again yet, but the kubelet still has not answered: the same
	// error (Run says it once, not once per question).
	if err := n.Scan(context.Background()); err == nil {
		t.Error("no kubelet, before the retry: no error")
	}
	kl := &fakeKubelet{}
	long := string(make([]byte, 400))
	kl.set(pod("ns", "p"+long, "c\x1b[2J", map[string][]string{"vgpu.io/memory": {"u0"}}))
	n.o.Owners = Kubelet{Socket: serve(t, kl)}
	now = now.Add(time.Second)
	if err := n.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.Scan(context.Background()); err != nil {
		t.Errorf("everything named: %v", err)
	}
	p := f.pods()["c"]
	if p.Namespace != "ns" || len(p.Name) != events.MaxPodField || p.Container != "c\x1b[2J" {
		t.Errorf("stored %q", p)
	}
}
