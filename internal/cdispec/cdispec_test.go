package cdispec

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/vgpu-dev/vgpu/internal/apply"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/hook"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

var update = flag.Bool("update", false, "rewrite golden files")

const ver = "580.95.05"

// testHost is a host with two GPUs, described without any I/O (NewPlan is pure).
func testHost(devRoot string) (*config.Config, *discover.Host) {
	cfg := config.Default()
	cfg.Driver.Root, cfg.Driver.DevRoot = "/DRIVER", devRoot
	cfg.Driver.IPCPaths = []string{"run/simgpu"}
	cfg.StateDir = "/run/vgpu/containers"
	cfg.Defaults.MemoryLimit = "1Ti" // more than the GPUs have: must not matter for the spec
	lib := "/DRIVER/usr/lib/x86_64-linux-gnu/"
	node := func(name string, major, minor int64) discover.DeviceNode {
		return discover.DeviceNode{Path: "/dev/" + name, HostPath: filepath.Join(devRoot, "dev", name), Type: "c", Major: major, Minor: minor, FileMode: 0o666}
	}
	h := &discover.Host{
		DriverVersion: ver,
		Libraries: []discover.HostFile{
			{Name: "libcuda.so." + ver, Path: lib + "libcuda.so." + ver},
			{Name: "libnvidia-ml.so." + ver, Path: lib + "libnvidia-ml.so." + ver},
			{Name: "libnvidia-ptxjitcompiler.so." + ver, Path: lib + "libnvidia-ptxjitcompiler.so." + ver},
		},
		Binaries: []discover.HostFile{{Name: "nvidia-smi", Path: "/DRIVER/usr/bin/nvidia-smi"}},
		IPCPaths: []discover.HostIPC{{Rel: "run/simgpu", Dir: true}},
		GPUs: []discover.GPU{
			{Index: 0, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000000", Name: "NVIDIA H200", Minor: 0, MemoryBytes: 150754820096},
			{Index: 1, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000001", Name: "NVIDIA H200", Minor: 1, MemoryBytes: 150754820096},
		},
		Nodes: []discover.DeviceNode{node("nvidiactl", 195, 255), node("nvidia-uvm", 510, 0), node("nvidia-uvm-tools", 510, 1), node("nvidia0", 195, 0), node("nvidia1", 195, 1)},
	}
	return cfg, h
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test -update to accept):\n%s", p, got)
	}
}

