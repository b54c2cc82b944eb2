//go:build integration

package cudahook_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// The spatial mode's decisions (which pipe directory and share a process
// must run with, what a tenant's own settings become, the execution affinity
// of its contexts) are pure: testdata/spatial_test.c checks them exactly
// against quota files as the host writes them.
func TestSpatialDecisions(t *testing.T) {
	bin := filepath.Join(buildDir(t), "cudahook", "spatial_test")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("spatial test not built (make c-build): %v", err)
	}
	out, err := exec.Command(bin).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
}

// spatialClient builds testdata/spatial.c once, linked with -lcuda.
func spatialClient(t *testing.T) string { return simClient(t, "spatial") }

// spatialEnv: a container whose device 0 is spatial at compute, its quota's
// pipe directory pipe, on root; log level info. More devices: time sliced at
// their compute.
func spatialEnv(t *testing.T, root *simroot.Root, pipes []string, compute ...int) []string {
	t.Helper()
	b := buildDir(t)
	dir := t.TempDir()
	q := &quota.File{
		DriverCuda: filepath.Join(root.LibDir(), "libcuda.so."+simroot.DriverVersion),
		DriverNvml: filepath.Join(root.LibDir(), "libnvidia-ml.so."+simroot.DriverVersion),
		SharedDir:  filepath.Join(dir, "shared"),
		LogLevel:   "info",
	}
	for i, c := range compute {
		d := tenant.Device{Index: i, GPU: tenant.GPU{UUID: simroot.DefaultUUID(i)}, Compute: c, Memory: 1 << 30}
		if i < len(pipes) {
			d.Mode, d.MPSPipe = tenant.Spatial, pipes[i]
		}
		q.Devices = append(q.Devices, d)
	}
	data, err := q.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(q.SharedDir, 0o700); err != nil {
		t.Fatal(err)
	}
	qf := filepath.Join(dir, "quota")
	if err := os.WriteFile(qf, data, 0o600); err != nil {
		t.Fatal(err)
	}
	vars := []string{}
	for _, v := range os.Environ() {
		if !strings.HasPrefix(v, "CUDA_MPS_") {
			vars = append(vars, v)
		}
	}
	vars = append(vars, root.Env()...)
	return append(vars, "VGPU_QUOTA_FILE="+qf,
		"LD_PRELOAD="+filepath.Join(b, "lib", "libvgpu-cuda.so")+":"+filepath.Join(b, "lib", "libvgpu-nvml.so"))
}

func runSpatial(t *testing.T, vars []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(spatialClient(t), args...)
	cmd.Env = vars
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("spatial %v: %v\nstdout: %s\nstderr: %s", args, err, out.String(), errb.String())
	}
	return result{kv: parseKV(out.String()), stderr: errb.String()}
}

