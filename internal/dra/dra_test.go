//go:build integration

package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/vgpu-dev/vgpu/internal/cdispec"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// One simulated root (an 80 GiB GPU and a 16 GiB one) for the package: GPU
// discovery loads its NVML into this test process, and a process can hold
// only one simulator.
var sim *simroot.Root

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dra-test-")
	if err != nil {
		panic(err)
	}
	sim, err = simroot.Create(filepath.Join(dir, "root"), simroot.Options{Devices: []simroot.Device{{MemoryBytes: 80 << 30}, {}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, kv := range sim.Env() {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	b := os.Getenv("VGPU_BUILD")
	if b == "" {
		t.Fatal("VGPU_BUILD is not set: run `make c-build` and VGPU_BUILD=$PWD/build go test")
	}
	cfg := config.Default()
	cfg.Driver.Root, cfg.Driver.DevRoot = sim.Dir(), sim.Dir()
	cfg.Driver.IPCPaths = []string{"run/simgpu"}
	cfg.Library.Dir = filepath.Join(b, "lib")
	cfg.StateDir = filepath.Join(t.TempDir(), "state")
	return cfg
}

func newDriver(t *testing.T, cfg *config.Config, cdiDir string) *Driver {
	t.Helper()
	d, err := New(Options{NodeName: "node-a", Config: cfg, Inventory: deviceplugin.HostInventory{Config: cfg}, CDIDir: cdiDir})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type result struct {
	request, pool, device string
	memory, cores         string // "" = not in ConsumedCapacity
}

func claim(uid string, results ...result) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-" + uid, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, r := range results {
		dr := resourceapi.DeviceRequestAllocationResult{Request: r.request, Driver: DriverName, Pool: r.pool, Device: r.device,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{}}
		if r.memory != "" {
			dr.ConsumedCapacity[CapacityMemory] = resource.MustParse(r.memory)
		}
		if r.cores != "" {
			dr.ConsumedCapacity[CapacityCores] = resource.MustParse(r.cores)
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, dr)
	}
	return c
}

// The ResourceSlice: one shareable device per GPU, in NVML order, with
// consumable memory (the GPU's) and cores (100), the stated defaults and
// the attributes a DeviceClass or claim selects on.
func TestResources(t *testing.T) {
	gpus := []discover.GPU{{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100", MemoryBytes: 80 << 30}, {Index: 1, UUID: "GPU-b", Name: "NVIDIA L4", MemoryBytes: 24 << 30}}
	res := Resources("node-a", gpus)
	pool, ok := res.Pools["node-a"]
	if len(res.Pools) != 1 || !ok || len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 2 {
		t.Fatalf("want one pool node-a with one slice of 2 devices: %+v", res)
	}
	for i, d := range pool.Slices[0].Devices {
		g := gpus[i]
		if d.Name != fmt.Sprintf("gpu-%d", i) || d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			t.Errorf("device %d: name %q, allowMultipleAllocations %v", i, d.Name, d.AllowMultipleAllocations)
		}
		mem, cores := d.Capacity[CapacityMemory], d.Capacity[CapacityCores]
		if mem.Value.Value() != int64(g.MemoryBytes) || cores.Value.Value() != 100 {
			t.Errorf("%s: capacity memory %s cores %s, want %d and 100", d.Name, mem.Value.String(), cores.Value.String(), g.MemoryBytes)
		}
		if p := mem.RequestPolicy; p == nil || p.Default.String() != "1Gi" || p.ValidRange == nil || p.ValidRange.Min.String() != "256Mi" ||
			p.ValidRange.Max.Value() != int64(g.MemoryBytes) || p.ValidRange.Step.String() != "1Mi" {
			t.Errorf("%s: memory request policy %+v", d.Name, p)
		}
		if p := cores.RequestPolicy; p == nil || p.Default.String() != "10" || p.ValidRange == nil || p.ValidRange.Min.String() != "1" ||
			p.ValidRange.Max.String() != "100" || p.ValidRange.Step.String() != "1" {
			t.Errorf("%s: cores request policy %+v", d.Name, p)
		}
		a := d.Attributes
		if *a[AttrUUID].StringValue != g.UUID || *a[AttrIndex].IntValue != int64(i) || *a[AttrProduct].StringValue != g.Name || *a[AttrMemory].IntValue != int64(g.MemoryBytes) {
			t.Errorf("%s: attributes %+v", d.Name, a)
		}
	}
	// A GPU smaller than the default memory request: the default is the whole GPU.
	small := Device(discover.GPU{Index: 2, UUID: "GPU-c", MemoryBytes: 128 << 20})
	if p := small.Capacity[CapacityMemory].RequestPolicy; p.Default.Value() != 128<<20 || p.ValidRange.Min.Value() != 128<<20 {
		t.Errorf("128 MiB GPU: default %s min %s, want both 128Mi", p.Default.String(), p.ValidRange.Min.String())
	}
}

// unprepare unprepares claims, failing the test on any error: an unprepare
// that fails leaves the claim's mounts and state behind.
func unprepare(t *testing.T, d *Driver, claims ...kubeletplugin.NamespacedObject) {
	t.Helper()
	res, err := d.UnprepareResourceClaims(context.Background(), claims)
	if err != nil {
		t.Fatalf("unprepare: %v", err)
	}
	for uid, err := range res {
		if err != nil {
			t.Errorf("unprepare claim %s: %v", uid, err)
		}
	}
}

func quotaOf(t *testing.T, cfg *config.Config, uid string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.StateDir, StateID(types.UID(uid)), config.StateQuota))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Prepare writes the claim's state and CDI spec and returns its CDI ID for
// the allocated device; it is idempotent, also in a restarted driver, which
// finds the claim by its files; unprepare removes both, twice is fine.
func TestPrepareUnprepareRestart(t *testing.T) {
	requireRoot(t)
	cfg := testConfig(t)
	cdiDir := filepath.Join(t.TempDir(), "cdi")
	d := newDriver(t, cfg, cdiDir)
	ctx := context.Background()
	c := claim("0b7c2c3e-1111-4222-8333-444455556666", result{request: "gpu", pool: "node-a", device: "gpu-0", memory: "8Gi", cores: "30"})
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare: %v, %v", err, res[c.UID].Err)
	}
	wantID := "vgpu.io/claim=" + string(c.UID)
	devs := res[c.UID].Devices
	if len(devs) != 1 || devs[0].PoolName != "node-a" || devs[0].DeviceName != "gpu-0" || len(devs[0].CDIDeviceIDs) != 1 || devs[0].CDIDeviceIDs[0] != wantID ||
		len(devs[0].Requests) != 1 || devs[0].Requests[0] != "gpu" {
		t.Fatalf("devices %+v, want gpu-0 with CDI ID %s", devs, wantID)
	}
	q := quotaOf(t, cfg, string(c.UID))
	if !strings.Contains(q, "device 0 "+simroot.DefaultUUID(0)+" memory=8589934592 memory-request=8589934592 compute=30") || strings.Contains(q, simroot.DefaultUUID(1)) {
		t.Errorf("quota:\n%s\nwant GPU 0 only, memory=8589934592 memory-request=8589934592 compute=30", q)
	}
	// The CDI spec: valid for the CDI library, one device, the GPU's node,
	// the quota read-only and the shared accounting directory.
	specPath := filepath.Join(cdiDir, cdispec.ClaimFileName(string(c.UID)))
	spec, err := cdispec.Validate(specPath)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Kind != cdispec.ClaimKind || len(spec.Devices) != 1 || spec.Devices[0].Name != string(c.UID) {
		t.Fatalf("spec %s: kind %s, devices %+v", specPath, spec.Kind, spec.Devices)
	}
	edits := spec.Devices[0].ContainerEdits
	var nodes, mounts []string
	for _, n := range edits.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	for _, m := range edits.Mounts {
		mounts = append(mounts, m.ContainerPath+" "+m.HostPath+" "+strings.Join(m.Options, ","))
	}
	stateDir := filepath.Join(cfg.StateDir, StateID(c.UID))
	all := strings.Join(nodes, " ") + "\n" + strings.Join(mounts, "\n")
	for _, w := range []string{"/dev/nvidia0", "/dev/nvidiactl", "/run/vgpu/quota " + filepath.Join(stateDir, config.StateQuota), "/run/vgpu/shared " + filepath.Join(stateDir, config.StateShared)} {
		if !strings.Contains(all, w) {
			t.Errorf("CDI spec lacks %q:\n%s", w, all)
		}
	}
	if strings.Contains(strings.Join(nodes, " "), "/dev/nvidia1") {
		t.Errorf("CDI spec gives the other GPU too: %v", nodes)
	}
	for _, m := range edits.Mounts {
		if m.ContainerPath == "/run/vgpu/quota" && !strings.Contains(","+strings.Join(m.Options, ",")+",", ",ro,") {
			t.Errorf("quota mount is not read-only: %v", m.Options)
		}
	}
	fi1, _ := os.Stat(filepath.Join(stateDir, config.StateQuota))

	// Asked again: the same answer, the state untouched.
	res, err = d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil || res[c.UID].Devices[0].CDIDeviceIDs[0] != wantID {
		t.Fatalf("second prepare: %v %+v", err, res[c.UID])
	}
	// A restarted daemon: a new driver, nothing in memory.
	d2 := newDriver(t, cfg, cdiDir)
	res, err = d2.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil || res[c.UID].Devices[0].CDIDeviceIDs[0] != wantID {
		t.Fatalf("prepare after restart: %v %+v", err, res[c.UID])
	}
	fi2, _ := os.Stat(filepath.Join(stateDir, config.StateQuota))
	if !os.SameFile(fi1, fi2) {
		t.Error("prepare after restart wrote the claim's state again; a running container would lose its quota file")
	}
	// Unprepare by the restarted driver: spec and state gone; again: no error.
	for i := 0; i < 2; i++ {
		ures, err := d2.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: c.Name}, UID: c.UID}})
		if err != nil || ures[c.UID] != nil {
			t.Fatalf("unprepare %d: %v, %v", i, err, ures[c.UID])
		}
	}
	if _, err := os.Stat(specPath); !os.IsNotExist(err) {
		t.Errorf("CDI spec still there after unprepare: %v", err)
	}
	if _, err := state.Read(cfg.StateDir, StateID(c.UID)); !os.IsNotExist(err) {
		t.Errorf("claim state still there after unprepare: %v", err)
	}
}

