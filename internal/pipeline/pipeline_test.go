//go:build integration

package pipeline

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/apply"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/slots"
	"github.com/vgpu-dev/vgpu/internal/spec"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

var update = flag.Bool("update", false, "rewrite golden files")

const ver = "580.95.05"

type fakeLister []discover.GPU

func (f fakeLister) ListGPUs(p string) ([]discover.GPU, error) {
	if !strings.HasSuffix(p, "libnvidia-ml.so."+ver) {
		return nil, os.ErrNotExist
	}
	return f, nil
}

var twoGPUs = fakeLister{
	{Index: 0, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000000", Name: "NVIDIA H200 (simulated)", Minor: 0, MemoryBytes: 150754820096, PCIBusID: "00000000:19:00.0"},
	{Index: 1, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000001", Name: "NVIDIA H200 (simulated)", Minor: 1, MemoryBytes: 150754820096, PCIBusID: "00000000:3B:00.0"},
}

// fakeRoot lays out a driver root; device nodes are real char devices on
// the experimental majors 60/61 (as the simulator's), so this needs root.
func fakeRoot(t *testing.T) *config.Config {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root for mknod (make test runs as root)")
	}
	root := t.TempDir()
	w := func(rel string, mode os.FileMode) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	lib := "usr/lib/x86_64-linux-gnu/"
	w(lib+"libcuda.so."+ver, 0o755)
	w(lib+"libnvidia-ml.so."+ver, 0o755)
	w(lib+"libnvidia-ptxjitcompiler.so."+ver, 0o755)
	w(lib+"libnvidia-ptxjitcompiler.so.1", 0o755) // SONAME link: not mounted
	w("usr/bin/nvidia-smi", 0o755)
	w("usr/bin/nvidia-debugdump", 0o644) // not executable: skipped
	if err := os.MkdirAll(filepath.Join(root, "run/simgpu"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mm := range map[string][2]uint32{"nvidia0": {60, 0}, "nvidia1": {60, 1}, "nvidiactl": {60, 255}, "nvidia-uvm": {61, 0}, "nvidia-uvm-tools": {61, 1}} {
		if err := unix.Mknod(filepath.Join(root, "dev", name), unix.S_IFCHR|0o666, int(unix.Mkdev(mm[0], mm[1]))); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Driver.Root, cfg.Driver.DevRoot = root, root
	cfg.Driver.IPCPaths = append(cfg.Driver.IPCPaths, "run/simgpu")
	cfg.StateDir = filepath.Join(t.TempDir(), "containers")
	// Made here, as the host's is by install, so that "nothing left in the
	// state directory" cannot pass on a directory that is not there.
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func hostOf(t *testing.T, cfg *config.Config) *discover.Host {
	t.Helper()
	h, err := discover.DiscoverWith(cfg, twoGPUs)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestDiscoverFiles(t *testing.T) {
	cfg := fakeRoot(t)
	h := hostOf(t, cfg)
	if h.DriverVersion != ver {
		t.Errorf("version %q", h.DriverVersion)
	}
	var names []string
	for _, l := range h.Libraries {
		names = append(names, l.Name)
	}
	if got := strings.Join(names, " "); got != "libcuda.so."+ver+" libnvidia-ml.so."+ver+" libnvidia-ptxjitcompiler.so."+ver {
		t.Errorf("libs %s", got)
	}
	if len(h.Binaries) != 1 || h.Binaries[0].Name != "nvidia-smi" {
		t.Errorf("bins %+v", h.Binaries)
	}
	if len(h.IPCPaths) != 1 || h.IPCPaths[0] != (discover.HostIPC{Rel: "run/simgpu", Dir: true}) {
		t.Errorf("ipc %+v", h.IPCPaths)
	}
	if len(h.Nodes) != 5 || h.Nodes[0].Path != "/dev/nvidiactl" || h.Nodes[0].Major != 60 || h.Nodes[0].Minor != 255 || h.Nodes[4].Path != "/dev/nvidia1" {
		t.Errorf("nodes %+v", h.Nodes)
	}
}

func TestDiscoverErrors(t *testing.T) {
	cfg := fakeRoot(t)
	// A second driver version next to the first.
	if err := os.WriteFile(filepath.Join(cfg.Driver.Root, "usr/lib/x86_64-linux-gnu/libcuda.so.570.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := discover.DiscoverWith(cfg, twoGPUs); err == nil || !strings.Contains(err.Error(), "several driver versions") {
		t.Errorf("err %v", err)
	}
	cfg2 := config.Default()
	cfg2.Driver.Root = t.TempDir()
	if _, err := discover.DiscoverWith(cfg2, twoGPUs); err == nil || !strings.Contains(err.Error(), "no libcuda.so.<version> under driver root") {
		t.Errorf("err %v", err)
	}
	cfg3 := fakeRoot(t)
	os.Remove(filepath.Join(cfg3.Driver.Root, "dev/nvidia-uvm"))
	if _, err := discover.DiscoverWith(cfg3, twoGPUs); err == nil || !strings.Contains(err.Error(), "nvidia-modprobe") {
		t.Errorf("err %v", err)
	}
	cfg4 := fakeRoot(t)
	os.Remove(filepath.Join(cfg4.Driver.Root, "dev/nvidia1"))
	if err := os.WriteFile(filepath.Join(cfg4.Driver.Root, "dev/nvidia1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := discover.DiscoverWith(cfg4, twoGPUs); err == nil || !strings.Contains(err.Error(), "not a device node") {
		t.Errorf("err %v", err)
	}
}

func mustReq(t *testing.T, env ...string) *request.Request {
	t.Helper()
	r, err := request.Parse(env, nil)
	if err != nil || r == nil {
		t.Fatal(r, err)
	}
	return r
}

// normalize replaces the temp dirs so golden files are stable.
func normalize(cfg *config.Config, b []byte) []byte {
	b = bytes.ReplaceAll(b, []byte(cfg.StateDir), []byte("/STATE"))
	return bytes.ReplaceAll(b, []byte(cfg.Driver.Root), []byte("/DRIVER"))
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs (run go test -update to accept):\n%s", p, got)
	}
}

func TestPlanGolden(t *testing.T) {
	cfg := fakeRoot(t)
	h := hostOf(t, cfg)
	// want: what the golden files must say, independently of them: the
	// container's devices in order, each's physical GPU and limits
	const gpu0, gpu1 = "GPU-5e3b6a2e-0000-4000-8000-000000000000", "GPU-5e3b6a2e-0000-4000-8000-000000000001"
	for _, tc := range []struct {
		name string
		env  []string
		want []tenant.Device
		// the container's GPU nodes: the named GPUs' only
		nodes []string
	}{
		{"uuid-memory", []string{"VGPU_VISIBLE_DEVICES=GPU-5e3b6a2e-0000-4000-8000-000000000001", "VGPU_MEMORY_LIMIT=2Gi", "VGPU_COMPUTE_LIMIT=50"},
			[]tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: gpu1}, Memory: 2 << 30, Compute: 50}}, []string{"/dev/nvidia1"}},
		{"all-per-device", []string{"VGPU_VISIBLE_DEVICES=all", "VGPU_MEMORY_LIMIT=1=4G", "CUDA_DEVICE_SM_LIMIT_0=30"},
			[]tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: gpu0}, Compute: 30}, {Index: 1, GPU: tenant.GPU{UUID: gpu1}, Memory: 4e9, Compute: 100}}, []string{"/dev/nvidia0", "/dev/nvidia1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := plan.New(mustReq(t, tc.env...), cfg, h, "c1")
			if err != nil {
				t.Fatal(err)
			}
			js, err := json.MarshalIndent(p, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "plan-"+tc.name+".json", normalize(cfg, append(js, '\n')))
			checkPlan(t, p, tc.want, tc.nodes)
			rec := p.Record()
			q, err := quota.Render(&rec).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "quota-"+tc.name, q)
			parsed, err := quota.Parse(q)
			if err != nil {
				t.Fatalf("the quota written does not parse: %v\n%s", err, q)
			}
			if len(parsed.Devices) != len(tc.want) {
				t.Fatalf("quota devices %+v, want %+v", parsed.Devices, tc.want)
			}
			for i, w := range tc.want {
				d := parsed.Devices[i]
				if d.Index != w.Index || d.GPU.UUID != w.GPU.UUID || d.Memory != w.Memory || d.Compute != w.Compute {
					t.Errorf("quota device %d: index %d %s memory %d compute %d, want index %d %s memory %d compute %d",
						i, d.Index, d.GPU.UUID, d.Memory, d.Compute, w.Index, w.GPU.UUID, w.Memory, w.Compute)
				}
			}
		})
	}
}

