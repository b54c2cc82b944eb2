package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The plan's rules on an in-memory host: plan.New reads what discovery
// found (a discover.Host) and the config, nothing on disk, so these tests
// need no driver root, no device node and no root. What discovery finds on
// a real (simulated) driver root is internal/pipeline's (TestPlanGolden,
// integration tier); memHost is what it finds in that test's root.

const (
	driverVersion = "580.95.05"
	gpu0          = "GPU-5e3b6a2e-0000-4000-8000-000000000000"
	gpu1          = "GPU-5e3b6a2e-0000-4000-8000-000000000001"
	h200Bytes     = 150754820096
)

// memHost is two simulated H200s with the driver's files under /DRIVER:
// what discover.DiscoverWith returns for internal/pipeline's fake root.
func memHost() *discover.Host {
	lib := func(name string) discover.HostFile {
		return discover.HostFile{Name: name + ".so." + driverVersion, Path: "/DRIVER/usr/lib/x86_64-linux-gnu/" + name + ".so." + driverVersion}
	}
	node := func(name string, major, minor int64) discover.DeviceNode {
		return discover.DeviceNode{Path: "/dev/" + name, HostPath: "/DRIVER/dev/" + name, Type: "c", Major: major, Minor: minor, FileMode: 0o644}
	}
	return &discover.Host{
		DriverVersion: driverVersion,
		Libraries:     []discover.HostFile{lib("libcuda"), lib("libnvidia-ml"), lib("libnvidia-ptxjitcompiler")},
		Binaries:      []discover.HostFile{{Name: "nvidia-smi", Path: "/DRIVER/usr/bin/nvidia-smi"}},
		IPCPaths:      []discover.HostIPC{{Rel: "run/simgpu", Dir: true}},
		GPUs: []discover.GPU{
			{Index: 0, UUID: gpu0, Name: "NVIDIA H200 (simulated)", Minor: 0, MemoryBytes: h200Bytes, PCIBusID: "00000000:19:00.0"},
			{Index: 1, UUID: gpu1, Name: "NVIDIA H200 (simulated)", Minor: 1, MemoryBytes: h200Bytes, PCIBusID: "00000000:3B:00.0"},
		},
		Nodes: []discover.DeviceNode{node("nvidiactl", 60, 255), node("nvidia-uvm", 61, 0), node("nvidia-uvm-tools", 61, 1), node("nvidia0", 60, 0), node("nvidia1", 60, 1)},
	}
}

// memConfig is the default config with the driver root and the state
// directory of memHost (the names TestPlanGolden's files normalize to).
func memConfig() *config.Config {
	cfg := config.Default()
	cfg.Driver.Root, cfg.Driver.DevRoot = "/DRIVER", "/DRIVER"
	cfg.Driver.IPCPaths = append(cfg.Driver.IPCPaths, "run/simgpu")
	cfg.StateDir = "/STATE"
	return cfg
}

func mustReq(t *testing.T, env ...string) *request.Request {
	t.Helper()
	r, err := request.Parse(env, nil)
	if err != nil || r == nil {
		t.Fatal(r, err)
	}
	return r
}

// The plan from the in-memory host is, byte for byte, the plan
// internal/pipeline's TestPlanGolden gets from discovery on a driver root:
// the unit tier checks the same plan the integration tier does.
func TestPlanFromMemoryHostIsTheGolden(t *testing.T) {
	for name, env := range map[string][]string{
		"uuid-memory":    {"VGPU_VISIBLE_DEVICES=" + gpu1, "VGPU_MEMORY_LIMIT=2Gi", "VGPU_COMPUTE_LIMIT=50"},
		"all-per-device": {"VGPU_VISIBLE_DEVICES=all", "VGPU_MEMORY_LIMIT=1=4G", "CUDA_DEVICE_SM_LIMIT_0=30"},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := New(mustReq(t, env...), memConfig(), memHost(), "c1")
			if err != nil {
				t.Fatal(err)
			}
			js, err := json.MarshalIndent(p, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("..", "pipeline", "testdata", "plan-"+name+".json")
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got := append(js, '\n'); !bytes.Equal(got, want) {
				t.Errorf("the plan differs from %s:\n%s", golden, got)
			}
			rec := p.Record()
			q, err := quota.Render(&rec).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			golden = filepath.Join("..", "pipeline", "testdata", "quota-"+name)
			if want, err := os.ReadFile(golden); err != nil || !bytes.Equal(q, want) {
				t.Errorf("the quota file differs from %s (%v):\n%s", golden, err, q)
			}
		})
	}
}