func TestGenerateGolden(t *testing.T) {
	for _, tc := range []struct {
		name, devRoot, config string
	}{
		{"host", "/", ""}, // a real driver: nodes in /dev
		{"driver-root", "/DRIVER", "/etc/vgpu/sim.toml"}, // nodes elsewhere (simulator, driver container): hostPath
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, h := testHost(tc.devRoot)
			raw, err := Generate(cfg, h, Options{HookPath: "/usr/local/bin/vgpu-hook", ConfigPath: tc.config})
			if err != nil {
				t.Fatal(err)
			}
			b, err := Marshal(raw) // validates with the CDI library
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "spec-"+tc.name+".yaml", b)
			var names []string
			for _, d := range raw.Devices {
				names = append(names, d.Name)
			}
			if want := "0 GPU-5e3b6a2e-0000-4000-8000-000000000000 1 GPU-5e3b6a2e-0000-4000-8000-000000000001 all"; strings.Join(names, " ") != want {
				t.Errorf("devices %v", names)
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	cfg, h := testHost("/")
	if _, err := Generate(cfg, h, Options{HookPath: "vgpu-hook"}); err == nil {
		t.Error("relative hook path accepted")
	}
	h.GPUs = nil
	if _, err := Generate(cfg, h, Options{HookPath: "/bin/vgpu-hook"}); err == nil || !strings.Contains(err.Error(), "no GPU") {
		t.Errorf("no GPUs: %v", err)
	}
}

// The CDI edits, applied by the CDI library as an engine applies them, give
// the container what vgpu-runtime's spec edit gives it, less the three
// per-container mounts that the hook adds: one description, two ways in.
func TestCDIMatchesRuntime(t *testing.T) {
	cfg, h := testHost("/DRIVER")
	raw, err := Generate(cfg, h, Options{HookPath: "/usr/local/bin/vgpu-hook"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults.MemoryLimit = ""
	dir := t.TempDir()
	if _, err := WriteDir(raw, dir, FileName); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		devices []string
		env     string
	}{
		{[]string{Kind + "=1"}, "1"},
		{[]string{Kind + "=GPU-5e3b6a2e-0000-4000-8000-000000000000"}, "0"},
		{[]string{Kind + "=0", Kind + "=1"}, "0,1"},
		{[]string{Kind + "=all"}, "all"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			cache, _ := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
			oci := &specs.Spec{Process: &specs.Process{Env: []string{"PATH=/bin"}}, Linux: &specs.Linux{}}
			if unresolved, err := cache.InjectDevices(oci, tc.devices...); err != nil {
				t.Fatal(unresolved, err)
			}
			// The shim's edit of the same request.
			req, err := request.Parse([]string{"VGPU_VISIBLE_DEVICES=" + tc.env}, nil)
			if err != nil {
				t.Fatal(err)
			}
			pl, err := plan.New(req, cfg, h, "c1")
			if err != nil {
				t.Fatal(err)
			}
			s, err := spec.Parse([]byte(`{"ociVersion":"1.2.0","process":{"env":["PATH=/bin"]},"root":{"path":"rootfs"},"linux":{}}`))
			if err != nil {
				t.Fatal(err)
			}
			if err := apply.Spec(pl, s); err != nil {
				t.Fatal(err)
			}
			var shim specs.Spec
			if err := json.Unmarshal(s.Bytes(), &shim); err != nil {
				t.Fatal(err)
			}
			devs := func(ds []specs.LinuxDevice) []string {
				var out []string
				for _, d := range ds {
					out = append(out, d.Path+" "+d.Type+" "+jsonString(d.Major)+":"+jsonString(d.Minor)+" "+jsonString(*d.FileMode))
				}
				slices.Sort(out)
				return out
			}
			if a, b := devs(oci.Linux.Devices), devs(shim.Linux.Devices); !slices.Equal(a, b) {
				t.Errorf("devices:\nCDI  %v\nshim %v", a, b)
			}
			rules := func(rs []specs.LinuxDeviceCgroup) []string {
				var out []string
				for _, r := range rs {
					out = append(out, jsonString(r))
				}
				slices.Sort(out)
				return out
			}
			var cdiRules []specs.LinuxDeviceCgroup
			if oci.Linux.Resources != nil {
				cdiRules = oci.Linux.Resources.Devices
			}
			if a, b := rules(cdiRules), rules(shim.Linux.Resources.Devices); !slices.Equal(a, b) {
				t.Errorf("device rules:\nCDI  %v\nshim %v", a, b)
			}
			mounts := func(ms []specs.Mount) []string {
				var out []string
				for _, m := range ms {
					out = append(out, m.Destination+" <- "+m.Source+" "+m.Type+" "+strings.Join(m.Options, ","))
				}
				slices.Sort(out)
				return out
			}
			var hostMounts []specs.Mount
			for _, m := range shim.Mounts {
				if !strings.HasPrefix(m.Source, pl.StateDir+"/") {
					hostMounts = append(hostMounts, m)
				}
			}
			if a, b := mounts(oci.Mounts), mounts(hostMounts); !slices.Equal(a, b) {
				t.Errorf("mounts:\nCDI  %v\nshim %v", a, b)
			}
			if len(pl.StateMounts()) != 4 || len(hostMounts)+4 != len(shim.Mounts) { // quota, shared/, host/, ld.so.preload
				t.Errorf("state mounts %v", pl.StateMounts())
			}
			for _, e := range pl.Env {
				if !slices.Contains(oci.Process.Env, e) {
					t.Errorf("env %s missing: %v", e, oci.Process.Env)
				}
			}
			if oci.Hooks == nil || len(oci.Hooks.CreateContainer) != 1 || len(oci.Hooks.Poststop) != 1 ||
				!slices.Contains(oci.Hooks.CreateContainer[0].Args, config.HookCDIFlag) {
				t.Errorf("hooks %+v", oci.Hooks)
			}
			// The hook finds the same GPUs from the devices CDI added.
			gpus := hook.GPUsInSpec(h, oci.Linux.Devices)
			var got []string
			for _, g := range gpus {
				got = append(got, g.UUID)
			}
			var want []string
			for _, d := range pl.Devices {
				want = append(want, d.GPU.UUID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("hook sees GPUs %v, want %v", got, want)
			}
		})
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestWriteDirAndList(t *testing.T) {
	cfg, h := testHost("/")
	raw, err := Generate(cfg, h, Options{HookPath: "/usr/local/bin/vgpu-hook"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := WriteDir(raw, dir, FileName)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi == nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi)
	}
	if s, err := Validate(p); err != nil || s.GetVendor() != Vendor || s.GetDevice("all") == nil {
		t.Errorf("read back: %v", err)
	}
	if _, err := WriteDir(raw, dir, "spec.txt"); err == nil {
		t.Error("spec.txt accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("cdiVersion: 0.5.0\nkind: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := List([]string{dir})
	if err == nil || !strings.Contains(err.Error(), "broken.yaml") {
		t.Errorf("broken spec not reported: %v", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
		if e.Spec != p {
			t.Errorf("%s in %q", e.Name, e.Spec)
		}
	}
	if len(names) != 5 || !slices.Contains(names, "vgpu.io/gpu=all") {
		t.Errorf("devices %v", names)
	}
	// An invalid spec is refused before anything is written.
	raw.Devices = append(raw.Devices, raw.Devices[0])
	if _, err := WriteDir(raw, t.TempDir(), FileName); err == nil {
		t.Error("duplicate device accepted")
	}
}

// A spatial GPU's devices carry its MPS pipe and shm mounts and the pipe
// variable; the spec-wide edits and the time-sliced GPU's stay as they are.
func TestGenerateSpatial(t *testing.T) {
	cfg, h := testHost("/")
	cfg.Spatial.GPUs = []string{"1"}
	raw, err := Generate(cfg, h, Options{HookPath: "/usr/local/bin/vgpu-hook"})
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := testHost("/")
	want, err := Generate(plain, h, Options{HookPath: "/usr/local/bin/vgpu-hook"})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := jsonOf(t, raw.ContainerEdits), jsonOf(t, want.ContainerEdits); a != b {
		t.Errorf("spec-wide edits changed:\n%s\nwant\n%s", a, b)
	}
	dir := "/run/vgpu/containers/.mps/GPU-5e3b6a2e-0000-4000-8000-000000000001"
	for _, d := range raw.Devices {
		spatial := d.Name == "1" || d.Name == "GPU-5e3b6a2e-0000-4000-8000-000000000001"
		got := jsonOf(t, d.ContainerEdits.Mounts) + " " + strings.Join(d.ContainerEdits.Env, ",")
		if spatial != (strings.Contains(got, dir+"/pipe") && strings.Contains(got, dir+"/shm") && strings.Contains(got, "CUDA_MPS_PIPE_DIRECTORY=/run/vgpu/mps")) {
			t.Errorf("device %s: %s", d.Name, got)
		}
	}
}

func jsonOf(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