var gpuNode = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// checkPlan asserts the plan's decisive fields without the golden file:
// each device's GPU and limits, the GPU nodes of those GPUs only, the
// container's files from its state directory (the quota read-only, the
// share read-write), every other mount read-only but the driver's IPC
// directory, and NVIDIA_VISIBLE_DEVICES=void (no other runtime adds GPUs).
func checkPlan(t *testing.T, p *plan.Plan, want []tenant.Device, gpuNodes []string) {
	t.Helper()
	if len(p.Devices) != len(want) {
		t.Fatalf("plan devices %+v, want %d", p.Devices, len(want))
	}
	for i, w := range want {
		d := p.Devices[i]
		if d.Index != w.Index || d.GPU.UUID != w.GPU.UUID || d.Memory != w.Memory || d.Compute != w.Compute {
			t.Errorf("plan device %d: index %d %s memory %d compute %d, want index %d %s memory %d compute %d",
				i, d.Index, d.GPU.UUID, d.Memory, d.Compute, w.Index, w.GPU.UUID, w.Memory, w.Compute)
		}
	}
	var got []string
	for _, n := range p.Nodes {
		if gpuNode.MatchString(n.Path) {
			got = append(got, n.Path)
		}
	}
	if !slices.Equal(got, gpuNodes) {
		t.Errorf("GPU nodes %v, want %v", got, gpuNodes)
	}
	mounts := map[string]plan.Mount{}
	for _, m := range p.Mounts {
		mounts[m.Destination] = m
		if !m.ReadOnly && m.Destination != tenant.ContainerShared && m.Destination != "/run/simgpu" {
			t.Errorf("mount %s <- %s is writable", m.Destination, m.Source)
		}
	}
	for dest, w := range map[string]plan.Mount{
		"/run/vgpu/quota":               {Source: filepath.Join(p.StateDir, "quota"), ReadOnly: true},
		tenant.ContainerShared:          {Source: filepath.Join(p.StateDir, "shared"), Dir: true},
		"/etc/ld.so.preload":            {Source: filepath.Join(p.StateDir, "ld.so.preload"), ReadOnly: true},
		"/usr/lib/vgpu/libvgpu-cuda.so": {Source: "/usr/lib/vgpu/libvgpu-cuda.so", ReadOnly: true},
	} {
		m, ok := mounts[dest]
		if !ok || m.Source != w.Source || m.ReadOnly != w.ReadOnly || m.Dir != w.Dir {
			t.Errorf("mount %s: %+v (present %v), want source %s read-only %v dir %v", dest, m, ok, w.Source, w.ReadOnly, w.Dir)
		}
	}
	if !slices.Contains(p.Env, "NVIDIA_VISIBLE_DEVICES=void") {
		t.Errorf("env %v lacks NVIDIA_VISIBLE_DEVICES=void", p.Env)
	}
}