// Half-prepared (the CDI spec lost, as after a crash between the writes):
// prepare starts again and ends with both.
func TestPrepareRepairsHalfPrepared(t *testing.T) {
	requireRoot(t)
	cfg := testConfig(t)
	cdiDir := filepath.Join(t.TempDir(), "cdi")
	d := newDriver(t, cfg, cdiDir)
	c := claim("9d0e5a1b-aaaa-4bbb-8ccc-ddddeeeeffff", result{request: "gpu", pool: "node-a", device: "gpu-1", memory: "2Gi", cores: "100"})
	ctx := context.Background()
	if res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare: %v %+v", err, res)
	}
	specPath := filepath.Join(cdiDir, cdispec.ClaimFileName(string(c.UID)))
	os.Remove(specPath)
	if res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c}); err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare again: %v %+v", err, res)
	}
	if _, err := os.Stat(specPath); err != nil {
		t.Errorf("spec not written again: %v", err)
	}
	// cores 100 is the whole GPU's compute: no pacing (no compute= field; the
	// request of 100, admitted beside the others, is written).
	if q := quotaOf(t, cfg, string(c.UID)); !strings.Contains(q, "device 0 "+simroot.DefaultUUID(1)+" memory=2147483648 memory-request=2147483648 compute-request=100\n") {
		t.Errorf("quota:\n%s", q)
	}
	unprepare(t, d, kubeletplugin.NamespacedObject{UID: c.UID})
}