// dev is a device as a test states it: the host GPU's index, the limits,
// the requests (-1: none given) and the mode.
type dev struct {
	gpu            int
	memory         uint64
	compute        int
	computeRequest int
	memoryRequest  uint64
	spatial        bool
}

func (d dev) String() string {
	return fmt.Sprintf("{gpu %d memory %d compute %d request %d memory request %d spatial %v}", d.gpu, d.memory, d.compute, d.computeRequest, d.memoryRequest, d.spatial)
}

func asDev(d tenant.Device) dev {
	r := -1
	if d.ComputeRequest != nil {
		r = *d.ComputeRequest
	}
	return dev{gpu: d.GPU.Index, memory: d.Memory, compute: d.Compute, computeRequest: r, memoryRequest: d.MemoryRequest, spatial: d.Mode.IsSpatial()}
}

// The request → devices: which GPUs, numbered in the host's order with
// their limits following them, and each device's limits and requests from
// the request, else from the config's defaults.
func TestDevices(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		cfg  func(*config.Config)
		want []dev
	}{
		{"by index, no limit", []string{"VGPU_VISIBLE_DEVICES=1"}, nil,
			[]dev{{gpu: 1, compute: 100, computeRequest: -1}}},
		{"by UUID, any case", []string{"VGPU_VISIBLE_DEVICES=GPU-" + strings.ToUpper(gpu1[4:]), "VGPU_MEMORY_LIMIT=2Gi"}, nil,
			[]dev{{gpu: 1, memory: 2 << 30, compute: 100, computeRequest: -1}}},
		// named 1 then 0: the limits follow the GPU named, the numbering the host's
		{"host order", []string{"VGPU_VISIBLE_DEVICES=1,0", "VGPU_MEMORY_LIMIT=0=1Gi,1=3Gi", "VGPU_COMPUTE_LIMIT=0=20,1=70"}, nil,
			[]dev{{gpu: 0, memory: 3 << 30, compute: 70, computeRequest: -1}, {gpu: 1, memory: 1 << 30, compute: 20, computeRequest: -1}}},
		{"the config's defaults", []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_MEMORY_LIMIT=1=2Gi"},
			func(c *config.Config) { c.Defaults.MemoryLimit, c.Defaults.ComputeLimit = "1Gi", 40 },
			[]dev{{gpu: 0, memory: 1 << 30, compute: 40, computeRequest: -1}, {gpu: 1, memory: 2 << 30, compute: 40, computeRequest: -1}}},
		{"default limit and request", []string{"VGPU_VISIBLE_DEVICES=0"},
			func(c *config.Config) { c.Defaults.ComputeLimit, c.Defaults.ComputeRequest = 60, 20 },
			[]dev{{gpu: 0, compute: 60, computeRequest: 20}}},
		// a container's own compute setting replaces both defaults
		{"own limit over default request", []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=50"},
			func(c *config.Config) { c.Defaults.ComputeLimit, c.Defaults.ComputeRequest = 60, 20 },
			[]dev{{gpu: 0, compute: 50, computeRequest: -1}}},
		{"compute request alone: no cap", []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=30"}, nil,
			[]dev{{gpu: 0, compute: 100, computeRequest: 30}}},
		{"compute request at its limit", []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=30", "VGPU_COMPUTE_LIMIT=30"}, nil,
			[]dev{{gpu: 0, compute: 30, computeRequest: 30}}},
		{"memory request alone: up to the GPU", []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_REQUEST=16Gi"}, nil,
			[]dev{{gpu: 0, memory: h200Bytes, compute: 100, computeRequest: -1, memoryRequest: 16 << 30}}},
		{"default memory request", []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=8Gi"},
			func(c *config.Config) { c.Defaults.MemoryRequest = "2Gi" },
			[]dev{{gpu: 0, memory: 8 << 30, compute: 100, computeRequest: -1, memoryRequest: 2 << 30}}},
		{"memory limit the whole GPU", []string{"VGPU_VISIBLE_DEVICES=0", fmt.Sprintf("VGPU_MEMORY_LIMIT=%d", h200Bytes)}, nil,
			[]dev{{gpu: 0, memory: h200Bytes, compute: 100, computeRequest: -1}}},
		{"spatial", []string{"VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=50"},
			func(c *config.Config) { c.Spatial.GPUs = []string{"1"} },
			[]dev{{gpu: 1, compute: 50, computeRequest: -1, spatial: true}}},
		// a compute request alone is a spatial GPU's share; the default
		// request does not apply there
		{"spatial request alone", []string{"VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_REQUEST=30"},
			func(c *config.Config) { c.Spatial.GPUs = []string{gpu1} },
			[]dev{{gpu: 1, compute: 30, computeRequest: -1, spatial: true}}},
		// pace_all: no compute setting is request 0 from the start; a
		// setting, a spatial GPU and launch-by-launch pacing keep theirs
		{"pace_all: no setting is request 0", []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_COMPUTE_LIMIT=1=50"},
			func(c *config.Config) { c.Defaults.PaceAll = true },
			[]dev{{gpu: 0, compute: 100, computeRequest: 0}, {gpu: 1, compute: 50, computeRequest: -1}}},
		{"pace_all: own request kept", []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=30"},
			func(c *config.Config) { c.Defaults.PaceAll = true },
			[]dev{{gpu: 0, compute: 100, computeRequest: 30}}},
		{"pace_all: default request kept", []string{"VGPU_VISIBLE_DEVICES=0"},
			func(c *config.Config) { c.Defaults.PaceAll, c.Defaults.ComputeRequest = true, 20 },
			[]dev{{gpu: 0, compute: 100, computeRequest: 20}}},
		{"pace_all: not on a spatial GPU", []string{"VGPU_VISIBLE_DEVICES=1"},
			func(c *config.Config) { c.Defaults.PaceAll, c.Spatial.GPUs = true, []string{"1"} },
			[]dev{{gpu: 1, compute: 100, computeRequest: -1, spatial: true}}},
		{"pace_all: not launch by launch", []string{"VGPU_VISIBLE_DEVICES=0"},
			func(c *config.Config) { c.Defaults.PaceAll, c.Library.ComputePeriod = true, "0" },
			[]dev{{gpu: 0, compute: 100, computeRequest: -1}}},
		{"pace_all: a period of 100ms", []string{"VGPU_VISIBLE_DEVICES=0"},
			func(c *config.Config) { c.Defaults.PaceAll, c.Library.ComputePeriod = true, "100ms" },
			[]dev{{gpu: 0, compute: 100, computeRequest: 0}}},
		{"spatial defaults", []string{"VGPU_VISIBLE_DEVICES=1"},
			func(c *config.Config) {
				c.Spatial.GPUs = []string{"1"}
				c.Defaults.ComputeLimit, c.Defaults.ComputeRequest = 60, 20
			},
			[]dev{{gpu: 1, compute: 60, computeRequest: -1, spatial: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := memConfig()
			if tc.cfg != nil {
				tc.cfg(cfg)
			}
			devs, err := devices(mustReq(t, tc.env...), cfg, memHost().GPUs)
			if err != nil {
				t.Fatal(err)
			}
			var got []dev
			for i, d := range devs {
				if d.Index != i {
					t.Errorf("device %d has index %d", i, d.Index)
				}
				if d.GPU.UUID != memHost().GPUs[d.GPU.Index].UUID {
					t.Errorf("device %d: GPU %+v is not the host's GPU %d", i, d.GPU, d.GPU.Index)
				}
				got = append(got, asDev(d))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("devices %v, want %v", got, tc.want)
			}
		})
	}
}