// checkSpecEdit asserts what the edited spec must hold without the golden
// file: every mount of the plan from its source with the shim's options
// (ro, or rw and noexec for the share; nosuid, nodev always), every node
// of the plan as a device with its numbers and allowed rwm by the
// cgroup's rules, and NVIDIA_VISIBLE_DEVICES=void as the only value.
func checkSpecEdit(t *testing.T, sp *specs.Spec, p *plan.Plan) {
	t.Helper()
	for _, pm := range p.Mounts {
		var m *specs.Mount
		for i := range sp.Mounts {
			if sp.Mounts[i].Destination == pm.Destination {
				m = &sp.Mounts[i]
			}
		}
		if m == nil {
			t.Errorf("spec lacks the mount on %s", pm.Destination)
			continue
		}
		want := []string{"nosuid", "nodev", "ro"}
		if !pm.ReadOnly {
			want = []string{"nosuid", "nodev", "rw"}
		}
		if pm.Destination == tenant.ContainerShared {
			want = append(want, "noexec")
		}
		for _, o := range want {
			if !slices.Contains(m.Options, o) {
				t.Errorf("mount %s options %v lack %s", m.Destination, m.Options, o)
			}
		}
		if m.Source != pm.Source {
			t.Errorf("mount %s from %s, want %s", m.Destination, m.Source, pm.Source)
		}
	}
	if sp.Linux == nil {
		t.Fatal("spec has no linux section")
	}
	for _, n := range p.Nodes {
		found := false
		for _, d := range sp.Linux.Devices {
			found = found || d.Path == n.Path && d.Type == n.Type && d.Major == n.Major && d.Minor == n.Minor
		}
		if !found {
			t.Errorf("spec lacks device %s %s %d:%d", n.Path, n.Type, n.Major, n.Minor)
		}
		if sp.Linux.Resources == nil || !allowedRWM(sp.Linux.Resources.Devices, n.Type, n.Major, n.Minor) {
			t.Errorf("the device cgroup does not allow %s (%d:%d) rwm", n.Path, n.Major, n.Minor)
		}
	}
	var nvidia []string
	for _, e := range sp.Process.Env {
		if strings.HasPrefix(e, "NVIDIA_VISIBLE_DEVICES=") {
			nvidia = append(nvidia, e)
		}
	}
	if !slices.Equal(nvidia, []string{"NVIDIA_VISIBLE_DEVICES=void"}) {
		t.Errorf("env NVIDIA_VISIBLE_DEVICES %v, want only =void", nvidia)
	}
}