// Two requests of one claim on one GPU are one budget: their memory and
// cores add up in one quota, which every container of the claim mounts.
func TestClaimIsOneBudget(t *testing.T) {
	requireRoot(t)
	cfg := testConfig(t)
	d := newDriver(t, cfg, filepath.Join(t.TempDir(), "cdi"))
	c := claim("5a5a5a5a-0000-4000-8000-000000000001",
		result{request: "a", pool: "node-a", device: "gpu-0", memory: "3Gi", cores: "20"},
		result{request: "b", pool: "node-a", device: "gpu-0", memory: "5Gi", cores: "10"})
	ctx := context.Background()
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare: %v %+v", err, res)
	}
	if devs := res[c.UID].Devices; len(devs) != 2 || devs[0].CDIDeviceIDs[0] != devs[1].CDIDeviceIDs[0] {
		t.Errorf("devices %+v: want both requests to name the claim's one CDI device", devs)
	}
	q := quotaOf(t, cfg, string(c.UID))
	if strings.Count(q, "device ") != 1 || !strings.Contains(q, "memory=8589934592 memory-request=8589934592 compute=30") {
		t.Errorf("quota:\n%s\nwant one device with memory=8589934592 memory-request=8589934592 compute=30", q)
	}
	unprepare(t, d, kubeletplugin.NamespacedObject{UID: c.UID})
}