// A phase is kept for a paced device only: an unlimited one takes no slot.
func TestDevicesPhase(t *testing.T) {
	for _, tc := range []struct {
		env   []string
		phase bool
	}{
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=30"}, true},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=30"}, true},
		{[]string{"VGPU_VISIBLE_DEVICES=0"}, false},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=100"}, false},
	} {
		req := mustReq(t, tc.env...)
		ph := 40
		req.ComputePhase = &ph
		devs, err := devices(req, memConfig(), memHost().GPUs)
		if err != nil {
			t.Fatal(err)
		}
		if got := devs[0].Phase; (got != nil) != tc.phase || got != nil && *got != 40 {
			t.Errorf("%v: phase %v, want one: %v", tc.env, got, tc.phase)
		}
	}
}

// What New refuses, with the message that names the field, the value and
// the fix.
func TestPlanRefusals(t *testing.T) {
	for _, tc := range []struct {
		env []string
		cfg func(*config.Config)
		id  string
		err string
	}{
		{[]string{"VGPU_VISIBLE_DEVICES=2"}, nil, "c1", `VGPU_VISIBLE_DEVICES="2": no GPU with index 2; this host has GPU 0 (GPU-5e3b6a2e-0000-4000-8000-000000000000, NVIDIA H200 (simulated)), GPU 1 (GPU-5e3b6a2e-0000-4000-8000-000000000001`},
		{[]string{"VGPU_VISIBLE_DEVICES=GPU-dead"}, nil, "c1", `no GPU with UUID GPU-dead`},
		{[]string{"VGPU_VISIBLE_DEVICES=0,GPU-5e3b6a2e-0000-4000-8000-000000000000"}, nil, "c1", `is named twice`},
		{[]string{"VGPU_VISIBLE_DEVICES=all", "VGPU_MEMORY_LIMIT=2=1Gi"}, nil, "c1", `device index 2 is out of range: the container has 2 device(s)`},
		{[]string{"VGPU_VISIBLE_DEVICES=all", "VGPU_COMPUTE_REQUEST=3=30"}, nil, "c1", `VGPU_COMPUTE_REQUEST="3=30": device index 3 is out of range: the container has 2 device(s) (VGPU_VISIBLE_DEVICES="all"), indices 0..1`},
		{[]string{"VGPU_VISIBLE_DEVICES=all", "VGPU_PRIORITY=2=high"}, nil, "c1", `VGPU_PRIORITY="2=high": device index 2 is out of range: the container has 2 device(s)`},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=1Ti"}, nil, "c1", `VGPU_MEMORY_LIMIT="1Ti": memory limit 1Ti (1099511627776 bytes) for container device 0 is more than GPU 0`},
		{[]string{"VGPU_VISIBLE_DEVICES=0", fmt.Sprintf("VGPU_MEMORY_LIMIT=%d", h200Bytes+1)}, nil, "c1", `is more than GPU 0`},
		{[]string{"VGPU_VISIBLE_DEVICES=0"}, func(c *config.Config) { c.Defaults.MemoryLimit = "1Ti" }, "c1", `defaults.memory_limit="1Ti" (config): memory limit 1Ti`},
		{[]string{"VGPU_VISIBLE_DEVICES=0"}, func(c *config.Config) { c.Defaults.ComputeLimit, c.Defaults.ComputeRequest = 30, 40 }, "c1", `compute request 40% is above its limit 30% on container device 0 (defaults.compute_request (config), defaults.compute_limit (config))`},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_REQUEST=3Gi"}, func(c *config.Config) { c.Defaults.MemoryLimit = "2Gi" }, "c1", `memory request 3Gi (3221225472 bytes) is above its limit 2Gi (2147483648 bytes) on container device 0 (VGPU_MEMORY_REQUEST="3Gi", defaults.memory_limit (config))`},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=2Gi"}, func(c *config.Config) { c.Defaults.MemoryRequest = "3Gi" }, "c1", `memory request 3Gi (3221225472 bytes) is above its limit 2Gi (2147483648 bytes) on container device 0 (defaults.memory_request (config), VGPU_MEMORY_LIMIT`},
		{[]string{"VGPU_VISIBLE_DEVICES=all"}, func(c *config.Config) { c.Spatial.GPUs = []string{gpu1} }, "c1", "is spatial (MPS, config spatial.gpus) and the container asks for 2 GPUs: a container on a spatial GPU takes that GPU alone"},
		{[]string{"VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=60", "VGPU_COMPUTE_REQUEST=30"}, func(c *config.Config) { c.Spatial.GPUs = []string{"1"} }, "c1", "compute request 30% with limit 60% on container device 0 (VGPU_COMPUTE_REQUEST"},
		{[]string{"VGPU_VISIBLE_DEVICES=0"}, func(c *config.Config) { c.Library.ComputePeriod = "soon" }, "c1", `library.compute_period: compute period "soon"`},
		{[]string{"VGPU_VISIBLE_DEVICES=0"}, func(c *config.Config) { c.Library.LogLevel = "loud" }, "c1", `quota: log-level: "loud"`},
		{[]string{"VGPU_VISIBLE_DEVICES=0"}, nil, "../x", `container id`},
	} {
		cfg := memConfig()
		if tc.cfg != nil {
			tc.cfg(cfg)
		}
		_, err := New(mustReq(t, tc.env...), cfg, memHost(), tc.id)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: err %v, want %q", tc.env, err, tc.err)
		}
	}
	if _, err := New(nil, memConfig(), memHost(), "c1"); err == nil {
		t.Error("nil request accepted")
	}
}