// allowedRWM evaluates device cgroup rules as runc does (in order, the last
// match wins) for a node's read, write and mknod.
func allowedRWM(rules []specs.LinuxDeviceCgroup, typ string, major, minor int64) bool {
	state := map[rune]bool{}
	for _, r := range rules {
		if r.Type != "" && r.Type != "a" && r.Type != typ || r.Major != nil && *r.Major != major || r.Minor != nil && *r.Minor != minor {
			continue
		}
		acc := r.Access
		if acc == "" {
			acc = "rwm"
		}
		for _, c := range acc {
			state[c] = r.Allow
		}
	}
	return state['r'] && state['w'] && state['m']
}

func bundle(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../spec/testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestInstallOnCorpus(t *testing.T) {
	for _, name := range []string{"docker", "containerd", "podman"} {
		t.Run(name, func(t *testing.T) {
			cfg := fakeRoot(t)
			h := hostOf(t, cfg)
			dir := bundle(t, name)
			// An image with its own preload, and a hostile symlink next to it.
			rootfs := filepath.Join(dir, "rootfs")
			if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(rootfs, "etc/ld.so.preload"), []byte("# image\n/usr/lib/libjemalloc.so.2 /usr/lib/vgpu/libvgpu-cuda.so\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := spec.LoadBundle(dir)
			if err != nil {
				t.Fatal(err)
			}
			req, err := request.Parse(s.Env(), s.Annotations())
			if err != nil || req == nil {
				t.Fatal(req, err)
			}
			p, err := plan.New(req, cfg, h, "c-"+name)
			if err != nil {
				t.Fatal(err)
			}
			// The corpus rootfs paths are absolute host paths; point docker/podman at ours.
			if name != "containerd" {
				if _, err := Run(Input{Config: cfg, Host: h, ContainerID: p.ContainerID, Request: req, Rootfs: rootfs}); err != nil {
					t.Fatal(err)
				}
				pre, _ := os.ReadFile(filepath.Join(p.StateDir, config.StatePreload))
				if string(pre) != "/usr/lib/libjemalloc.so.2\n/usr/lib/vgpu/libvgpu-cuda.so\n/usr/lib/vgpu/libvgpu-nvml.so\n" {
					t.Errorf("preload %q", pre)
				}
				if err := state.Remove(cfg.StateDir, p.ContainerID); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := Run(Input{Config: cfg, Host: h, ContainerID: p.ContainerID, Request: req, Bundle: s.Bundle(), Rootfs: s.RootfsPath(), Target: &apply.SpecEdit{Spec: s}}); err != nil {
				t.Fatal(err)
			}
			out, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var sp specs.Spec
			if err := json.Unmarshal(out, &sp); err != nil {
				t.Fatal(err)
			}
			golden(t, "spec-"+name+".golden.json", normalize(cfg, out))
			checkSpecEdit(t, &sp, p)
			if fi, _ := os.Stat(filepath.Join(dir, "config.json")); fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v", fi.Mode())
			}
			info, err := state.Read(cfg.StateDir, p.ContainerID)
			if err != nil {
				t.Fatal(err)
			}
			if info.ID != p.ContainerID || info.Bundle != dir || len(info.Devices) != len(p.Devices) {
				t.Errorf("%+v", info)
			}
			t.Cleanup(func() {
				if err := state.Remove(cfg.StateDir, p.ContainerID); err != nil {
					t.Error(err)
				}
			})
			checkSharedFS(t, filepath.Join(p.StateDir, config.StateShared))
			fi, err := os.Stat(filepath.Join(p.StateDir, config.StateShared))
			if err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
				t.Errorf("shared %v %v", fi.Mode(), err)
			}
			if err := state.SetPIDs(cfg.StateDir, p.ContainerID, []int{42}); err != nil {
				t.Fatal(err)
			}
			if info, _ := state.Read(cfg.StateDir, p.ContainerID); len(info.PIDs) != 1 {
				t.Error("pids")
			}
			// A second injection is refused, and a second state dir too.
			s2, _ := spec.LoadBundle(dir)
			if err := apply.Spec(p, s2); err == nil || !strings.Contains(err.Error(), "already edited") {
				t.Errorf("err %v", err)
			}
			if _, err := Run(Input{Config: cfg, Host: h, ContainerID: p.ContainerID, Request: req}); err == nil || !strings.Contains(err.Error(), "already exists") {
				t.Errorf("err %v", err)
			}
			if err := state.Remove(cfg.StateDir, p.ContainerID); err != nil {
				t.Fatal(err)
			}
			if err := state.Remove(cfg.StateDir, p.ContainerID); err != nil {
				t.Fatal(err)
			}
			if ents := stateEntries(cfg.StateDir); len(ents) != 0 {
				t.Errorf("left in state dir: %v", ents)
			}
		})
	}
}

func TestMain(m *testing.M) {
	// fakeRoot's "libraries" are not ELF files; TestRunChecksDriver and the
	// e2e tests (real simulated driver) check the check.
	checkDriver = func(*discover.Host, *config.Config) error { return nil }
	os.Exit(m.Run())
}

// A driver the stand-ins do not cover is refused before anything is written:
// no state directory, no spec edit.
func TestRunChecksDriver(t *testing.T) {
	cfg := fakeRoot(t)
	h := hostOf(t, cfg)
	dir := bundle(t, "containerd")
	s, _ := spec.LoadBundle(dir)
	req, _ := request.Parse(s.Env(), s.Annotations())
	saved := checkDriver
	defer func() { checkDriver = saved }()
	checkDriver = checkDriverExports // fakeRoot's libcuda.so is not ELF: refused
	_, err := Run(Input{Config: cfg, Host: h, ContainerID: "c1", Request: req, Target: &apply.SpecEdit{Spec: s}})
	if err == nil || !strings.Contains(err.Error(), "checking the driver's exports") {
		t.Fatalf("err %v", err)
	}
	if s.Modified() {
		t.Error("spec modified")
	}
	if ents := stateEntries(cfg.StateDir); len(ents) != 0 {
		t.Errorf("left: %v", ents)
	}
}

func TestInstallRollsBack(t *testing.T) {
	cfg := fakeRoot(t)
	h := hostOf(t, cfg)
	dir := bundle(t, "containerd")
	s, _ := spec.LoadBundle(dir)
	req, _ := request.Parse(s.Env(), s.Annotations())
	p, err := plan.New(req, cfg, h, "c1")
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil { // Save cannot create its temp file
		t.Fatal(err)
	}
	defer func() {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Error(err)
		}
	}()
	if os.Geteuid() == 0 {
		// root ignores permissions: make the bundle a read-only bind? Use a
		// path that cannot be renamed over instead.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, "config.json"))
		if err := os.Mkdir(filepath.Join(dir, "config.json"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json", "x"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Run(Input{Config: cfg, Host: h, ContainerID: "c1", Request: req, Target: &apply.SpecEdit{Spec: s}}); err == nil {
		t.Fatal("Run succeeded")
	}
	if _, err := os.Stat(p.StateDir); !os.IsNotExist(err) {
		t.Errorf("state dir left: %v", err)
	}
	if s.Modified() {
		t.Error("spec modified after failed Install")
	}
	// the bundle's config.json is as it was (as root: the directory in its place)
	if os.Geteuid() != 0 {
		if after, err := os.ReadFile(filepath.Join(dir, "config.json")); err != nil || !bytes.Equal(after, before) {
			t.Errorf("config.json changed by a failed Install (%v):\n%s\nwas:\n%s", err, after, before)
		}
	} else if ents, err := os.ReadDir(filepath.Join(dir, "config.json")); err != nil || len(ents) != 1 || ents[0].Name() != "x" {
		t.Errorf("config.json (a directory) changed by a failed Install: %v %v", ents, err)
	}
	if ents := stateEntries(cfg.StateDir); len(ents) != 0 {
		t.Errorf("left: %v", ents)
	}
}

// stateEntries lists dir without the lock file, which stays for good.
// fakeRoot makes the state directory, so one that is missing or cannot be
// read is not "nothing left": it shows as an entry, so that the caller's
// check fails.
func stateEntries(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return []string{"(cannot read the state directory: " + err.Error() + ")"}
	}
	var out []string
	for _, e := range ents {
		if e.Name() != config.StateLock {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestApplyToSpecExistingDevice(t *testing.T) {
	cfg := fakeRoot(t)
	h := hostOf(t, cfg)
	p, _ := plan.New(mustReq(t, "VGPU_VISIBLE_DEVICES=0"), cfg, h, "c1")
	s, _ := spec.Parse([]byte(`{"linux":{"devices":[{"path":"/dev/nvidiactl","type":"c","major":60,"minor":255}]}}`))
	if err := apply.Spec(p, s); err != nil {
		t.Fatal(err)
	}
	d, _ := s.Devices()
	if len(d) != 4 { // nvidiactl kept once + uvm, uvm-tools, nvidia0
		t.Errorf("devices %+v", d)
	}
	r, _ := s.DeviceRules()
	if len(r) != 4 || r[0].Access != "rwm" {
		t.Errorf("rules %+v", r)
	}
	s2, _ := spec.Parse([]byte(`{"linux":{"devices":[{"path":"/dev/nvidiactl","type":"c","major":195,"minor":255}]}}`))
	if err := apply.Spec(p, s2); err == nil || s2.Modified() {
		t.Errorf("conflicting node accepted: %v", err)
	}
	if err := apply.CheckDeviceRules(p, r); err != nil {
		t.Error(err)
	}
	if err := apply.CheckDeviceRules(p, []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}); err == nil || !strings.Contains(err.Error(), "--device /dev/nvidia0") {
		t.Errorf("err %v", err)
	}
	if err := apply.CheckDeviceRules(p, []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}); err != nil {
		t.Errorf("allow-all: %v", err)
	}
}

func TestImagePreloadSymlink(t *testing.T) {
	rootfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("/host/secret.so\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(rootfs, "etc/ld.so.preload")); err != nil {
		t.Fatal(err)
	}
	lines, err := ImagePreload(rootfs)
	if err != nil || len(lines) != 0 {
		t.Errorf("followed a symlink out of the rootfs: %q %v", lines, err)
	}
	os.Remove(filepath.Join(rootfs, "etc/ld.so.preload"))
	if err := os.WriteFile(filepath.Join(rootfs, "etc/real"), []byte("/a.so:/b.so\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/real", filepath.Join(rootfs, "etc/ld.so.preload")); err != nil {
		t.Fatal(err)
	}
	lines, err = ImagePreload(rootfs)
	if err != nil || strings.Join(lines, ",") != "/a.so,/b.so" {
		t.Errorf("in-rootfs symlink: %q %v", lines, err)
	}
}

// Containers created at once on one GPU get slots that do not overlap while
// their shares fit, whatever the order; another GPU, another period or no
// limit does not take a slot.
func TestRunAssignsSlots(t *testing.T) {
	cfg := fakeRoot(t)
	h := hostOf(t, cfg)
	shares := []int{30, 20, 10, 25, 15}
	var wg sync.WaitGroup
	errs := make(chan error, len(shares)+3)
	create := func(id string, env ...string) {
		defer wg.Done()
		_, err := Run(Input{Config: cfg, Host: h, ContainerID: id, Request: mustReq(t, env...)})
		if err != nil {
			errs <- fmt.Errorf("%s: %w", id, err)
		}
	}
	for i, s := range shares {
		wg.Add(1)
		go create(fmt.Sprintf("c%d", i), "VGPU_VISIBLE_DEVICES=0", fmt.Sprintf("VGPU_COMPUTE_LIMIT=%d", s))
	}
	wg.Add(2)
	go create("other-gpu", "VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=90")
	go create("unlimited", "VGPU_VISIBLE_DEVICES=0")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var held []slots.Slot
	for i, s := range shares {
		q, err := state.Read(cfg.StateDir, fmt.Sprintf("c%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if q.Devices[0].Phase == nil {
			t.Fatalf("c%d: no phase in its quota file", i)
		}
		held = append(held, slots.Slot{Start: *q.Devices[0].Phase, Width: s})
	}
	for i := range held {
		for j := i + 1; j < len(held); j++ {
			if ov := slots.Overlap(held[i], held[j]); ov != 0 {
				t.Errorf("slots %v and %v overlap by %d points", held[i], held[j], ov)
			}
		}
	}
	if q, _ := state.Read(cfg.StateDir, "other-gpu"); q == nil || q.Devices[0].Phase == nil || *q.Devices[0].Phase != 0 {
		t.Errorf("the other GPU's container should start at phase 0: %+v", q)
	}
	if q, _ := state.Read(cfg.StateDir, "unlimited"); q == nil || q.Devices[0].Phase != nil {
		t.Errorf("an unlimited container got a phase: %+v", q)
	}

	// A removed container frees its slot; launch-by-launch pacing takes none.
	if err := state.Remove(cfg.StateDir, "c0"); err != nil {
		t.Fatal(err)
	}
	res, err := Run(Input{Config: cfg, Host: h, ContainerID: "again", Request: mustReq(t, "VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=30")})
	if err != nil {
		t.Fatal(err)
	}
	if ph := res.Record.Devices[0].Phase; ph == nil || *ph != held[0].Start {
		t.Errorf("after c0 left, a 30 %% container got phase %v, want c0's %d", ph, held[0].Start)
	}
	// A container killed and never deleted (its init pid gone) frees its slot;
	// one not started yet (no pid) keeps it.
	uuid := twoGPUs[0].UUID
	if n := len(state.Taken(cfg.StateDir, contract.DefaultPeriodMS)[uuid]); n != len(shares) {
		t.Fatalf("%d slots taken on GPU 0, want %d", n, len(shares))
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := state.SetPIDs(cfg.StateDir, "again", []int{dead.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	if n := len(state.Taken(cfg.StateDir, contract.DefaultPeriodMS)[uuid]); n != len(shares)-1 {
		t.Errorf("%d slots taken on GPU 0 with a stale container, want %d", n, len(shares)-1)
	}
	if err := state.SetPIDs(cfg.StateDir, "again", []int{os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	if n := len(state.Taken(cfg.StateDir, contract.DefaultPeriodMS)[uuid]); n != len(shares) {
		t.Errorf("%d slots taken on GPU 0 with a live container, want %d", n, len(shares))
	}
	cfg.Library.ComputePeriod = "0"
	res, err = Run(Input{Config: cfg, Host: h, ContainerID: "nogate", Request: mustReq(t, "VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=30")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Record.Devices[0].Phase != nil {
		t.Errorf("period 0 (launch by launch) got a phase")
	}
}

// A trusted caller (device plugin, DRA) passes an Allocation, not env strings: the
// same pipeline makes the same state from it.
func TestRunAllocation(t *testing.T) {
	cfg := fakeRoot(t)
	h := hostOf(t, cfg)
	g := Allocation{UUIDs: []string{twoGPUs[1].UUID}, Memory: []uint64{2 << 30}, Compute: []int{40}, Source: "claim default/train"}
	req, err := g.Request()
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Input{Config: cfg, Host: h, ContainerID: "k8s-1", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	d := quota.Render(res.Record).Devices
	if len(d) != 1 || d[0].GPU.UUID != twoGPUs[1].UUID || d[0].Memory != 2<<30 || d[0].Compute != 40 || d[0].Phase == nil {
		t.Errorf("quota devices %+v", d)
	}
	for _, bad := range []Allocation{
		{Source: "claim a"},
		{UUIDs: []string{"0"}, Source: "claim b"},
		{UUIDs: []string{twoGPUs[0].UUID}, Compute: []int{101}, Source: "claim c"},
		{UUIDs: []string{twoGPUs[0].UUID}, Memory: []uint64{1, 2}, Source: "claim d"},
	} {
		if _, err := bad.Request(); err == nil || !strings.Contains(err.Error(), bad.Source) {
			t.Errorf("%+v: err %v, want one naming %q", bad, err, bad.Source)
		}
	}
	// More memory than the GPU has is refused naming the grant.
	req, _ = Allocation{UUIDs: []string{twoGPUs[0].UUID}, Memory: []uint64{1 << 40}, Source: "claim e"}.Request()
	if _, err := Run(Input{Config: cfg, Host: h, ContainerID: "k8s-2", Request: req}); err == nil || !strings.Contains(err.Error(), "claim e: memory limit 1Ti") {
		t.Errorf("err %v", err)
	}
}

// checkSharedFS asserts that dir is a tmpfs of apply.SharedFSSize bytes and
// apply.SharedFSInodes inodes (apply/sharedfs.go).
func checkSharedFS(t *testing.T, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC || uint64(st.Blocks)*uint64(st.Bsize) != apply.SharedFSSize || st.Files != apply.SharedFSInodes {
		t.Errorf("%s: fs type %#x, %d bytes, %d inodes; want a tmpfs of %d bytes, %d inodes", dir, st.Type, uint64(st.Blocks)*uint64(st.Bsize), st.Files, apply.SharedFSSize, apply.SharedFSInodes)
	}
}

// Kubernetes cores are requests; the limit is the host's policy, never the
// pod's: equal to the request by default, none with cores_limit = "none".
func TestCoresAreRequests(t *testing.T) {
	for _, tc := range []struct {
		policy     string
		limit, req uint64
	}{{"", 30, 30}, {config.CoresLimitRequest, 30, 30}, {config.CoresLimitNone, 100, 30}} {
		g := Allocation{UUIDs: []string{"GPU-1"}, Compute: []int{30}, Source: "claim ns/c"}
		g.CoresAsRequests(tc.policy)
		r, err := g.Request()
		if err != nil || r.Compute.For(0) != tc.limit || r.ComputeRequest.For(0) != tc.req {
			t.Errorf("cores_limit %q: limit %d request %d (%v), want %d and %d", tc.policy, r.Compute.For(0), r.ComputeRequest.For(0), err, tc.limit, tc.req)
		}
	}
	g := Allocation{UUIDs: []string{"GPU-1"}, Compute: []int{20}, ComputeRequest: []int{30}, Source: "claim ns/c"}
	if _, err := g.Request(); err == nil {
		t.Error("a grant's request above its limit was accepted")
	}
}

// Kubernetes memory is the request; the limit is the host's policy (or a
// DeviceClass's), never the pod's: equal to the request by default; none
// with memory_limit = "none" (the limit of any request-only tenant); a
// size, never below the request. A policy that does not parse is refused,
// naming it, and the grant is unchanged.
func TestMemoryIsRequest(t *testing.T) {
	const gi = uint64(1 << 30)
	for _, tc := range []struct {
		policy     string
		limit, req uint64
	}{{"", 3 * gi, 3 * gi}, {config.MemoryLimitRequest, 3 * gi, 3 * gi}, {config.MemoryLimitNone, 0, 3 * gi},
		{"32Gi", 32 * gi, 3 * gi}, {"2Gi", 3 * gi, 3 * gi}} {
		g := Allocation{UUIDs: []string{"GPU-1"}, Memory: []uint64{3 * gi}, Source: "claim ns/c"}
		if err := g.MemoryAsRequests(tc.policy); err != nil {
			t.Fatalf("memory_limit %q: %v", tc.policy, err)
		}
		r, err := g.Request()
		if err != nil || r.Memory.For(0) != tc.limit || r.MemoryRequest.For(0) != tc.req {
			t.Errorf("memory_limit %q: limit %d request %d (%v), want %d and %d", tc.policy, r.Memory.For(0), r.MemoryRequest.For(0), err, tc.limit, tc.req)
		}
	}
	g := Allocation{UUIDs: []string{"GPU-1"}, Memory: []uint64{3 * gi}, Source: "claim ns/c"}
	if err := g.MemoryAsRequests("lots"); err == nil || !strings.Contains(err.Error(), `"lots"`) || !strings.Contains(err.Error(), "claim ns/c") || g.MemoryRequest != nil {
		t.Errorf("a policy that does not parse: %v, grant %+v", err, g)
	}
	g = Allocation{UUIDs: []string{"GPU-1"}, Memory: []uint64{gi}, MemoryRequest: []uint64{2 * gi}, Source: "claim ns/c"}
	if _, err := g.Request(); err == nil {
		t.Error("a grant's memory request above its limit was accepted")
	}
}
