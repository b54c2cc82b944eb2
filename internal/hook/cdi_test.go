package hook

import (
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

func cdiHost() *discover.Host {
	n := func(name string, major, minor int64) discover.DeviceNode {
		return discover.DeviceNode{Path: "/dev/" + name, HostPath: "/dev/" + name, Type: "c", Major: major, Minor: minor}
	}
	return &discover.Host{
		DriverVersion: "580.95.05",
		Libraries: []discover.HostFile{
			{Name: "libcuda.so.580.95.05", Path: "/usr/lib/libcuda.so.580.95.05"},
			{Name: "libnvidia-ml.so.580.95.05", Path: "/usr/lib/libnvidia-ml.so.580.95.05"},
		},
		GPUs: []discover.GPU{
			{Index: 0, UUID: "GPU-00000000-0000-4000-8000-000000000000", Minor: 0, MemoryBytes: 16 << 30},
			{Index: 1, UUID: "GPU-00000000-0000-4000-8000-000000000001", Minor: 2, MemoryBytes: 16 << 30},
			{Index: 2, UUID: "GPU-00000000-0000-4000-8000-000000000002", Minor: 1, MemoryBytes: 16 << 30},
		},
		Nodes: []discover.DeviceNode{n("nvidiactl", 195, 255), n("nvidia-uvm", 510, 0), n("nvidia0", 195, 0), n("nvidia2", 195, 2), n("nvidia1", 195, 1)},
	}
}

func TestGPUsInSpec(t *testing.T) {
	h := cdiHost()
	dev := func(path string, minor int64) specs.LinuxDevice {
		return specs.LinuxDevice{Path: path, Type: "c", Major: 195, Minor: minor}
	}
	for _, tc := range []struct {
		name string
		devs []specs.LinuxDevice
		want []int // host indices
	}{
		{"none", nil, nil},
		{"control only", []specs.LinuxDevice{dev("/dev/nvidiactl", 255)}, nil},
		{"minor 2 is index 1", []specs.LinuxDevice{dev("/dev/nvidia2", 2)}, []int{1}},
		{"host index order", []specs.LinuxDevice{dev("/dev/nvidia1", 1), dev("/dev/nvidia0", 0)}, []int{0, 2}},
		{"matched by numbers, not path", []specs.LinuxDevice{dev("/dev/gpu-a", 0)}, []int{0}},
		{"other major", []specs.LinuxDevice{{Path: "/dev/nvidia0", Type: "c", Major: 10, Minor: 0}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for _, g := range GPUsInSpec(h, tc.devs) {
				got = append(got, g.Index)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCDIRequest(t *testing.T) {
	h := cdiHost()
	cfg := config.Default()
	two := []discover.GPU{h.GPUs[0], h.GPUs[2]}
	for _, tc := range []struct {
		name    string
		env     []string
		ann     map[string]string
		gpus    []discover.GPU
		wantErr string
		mem     []uint64 // per container device
	}{
		{name: "no limits", gpus: two, mem: []uint64{0, 0}},
		{name: "env limit", env: []string{"VGPU_MEMORY_LIMIT=1Gi"}, gpus: two, mem: []uint64{1 << 30, 1 << 30}},
		{name: "per device", env: []string{"VGPU_MEMORY_LIMIT=0=1Gi,1=2Gi"}, gpus: two, mem: []uint64{1 << 30, 2 << 30}},
		{name: "annotation wins", env: []string{"VGPU_MEMORY_LIMIT=1Gi"}, ann: map[string]string{request.AnnotationMemoryLimit: "3Gi"}, gpus: two[:1], mem: []uint64{3 << 30}},
		{name: "NVIDIA_VISIBLE_DEVICES ignored", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "VGPU_MEMORY_LIMIT=1Gi"}, gpus: two[:1], mem: []uint64{1 << 30}},
		{name: "same selection", env: []string{"VGPU_VISIBLE_DEVICES=2,0"}, gpus: two, mem: []uint64{0, 0}},
		{name: "same selection by UUID", ann: map[string]string{request.AnnotationVisibleDevices: "GPU-00000000-0000-4000-8000-000000000000"}, gpus: two[:1], mem: []uint64{0}},
		{name: "other selection", env: []string{"VGPU_VISIBLE_DEVICES=1"}, gpus: two, wantErr: "through CDI"},
		{name: "all is not the same", env: []string{"VGPU_VISIBLE_DEVICES=all"}, gpus: two, wantErr: "through CDI"},
		{name: "none is not the same", env: []string{"VGPU_VISIBLE_DEVICES=none"}, gpus: two, wantErr: "names none"},
		{name: "bad limit", env: []string{"VGPU_MEMORY_LIMIT=lots"}, gpus: two, wantErr: "lots"},
		{name: "limit index out of range", env: []string{"VGPU_MEMORY_LIMIT=2=1Gi"}, gpus: two, wantErr: "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := CDIRequest(tc.env, tc.ann, h, tc.gpus)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := plan.New(req, cfg, h, "c1")
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Devices) != len(tc.gpus) {
				t.Fatalf("devices %+v", p.Devices)
			}
			for i, d := range p.Devices {
				if d.GPU.UUID != tc.gpus[i].UUID || d.Memory != tc.mem[i] {
					t.Errorf("device %d: %s memory %d, want %s memory %d", i, d.GPU.UUID, d.Memory, tc.gpus[i].UUID, tc.mem[i])
				}
			}
		})
	}
}

func TestUsageAndFlags(t *testing.T) {
	var stderr strings.Builder
	if Main([]string{"createContainer", "--other"}, strings.NewReader("{}"), &stderr) == 0 || !strings.Contains(stderr.String(), "usage") {
		t.Errorf("unknown flag: %q", stderr.String())
	}
	if !strings.Contains(Usage, config.HookCDIFlag) || !strings.Contains(Usage, "poststop") {
		t.Error("usage text")
	}
}

func TestHasCDIHook(t *testing.T) {
	for _, tc := range []struct {
		hooks string
		want  bool
	}{
		{``, false},
		{`"hooks":{"createContainer":[{"path":"/usr/bin/vgpu-hook","args":["vgpu-hook","createContainer"]}]},`, false},
		{`"hooks":{"createContainer":[{"path":"/usr/bin/vgpu-hook","args":["vgpu-hook","createContainer","--cdi"]}]},`, true},
		{`"hooks":{"poststop":[{"path":"/usr/bin/vgpu-hook","args":["vgpu-hook","createContainer","--cdi"]}]},`, false},
		{`"hooks":{"createContainer":[{"path":"/usr/bin/other","args":["other","--cdi"]}]},`, false},
	} {
		s, err := spec.Parse([]byte(`{"ociVersion":"1.2.0",` + tc.hooks + `"process":{"env":[]}}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := hasCDIHook(s); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.hooks, got, tc.want)
		}
	}
}