// More GPUs than the library's quota file holds: refused at the bound,
// taken at it.
func TestDevicesAtMost(t *testing.T) {
	var gpus []discover.GPU
	for i := 0; i <= contract.MaxDevices; i++ {
		gpus = append(gpus, discover.GPU{Index: i, UUID: fmt.Sprintf("GPU-5e3b6a2e-0000-4000-8000-%012d", i), Minor: i, MemoryBytes: h200Bytes})
	}
	if _, err := devices(mustReq(t, "VGPU_VISIBLE_DEVICES=all"), memConfig(), gpus); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d GPUs; a vgpu container takes at most %d", contract.MaxDevices+1, contract.MaxDevices)) {
		t.Errorf("%d GPUs: err %v", len(gpus), err)
	}
	if devs, err := devices(mustReq(t, "VGPU_VISIBLE_DEVICES=all"), memConfig(), gpus[:contract.MaxDevices]); err != nil || len(devs) != contract.MaxDevices {
		t.Errorf("%d GPUs: %d devices, err %v", contract.MaxDevices, len(devs), err)
	}
	if _, err := devices(mustReq(t, "VGPU_VISIBLE_DEVICES=all"), memConfig(), nil); err == nil || !strings.Contains(err.Error(), "the host has no GPU") {
		t.Errorf("no GPU: err %v", err)
	}
}