func startMPS(t *testing.T, root *simroot.Root) *simroot.MPS {
	t.Helper()
	m, err := root.StartMPS(filepath.Join(t.TempDir(), "pipe"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// A spatial device's share comes from the quota, whatever the tenant's own
// environment says: dropped variables, a higher percentage or another pipe
// directory are put back before the driver reads them (a lower percentage
// is the tenant's to keep). The process is the GPU's MPS client and sees
// its share of the SMs; the contexts it creates get it as their affinity,
// also one asking for the whole GPU.
func TestSpatialShareFromQuota(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := startMPS(t, root)
	base := spatialEnv(t, root, []string{m.Pipe}, 50)
	for _, c := range []struct {
		name string
		env  []string
		sms  string
		pct  string
	}{
		{"variables dropped", nil, "66", "50"},
		{"tenant asks 100", []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"}, "66", "50"},
		{"tenant asks 50.0", []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50.0"}, "66", "50"},
		{"tenant's own daemon", []string{"CUDA_MPS_PIPE_DIRECTORY=" + t.TempDir()}, "66", "50"},
		{"tenant lowers to 20", []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20"}, "26", "20"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runSpatial(t, append(append([]string{}, base...), c.env...))
			for k, want := range map[string]string{"init": "0", "mps": "1", "sms": c.sms, "pct_env": c.pct,
				"pipe_env": m.Pipe, "v2": "0", "v2_aff": c.sms, "v3": "0", "v3_aff": c.sms} {
				if r.kv[k] != want {
					t.Errorf("%s = %q, want %q (stderr: %s)", k, r.kv[k], want, r.stderr)
				}
			}
		})
	}
}

// Not connected to the MPS server, a process gets no GPU, not the whole GPU:
// with no daemon in the quota's pipe directory (down, or not mounted) cuInit
// fails with MPS_CONNECTION_FAILED and one line, and every later call with
// NOT_INITIALIZED. Two spatial devices behind two pipe directories cannot be
// one process's: refused the same way.
func TestSpatialFailsClosed(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{Devices: []simroot.Device{{}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		pipes []string
		why   string
	}{
		{"no daemon", []string{t.TempDir()}, "is not a client of its MPS server"},
		{"two pipe directories", []string{t.TempDir(), t.TempDir()}, "name two MPS pipe directories"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runSpatial(t, spatialEnv(t, root, c.pipes, 50, 50))
			if r.kv["init"] != "805" || r.kv["count_after"] != "3" {
				t.Errorf("init=%s count_after=%s, want 805 and 3", r.kv["init"], r.kv["count_after"])
			}
			if !strings.Contains(r.stderr, c.why) || !strings.Contains(r.stderr, "refusing GPU access") ||
				strings.Count(r.stderr, "refusing") != 1 {
				t.Errorf("stderr %q: want one line with %q", r.stderr, c.why)
			}
		})
	}
	// the daemon up: the same container works
	m := startMPS(t, root)
	if r := runSpatial(t, spatialEnv(t, root, []string{m.Pipe}, 50)); r.kv["init"] != "0" || r.kv["mps"] != "1" {
		t.Errorf("with the daemon: %v (stderr %s)", r.kv, r.stderr)
	}
}

// Launches on a spatial device are not paced (MPS holds the share): the
// library sets no pacer up for it, while a time-sliced device at the same
// limit in the same container is paced; the launches all run.
func TestSpatialNotPaced(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{Devices: []simroot.Device{{}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	m := startMPS(t, root)
	r := runSpatial(t, spatialEnv(t, root, []string{m.Pipe}, 20, 20), "40")
	if r.kv["init"] != "0" || r.kv["sync"] != "0" || r.kv["launched"] != "40" {
		t.Fatalf("%v (stderr %s)", r.kv, r.stderr)
	}
	if strings.Contains(r.stderr, "device 0 ("+simroot.DefaultUUID(0)+"): compute request") {
		t.Errorf("the spatial device is paced: %s", r.stderr)
	}
	if !strings.Contains(r.stderr, "device 1 ("+simroot.DefaultUUID(1)+"): compute request 20%") {
		t.Errorf("the time-sliced device is not paced: %s", r.stderr)
	}
}

// The MPS client priority of a spatial tenant is the host's: the library
// sets CUDA_MPS_CLIENT_PRIORITY from the share file's priority word before
// the driver reads it, low below normal (1), high and normal at normal (0),
// whatever the tenant set itself. What counts is what the MPS server saw:
// the simulated control daemon records each client's priority.
func TestSpatialClientPriority(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := startMPS(t, root)
	for _, c := range []struct {
		name string
		prio tenant.Priority
		env  []string
		want int
	}{
		{"low", tenant.Low, nil, 1},
		{"high", tenant.High, nil, 0},
		{"normal", tenant.Normal, nil, 0},
		{"low sets 0 itself", tenant.Low, []string{"CUDA_MPS_CLIENT_PRIORITY=0"}, 1},
		{"high sets 1 itself", tenant.High, []string{"CUDA_MPS_CLIENT_PRIORITY=1"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			vars := append(spatialEnv(t, root, []string{m.Pipe}, 50), c.env...)
			writeSharePriority(t, vars, c.prio)
			cmd := exec.Command(spatialClient(t))
			cmd.Env = vars
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
			}
			if kv := parseKV(out.String()); kv["init"] != "0" || kv["mps"] != "1" {
				t.Fatalf("not an MPS client: %v (stderr %s)", kv, errb.String())
			}
			got, err := m.ClientPriority(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("the MPS server saw client priority %d, want %d (stderr %s)", got, c.want, errb.String())
			}
		})
	}
}

// writeSharePriority writes the host's share file of the container of vars
// (beside its quota file, as the admission does) with device 0 at prio.
func writeSharePriority(t *testing.T, vars []string, prio tenant.Priority) {
	t.Helper()
	var qf string
	for _, v := range vars {
		if f, ok := strings.CutPrefix(v, "VGPU_QUOTA_FILE="); ok {
			qf = f
		}
	}
	b, err := arbiter.EncodeOrder([]uint64{0}, []uint64{prio.ShareWord()})
	if err != nil {
		t.Fatal(err)
	}
	path := contract.SharePath(filepath.Join(filepath.Dir(qf), "shared"))
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