// What prepare refuses, naming the claim, and with nothing written.
func TestPrepareRefuses(t *testing.T) {
	cfg := testConfig(t)
	cdiDir := filepath.Join(t.TempDir(), "cdi")
	d := newDriver(t, cfg, cdiDir)
	unallocated := claim("00000000-0000-4000-8000-00000000000a")
	unallocated.Status.Allocation = nil
	for _, tc := range []struct {
		c    *resourceapi.ResourceClaim
		want string
	}{
		{unallocated, "is not allocated"},
		{claim("00000000-0000-4000-8000-00000000000b", result{request: "g", pool: "node-b", device: "gpu-0", memory: "1Gi", cores: "10"}), `pool "node-b" is not this node's`},
		{claim("00000000-0000-4000-8000-00000000000c", result{request: "g", pool: "node-a", device: "gpu-7", memory: "1Gi", cores: "10"}), "no GPU with index 7"},
		{claim("00000000-0000-4000-8000-00000000000d", result{request: "g", pool: "node-a", device: "tpu-0", memory: "1Gi", cores: "10"}), "not a vgpu.io device name"},
		{claim("00000000-0000-4000-8000-00000000000e", result{request: "g", pool: "node-a", device: "gpu-0", memory: "1Gi"}), "consumable capacity"},
		{claim("00000000-0000-4000-8000-00000000000f", result{request: "g", pool: "node-a", device: "gpu-1", memory: "17Gi", cores: "10"}), "more than GPU"},
		{claim("00000000-0000-4000-8000-000000000010"), "allocates no vgpu.io device"},
	} {
		res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{tc.c})
		if err != nil {
			t.Fatal(err)
		}
		if e := res[tc.c.UID].Err; e == nil || !strings.Contains(e.Error(), tc.want) || !strings.Contains(e.Error(), "ns/"+tc.c.Name) && !strings.Contains(e.Error(), string(tc.c.UID)) {
			t.Errorf("claim %s: %v, want an error with %q naming the claim", tc.c.Name, e, tc.want)
		}
		if _, err := os.Stat(filepath.Join(cdiDir, cdispec.ClaimFileName(string(tc.c.UID)))); !os.IsNotExist(err) {
			t.Errorf("claim %s: a CDI spec was written (%v)", tc.c.Name, err)
		}
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the claim's shared/ gets a tmpfs mount: run as root (make test does)")
	}
}

// The node checks what it is handed: a claim that, with the claims already
// prepared, would commit more of a GPU than it has (memory or cores) is
// refused before anything is written, naming the claim and the figures;
// once a claim is unprepared, its capacity is free again.
func TestPrepareRefusesOvercommit(t *testing.T) {
	requireRoot(t)
	cfg := testConfig(t)
	cdiDir := filepath.Join(t.TempDir(), "cdi")
	d := newDriver(t, cfg, cdiDir)
	ctx := context.Background()
	var prepared []kubeletplugin.NamespacedObject
	t.Cleanup(func() { unprepare(t, d, prepared...) }) // their tmpfs mounts
	prep := func(c *resourceapi.ResourceClaim) error {
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		if err != nil {
			t.Fatal(err)
		}
		if res[c.UID].Err == nil {
			prepared = append(prepared, kubeletplugin.NamespacedObject{UID: c.UID})
		}
		return res[c.UID].Err
	}
	// GPU 0 has 80 GiB: 3 × 25 GiB at 30 cores fit.
	var held []*resourceapi.ResourceClaim
	for i := 0; i < 3; i++ {
		c := claim(fmt.Sprintf("00000000-0000-4000-8000-0000000001%02d", i), result{request: "g", pool: "node-a", device: "gpu-0", memory: "25Gi", cores: "30"})
		if err := prep(c); err != nil {
			t.Fatalf("claim %d of 3: %v", i, err)
		}
		held = append(held, c)
	}
	memOver := claim("00000000-0000-4000-8000-000000000110", result{request: "g", pool: "node-a", device: "gpu-0", memory: "6Gi", cores: "10"})
	coresOver := claim("00000000-0000-4000-8000-000000000111", result{request: "g", pool: "node-a", device: "gpu-0", memory: "1Gi", cores: "20"})
	for _, tc := range []struct {
		c    *resourceapi.ResourceClaim
		want string
	}{
		{memOver, "commit 80530636800 bytes of GPU " + simroot.DefaultUUID(0) + " and this one asks 6442450944"},
		{coresOver, "commit 90 cores and this one asks 20"},
	} {
		err := prep(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "ns/"+tc.c.Name) {
			t.Errorf("claim %s: %v, want an error naming it with %q", tc.c.Name, err, tc.want)
		}
		if _, err := os.Stat(filepath.Join(cdiDir, cdispec.ClaimFileName(string(tc.c.UID)))); !os.IsNotExist(err) {
			t.Errorf("claim %s: a CDI spec was written (%v)", tc.c.Name, err)
		}
		if _, err := state.Read(cfg.StateDir, StateID(tc.c.UID)); err == nil {
			t.Errorf("claim %s: a state entry was written", tc.c.Name)
		}
	}
	// A claim on the other GPU is not counted against GPU 0.
	if err := prep(claim("00000000-0000-4000-8000-000000000112", result{request: "g", pool: "node-a", device: "gpu-1", memory: "1Gi", cores: "90"})); err != nil {
		t.Fatalf("a claim on GPU 1: %v", err)
	}
	// Unprepared, a claim's capacity is free again.
	out, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: held[0].UID}})
	if err != nil || out[held[0].UID] != nil {
		t.Fatalf("unprepare: %v, %v", err, out[held[0].UID])
	}
	if err := prep(memOver); err != nil {
		t.Errorf("after unprepare: %v", err)
	}
}