func paths(ns []discover.DeviceNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Path)
	}
	return out
}

// The nodes: the control nodes, then the nodes of the container's GPUs
// only, in device order; a missing required node is refused, a missing
// optional one left out.
func TestNodes(t *testing.T) {
	h := memHost()
	devs, err := devices(mustReq(t, "VGPU_VISIBLE_DEVICES=1"), memConfig(), h.GPUs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := nodes(h.Nodes, devs)
	if want := []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1"}; err != nil || !slices.Equal(paths(got), want) {
		t.Errorf("nodes %v (%v), want %v", paths(got), err, want)
	}
	if got[3] != h.Nodes[4] {
		t.Errorf("GPU 1's node %+v, want the host's %+v", got[3], h.Nodes[4])
	}
	all, _ := devices(mustReq(t, "VGPU_VISIBLE_DEVICES=1,0"), memConfig(), h.GPUs)
	p := &Plan{Devices: all}
	if p.Nodes, err = nodes(h.Nodes, all); err != nil {
		t.Fatal(err)
	}
	if c, g := paths(p.CommonNodes()), paths(p.GPUNodes()); !slices.Equal(c, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) || !slices.Equal(g, []string{"/dev/nvidia0", "/dev/nvidia1"}) {
		t.Errorf("common %v, GPU %v", c, g)
	}
	without := func(name string) []discover.DeviceNode {
		return slices.DeleteFunc(slices.Clone(h.Nodes), func(n discover.DeviceNode) bool { return n.Path == "/dev/"+name })
	}
	if got, err := nodes(without("nvidia-uvm-tools"), devs); err != nil || !slices.Equal(paths(got), []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"}) {
		t.Errorf("without the optional nvidia-uvm-tools: %v %v", paths(got), err)
	}
	for name, want := range map[string]string{
		"nvidiactl":  "host has no /dev/nvidiactl",
		"nvidia-uvm": "host has no /dev/nvidia-uvm",
		"nvidia1":    "GPU 1 (" + gpu1 + "): no device node /dev/nvidia1",
	} {
		if _, err := nodes(without(name), devs); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("without %s: err %v, want %q", name, err, want)
		}
	}
}

// The mounts: the driver's files read-only at their container paths, the
// container's own files from its state directory (the quota, host/ and
// ld.so.preload read-only, shared/ writable), the driver's IPC paths as
// they are; a spatial device adds its GPU's MPS pipe directory read-only
// and its shm as /dev/shm.
func TestMounts(t *testing.T) {
	cfg := memConfig()
	cfg.Spatial.GPUs = []string{"1"}
	places := tenant.Places{Dir: "/STATE/c1"}
	lib := "/DRIVER/usr/lib/x86_64-linux-gnu/"
	timeSliced := []Mount{
		{Source: lib + "libcuda.so." + driverVersion, Destination: "/usr/lib/vgpu/driver/libcuda.so." + driverVersion, ReadOnly: true},
		{Source: lib + "libnvidia-ml.so." + driverVersion, Destination: "/usr/lib/vgpu/driver/libnvidia-ml.so." + driverVersion, ReadOnly: true},
		{Source: lib + "libnvidia-ptxjitcompiler.so." + driverVersion, Destination: "/usr/lib/vgpu/driver/libnvidia-ptxjitcompiler.so." + driverVersion, ReadOnly: true},
		{Source: "/usr/lib/vgpu/libvgpu-cuda.so", Destination: "/usr/lib/vgpu/libvgpu-cuda.so", ReadOnly: true},
		{Source: "/usr/lib/vgpu/libvgpu-nvml.so", Destination: "/usr/lib/vgpu/libvgpu-nvml.so", ReadOnly: true},
		{Source: "/DRIVER/usr/bin/nvidia-smi", Destination: "/usr/bin/nvidia-smi", ReadOnly: true},
		{Source: "/STATE/c1/quota", Destination: "/run/vgpu/quota", ReadOnly: true},
		{Source: "/STATE/c1/shared", Destination: "/run/vgpu/shared", Dir: true},
		{Source: "/STATE/c1/host", Destination: "/run/vgpu/host", ReadOnly: true, Dir: true},
		{Source: "/STATE/c1/ld.so.preload", Destination: "/etc/ld.so.preload", ReadOnly: true},
		{Source: "/DRIVER/run/simgpu", Destination: "/run/simgpu", Dir: true},
	}
	got, err := mounts(memHost(), cfg, places, nil)
	if err != nil || !slices.Equal(got, timeSliced) {
		t.Errorf("time sliced: %v\n%+v\nwant\n%+v", err, got, timeSliced)
	}
	devs, err := devices(mustReq(t, "VGPU_VISIBLE_DEVICES=1"), cfg, memHost().GPUs)
	if err != nil {
		t.Fatal(err)
	}
	mps := "/STATE/.mps/" + gpu1
	spatial := append(slices.Clone(timeSliced),
		Mount{Source: mps + "/pipe", Destination: "/run/vgpu/mps", ReadOnly: true, Dir: true},
		Mount{Source: mps + "/shm", Destination: "/dev/shm", Dir: true})
	if got, err := mounts(memHost(), cfg, places, spatialDevice(devs)); err != nil || !slices.Equal(got, spatial) {
		t.Errorf("spatial: %v\n%+v\nwant\n%+v", err, got, spatial)
	}
	if in, on := mpsPipe(cfg, &devs[0], false), mpsPipe(cfg, &devs[0], true); in != "/run/vgpu/mps" || on != mps+"/pipe" {
		t.Errorf("MPS pipe in a container %s, on the host %s", in, on)
	}
	// the split the CDI spec and the createContainer hook use
	p := &Plan{StateDir: places.Dir, Mounts: got}
	if s := p.StateMounts(); len(s) != 4 || s[0].Destination != "/run/vgpu/quota" || s[3].Destination != "/etc/ld.so.preload" {
		t.Errorf("state mounts %+v", s)
	}
	if h := p.HostMounts(); len(h) != len(got)-4 {
		t.Errorf("host mounts %+v", h)
	}
	noCuda := memHost()
	noCuda.Libraries = noCuda.Libraries[1:]
	if _, err := mounts(noCuda, cfg, places, nil); err == nil || !strings.Contains(err.Error(), "driver 580.95.05: libcuda or libnvidia-ml missing") {
		t.Errorf("without libcuda: err %v", err)
	}
}

// What a spatial device's plan gives the container: the MPS client's
// environment from its limits and a version 3 quota line; a time-sliced
// one neither.
func TestPlanSpatial(t *testing.T) {
	cfg := memConfig()
	cfg.Spatial.GPUs = []string{"1"}
	p, err := New(mustReq(t, "VGPU_VISIBLE_DEVICES=1", "VGPU_MEMORY_LIMIT=2Gi", "VGPU_COMPUTE_LIMIT=50"), cfg, memHost(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"NVIDIA_VISIBLE_DEVICES=void", "CUDA_MPS_PIPE_DIRECTORY=/run/vgpu/mps", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M"}; !slices.Equal(p.Env, want) {
		t.Errorf("env %v, want %v", p.Env, want)
	}
	rec := p.Record()
	q, err := quota.Render(&rec).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(q), "\nvgpu-quota 3\n") || !strings.Contains(string(q), "\ndevice 0 "+gpu1+" memory=2147483648 compute=50 mode=spatial mps_pipe=/run/vgpu/mps\n") {
		t.Errorf("quota:\n%s", q)
	}
	p, err = New(mustReq(t, "VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=50"), cfg, memHost(), "c1", OnHost())
	if err != nil || !slices.Contains(p.Env, "CUDA_MPS_PIPE_DIRECTORY=/STATE/.mps/"+gpu1+"/pipe") || p.Devices[0].MPSPipe != "/STATE/.mps/"+gpu1+"/pipe" {
		t.Errorf("on the host: env %v, device %+v, err %v", p.Env, p.Devices, err)
	}
	p, err = New(mustReq(t, "VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=50"), cfg, memHost(), "c2")
	if err != nil {
		t.Fatal(err)
	}
	rec = p.Record()
	q, _ = quota.Render(&rec).Marshal()
	if !slices.Equal(p.Env, []string{"NVIDIA_VISIBLE_DEVICES=void"}) || !strings.Contains(string(q), "\nvgpu-quota 2\n") || strings.Contains(string(q), "mode=") || p.Devices[0].MPSPipe != "" {
		t.Errorf("time-sliced GPU 0: env %v quota:\n%s", p.Env, q)
	}
}

// The library's settings: the driver's libraries and the shared directory
// at their container paths, or at their host paths for a process on the
// host; the config's log level and pacing period.
func TestLibrary(t *testing.T) {
	cfg := memConfig()
	places := tenant.Places{Dir: "/STATE/c1"}
	lib, err := library(memHost(), cfg, places, false)
	want := tenant.Library{DriverCuda: "/usr/lib/vgpu/driver/libcuda.so." + driverVersion, DriverNvml: "/usr/lib/vgpu/driver/libnvidia-ml.so." + driverVersion, SharedDir: "/run/vgpu/shared", LogLevel: "warn"}
	if err != nil || lib != want {
		t.Errorf("in a container: %+v (%v), want %+v", lib, err, want)
	}
	lib, err = library(memHost(), cfg, places, true)
	want = tenant.Library{DriverCuda: "/DRIVER/usr/lib/x86_64-linux-gnu/libcuda.so." + driverVersion, DriverNvml: "/DRIVER/usr/lib/x86_64-linux-gnu/libnvidia-ml.so." + driverVersion, SharedDir: "/STATE/c1/shared", LogLevel: "warn"}
	if err != nil || lib != want {
		t.Errorf("on the host: %+v (%v), want %+v", lib, err, want)
	}
	for period, ms := range map[string]int{"0": 0, "250ms": 250, "2s": 2000} {
		cfg.Library.ComputePeriod = period
		if lib, err := library(memHost(), cfg, places, false); err != nil || lib.ComputePeriodMS == nil || *lib.ComputePeriodMS != ms {
			t.Errorf("compute_period %q: %v %v, want %d ms", period, lib.ComputePeriodMS, err, ms)
		}
	}
	cfg.Library.ComputePeriod = ""
	if lib, err := library(memHost(), cfg, places, false); err != nil || lib.ComputePeriodMS != nil {
		t.Errorf("no compute_period: %v %v, want the library's default (none)", lib.ComputePeriodMS, err)
	}
	cfg.Library.ComputePeriod = "2001ms"
	if _, err := library(memHost(), cfg, places, false); err == nil || !strings.Contains(err.Error(), "library.compute_period") {
		t.Errorf("compute_period 2001ms: err %v", err)
	}
	noNvml := memHost()
	noNvml.Libraries = slices.Delete(noNvml.Libraries, 1, 2)
	if _, err := library(noNvml, memConfig(), places, false); err == nil || !strings.Contains(err.Error(), "libcuda or libnvidia-ml missing") {
		t.Errorf("without libnvidia-ml: err %v", err)
	}
}
