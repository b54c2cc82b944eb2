//go:build integration

// Tests of the stand-in libraries against the simulated GPU. Every scenario
// is its own process with its own LD_PRELOAD and quota file, as in a
// container: the C clients in testdata/ reach the driver by link (-lcuda),
// by dlopen+dlsym, and by cuGetProcAddress_v2 only (as cudart 12/13 does).
package cudahook_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

const (
	MiB = 1 << 20
	GiB = 1 << 30
	ctx = 256 * MiB // simroot's default context memory
)

var routes = []string{"link", "dlsym", "procaddr"}

func buildDir(t testing.TB) string {
	t.Helper()
	b := os.Getenv("VGPU_BUILD")
	if b == "" {
		t.Fatal("VGPU_BUILD is not set: run `make c-build` and VGPU_BUILD=$PWD/build go test")
	}
	for _, l := range []string{"libvgpu-cuda.so", "libvgpu-nvml.so"} {
		if _, err := os.Stat(filepath.Join(b, "lib", l)); err != nil {
			t.Fatalf("stand-in not built: %v", err)
		}
	}
	return b
}

var (
	clientsOnce sync.Once
	clientsDir  string
	clientsErr  error
)

// clients builds the three C clients once per test binary.
func clients(t *testing.T) string {
	t.Helper()
	buildDir(t)
	clientsOnce.Do(func() {
		root, err := simroot.Create(mustTemp(), simroot.Options{})
		if err != nil {
			clientsErr = err
			return
		}
		clientsDir = mustTemp()
		for _, r := range routes {
			args := []string{"-O1", "-Wall", "-Werror", "-DROUTE_" + strings.ToUpper(r), "-Iinclude",
				"-o", filepath.Join(clientsDir, "client-"+r), "testdata/client.c"}
			if r == "link" {
				// linked against the simulated driver; at run time the preloaded
				// stand-in (SONAME libcuda.so.1) satisfies DT_NEEDED instead
				args = append(args, "-L"+root.LibDir(), "-l:libcuda.so.1")
			}
			args = append(args, "-ldl", "-lpthread")
			if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
				clientsErr = fmt.Errorf("gcc %s: %v\n%s", r, err, out)
				return
			}
		}
	})
	if clientsErr != nil {
		t.Fatal(clientsErr)
	}
	return clientsDir
}

var tempDirs []string // removed by TestMain

func mustTemp() string {
	d, err := os.MkdirTemp("", "cudahook-test-")
	if err != nil {
		panic(err)
	}
	tempDirs = append(tempDirs, d)
	return d
}

// env is one container: a simulated driver root, a quota file, a shared dir.
type env struct {
	t     *testing.T
	root  *simroot.Root
	quota string
	vars  []string
}

func newEnv(t *testing.T, memory []uint64) *env {
	t.Helper()
	return newEnvOpts(t, memory, simroot.Options{})
}

// newEnvOpts is newEnv over a simulated driver laid out by opts (its
// devices: one per entry of memory).
func newEnvOpts(t *testing.T, memory []uint64, opts simroot.Options) *env {
	t.Helper()
	b := buildDir(t)
	opts.Devices = make([]simroot.Device, len(memory))
	root, err := simroot.Create(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	q := &quota.File{
		DriverCuda: filepath.Join(root.LibDir(), "libcuda.so."+root.Version()),
		DriverNvml: filepath.Join(root.LibDir(), "libnvidia-ml.so."+root.Version()),
		SharedDir:  filepath.Join(dir, "shared"),
	}
	for i, m := range memory {
		q.Devices = append(q.Devices, tenant.Device{Index: i, GPU: tenant.GPU{UUID: simroot.DefaultUUID(i)}, Memory: m, Compute: 100})
	}
	data, err := q.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(q.SharedDir, 0o700); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, root: root, quota: filepath.Join(dir, "quota")}
	if err := os.WriteFile(e.quota, data, 0o600); err != nil {
		t.Fatal(err)
	}
	e.vars = append(os.Environ(), root.Env()...)
	e.vars = append(e.vars, "VGPU_QUOTA_FILE="+e.quota,
		"LD_PRELOAD="+filepath.Join(b, "lib", "libvgpu-cuda.so")+":"+filepath.Join(b, "lib", "libvgpu-nvml.so"))
	return e
}

type result struct {
	kv     map[string]string
	stderr string
}

func (r result) u(t *testing.T, k string) uint64 {
	t.Helper()
	v, ok := r.kv[k]
	if !ok {
		t.Fatalf("client printed no %s (stderr: %s)", k, r.stderr)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return n
}

func (e *env) run(prog string, args ...string) result {
	e.t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = e.vars
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("%s %v: %v\nstdout: %s\nstderr: %s", prog, args, err, out.String(), errb.String())
	}
	return result{kv: parseKV(out.String()), stderr: errb.String()}
}

func parseKV(s string) map[string]string {
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// Every allocation API, every route: total = limit, OUT_OF_MEMORY at the
// limit, everything given back, and the same again after the frees.
func TestLimitEveryAPIEveryRoute(t *testing.T) {
	dir := clients(t)
	const limit = 2 * GiB
	apis := []string{"alloc", "pitch", "managed", "async", "pool", "vmm", "array", "array3d", "mipmap"}
	for _, route := range routes {
		for _, api := range apis {
			t.Run(route+"/"+api, func(t *testing.T) {
				e := newEnv(t, []uint64{limit})
				r := e.run(filepath.Join(dir, "client-"+route), "fill", api, "64")
				if got := r.u(t, "before_total"); got != limit {
					t.Errorf("cuMemGetInfo total = %d, want the limit %d", got, limit)
				}
				if got := r.u(t, "before_devtotal"); got != limit {
					t.Errorf("cuDeviceTotalMem = %d, want the limit %d", got, limit)
				}
				if got := r.u(t, "before_free"); got != limit-ctx {
					t.Errorf("free before = %d, want limit - context = %d", got, limit-ctx)
				}
				if r.kv["first_err"] != "2" {
					t.Errorf("allocation past the limit returned %s, want CUDA_ERROR_OUT_OF_MEMORY (2)", r.kv["first_err"])
				}
				first := r.u(t, "first_bytes")
				// pitch rounds rows up, so fewer 64 MiB requests fit
				if first > limit-ctx || first < limit-ctx-3*64*MiB {
					t.Errorf("allocated %d bytes before the refusal, want about %d", first, limit-ctx)
				}
				if got := r.u(t, "full_free"); got > 64*MiB {
					t.Errorf("free at the limit = %d", got)
				}
				if r.kv["free_failures"] != "0" {
					t.Errorf("%s frees failed", r.kv["free_failures"])
				}
				if got := r.u(t, "freed_free"); got != limit-ctx {
					t.Errorf("free after freeing = %d, want %d", got, limit-ctx)
				}
				if second := r.u(t, "second_bytes"); second != first || r.kv["second_err"] != "2" {
					t.Errorf("second fill: %d bytes (err %s), want %d and OUT_OF_MEMORY", second, r.kv["second_err"], first)
				}
				if got := r.u(t, "end_free"); got != limit-ctx {
					t.Errorf("free at the end = %d, want %d", got, limit-ctx)
				}
			})
		}
	}
}

func TestForkParentAndChildCounted(t *testing.T) {
	dir := clients(t)
	const limit = 3 * GiB
	e := newEnv(t, []uint64{limit})
	r := e.run(filepath.Join(dir, "client-link"), "fork")
	if got := r.u(t, "parent_free"); got != limit-ctx-GiB {
		t.Errorf("parent after 1 GiB: free %d, want %d", got, limit-ctx-GiB)
	}
	if r.kv["child_alloc"] != "0" {
		t.Fatalf("child allocation: %s", r.kv["child_alloc"])
	}
	if got := r.u(t, "child_free"); got != limit-2*ctx-2*GiB {
		t.Errorf("child sees free %d, want both processes counted: %d", got, limit-2*ctx-2*GiB)
	}
	if got := r.u(t, "after_child_free"); got != limit-ctx-GiB {
		t.Errorf("after the child exited: free %d, want its memory back: %d", got, limit-ctx-GiB)
	}
	if got := r.u(t, "parent_freed_free"); got != limit-ctx {
		t.Errorf("after the parent's free: %d, want %d", got, limit-ctx)
	}
}

func TestThirtyTwoThreadsCountExactly(t *testing.T) {
	dir := clients(t)
	e := newEnv(t, []uint64{8 * GiB})
	r := e.run(filepath.Join(dir, "client-procaddr"), "threads", "32")
	if r.kv["thread_errors"] != "0" {
		t.Errorf("thread errors: %s", r.kv["thread_errors"])
	}
	if b, a := r.u(t, "before_free"), r.u(t, "after_free"); a != b {
		t.Errorf("free before %d, after 32 threads' alloc/free %d: counting drifted", b, a)
	}
}

func TestProcessesShareTheLimit(t *testing.T) {
	dir := clients(t)
	const limit = 2 * GiB
	e := newEnv(t, []uint64{limit})
	cmd := exec.Command(filepath.Join(dir, "client-link"), "hold", "1024")
	cmd.Env = e.vars
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "hold_devtotal") {
	}
	r := e.run(filepath.Join(dir, "client-dlsym"), "info")
	if got := r.u(t, "now_free"); got != limit-2*ctx-GiB {
		t.Errorf("second process sees free %d, want %d (first process's 1 GiB + 2 contexts)", got, limit-2*ctx-GiB)
	}
	// SIGKILL: the kernel drops the slot's OFD lock, the bytes come back
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	stdin.Close()
	r = e.run(filepath.Join(dir, "client-dlsym"), "info")
	if got := r.u(t, "now_free"); got != limit-ctx {
		t.Errorf("after SIGKILL of the holder: free %d, want %d", got, limit-ctx)
	}
}

func TestFailClosedOnCorruptQuota(t *testing.T) {
	dir := clients(t)
	e := newEnv(t, []uint64{GiB})
	if err := os.WriteFile(e.quota, []byte("vgpu-quota 1\ndriver-cuda /x\nbogus directive\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{"link", "dlsym"} {
		r := e.run(filepath.Join(dir, "client-"+route), "closed")
		for _, k := range []string{"init", "count", "alloc", "meminfo", "sync"} {
			if r.kv[k] != "3" {
				t.Errorf("%s: %s returned %s, want CUDA_ERROR_NOT_INITIALIZED (3)", route, k, r.kv[k])
			}
		}
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "vgpu: cannot read quota file "+e.quota+": line 3:") ||
			!strings.Contains(lines[0], "refusing GPU access") {
			t.Errorf("%s: stderr = %q, want one clear line", route, r.stderr)
		}
	}
	r := e.run(filepath.Join(dir, "client-procaddr"), "closed")
	if r.kv["procaddr"] != "3" {
		t.Errorf("cuGetProcAddress_v2 returned %s, want 3", r.kv["procaddr"])
	}
	// no quota file at all
	e.vars = append(e.vars, "VGPU_QUOTA_FILE=")
	r = e.run(filepath.Join(dir, "client-link"), "closed")
	if r.kv["init"] != "3" || !strings.Contains(r.stderr, "VGPU_QUOTA_FILE is not set") {
		t.Errorf("without a quota file: init %s, stderr %q", r.kv["init"], r.stderr)
	}
}

func TestUnlimitedDeviceReportsRealValues(t *testing.T) {
	dir := clients(t)
	e := newEnv(t, []uint64{0})
	r := e.run(filepath.Join(dir, "client-link"), "info")
	if got := r.u(t, "now_total"); got != 16*GiB {
		t.Errorf("total %d, want the real 16 GiB", got)
	}
	if got := r.u(t, "now_free"); got != 16*GiB-ctx {
		t.Errorf("free %d, want the real %d", got, 16*GiB-ctx)
	}
}

func TestUnknownPointerFreeReachesDriver(t *testing.T) {
	dir := clients(t)
	e := newEnv(t, []uint64{GiB})
	r := e.run(filepath.Join(dir, "client-link"), "unknown-free",
		filepath.Join(e.root.LibDir(), "libcuda.so."+simroot.DriverVersion))
	if r.kv["real_alloc"] != "0" || r.kv["unknown_free"] != "0" {
		t.Fatalf("alloc %s, free %s", r.kv["real_alloc"], r.kv["unknown_free"])
	}
	if r.u(t, "real_free_after") != r.u(t, "real_free_before") {
		t.Errorf("the driver did not get the free of a pointer we never saw")
	}
	if r.kv["double_free"] == "0" {
		t.Errorf("second free succeeded: it did not reach the driver")
	}
}

func TestLegacyEntryPointRefused(t *testing.T) {
	dir := clients(t)
	e := newEnv(t, []uint64{GiB})
	r := e.run(filepath.Join(dir, "client-link"), "legacy")
	if r.kv["legacy_alloc"] != "801" {
		t.Errorf("cuMemAlloc (v1) returned %s, want CUDA_ERROR_NOT_SUPPORTED (801)", r.kv["legacy_alloc"])
	}
}

func TestNvidiaSmiShowsLimit(t *testing.T) {
	e := newEnv(t, []uint64{3 * GiB})
	cmd := exec.Command(filepath.Join(e.root.Dir(), "usr", "bin", "nvidia-smi"))
	cmd.Env = e.vars
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nvidia-smi: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "3072MiB") || strings.Contains(string(out), "16384MiB") {
		t.Errorf("nvidia-smi under the library does not show the 3072MiB limit:\n%s", out)
	}
}

var glibcVer = regexp.MustCompile(`GLIBC_([0-9]+)\.([0-9]+)`)

func TestGlibcVersionsAtMost2_17(t *testing.T) {
	b := buildDir(t)
	for _, l := range []string{"libvgpu-cuda.so", "libvgpu-nvml.so"} {
		out, err := exec.Command("objdump", "-T", filepath.Join(b, "lib", l)).Output()
		if err != nil {
			t.Fatalf("objdump: %v", err)
		}
		for _, m := range glibcVer.FindAllStringSubmatch(string(out), -1) {
			maj, _ := strconv.Atoi(m[1])
			min, _ := strconv.Atoi(m[2])
			if maj > 2 || (maj == 2 && min > 17) {
				t.Errorf("%s needs %s (> GLIBC_2.17): it would not load in old images", l, m[0])
			}
		}
		dyn, _ := exec.Command("readelf", "-d", filepath.Join(b, "lib", l)).Output()
		for _, need := range []string{"libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"} {
			if !strings.Contains(string(dyn), "["+need+"]") {
				t.Errorf("%s does not depend on %s", l, need)
			}
		}
		for _, line := range strings.Split(string(dyn), "\n") {
			if strings.Contains(line, "NEEDED") && !regexp.MustCompile(`\[(libc\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1)\]`).MatchString(line) {
				t.Errorf("%s: unexpected dependency %s", l, line)
			}
		}
	}
}

// Each stand-in exports every name of its list and nothing but driver names.
func TestExportsEveryDriverSymbolAndNothingElse(t *testing.T) {
	b := buildDir(t)
	for _, c := range []struct{ lib, syms, prefix string }{
		{"libvgpu-cuda.so", "cuda_syms.txt", "cu"},
		{"libvgpu-nvml.so", "nvml_syms.txt", "nvml"},
	} {
		out, err := exec.Command("nm", "-D", "--defined-only", filepath.Join(b, "lib", c.lib)).Output()
		if err != nil {
			t.Fatal(err)
		}
		exported := map[string]bool{}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 {
				exported[f[2]] = true
				if !strings.HasPrefix(f[2], c.prefix) && !strings.HasPrefix(f[2], "simgpu_") {
					t.Errorf("%s exports %s, not a driver name", c.lib, f[2])
				}
			}
		}
		list, err := os.ReadFile(filepath.Join(b, "cudahook", "gen", c.syms))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range strings.Fields(string(list)) {
			if !exported[n] {
				t.Errorf("%s does not export %s", c.lib, n)
			}
		}
		soname, _ := exec.Command("readelf", "-d", filepath.Join(b, "lib", c.lib)).Output()
		want := map[string]string{"libvgpu-cuda.so": "libcuda.so.1", "libvgpu-nvml.so": "libnvidia-ml.so.1"}[c.lib]
		if !strings.Contains(string(soname), "Library soname: ["+want+"]") {
			t.Errorf("%s: SONAME is not %s", c.lib, want)
		}
	}
}

// A process that never calls the driver pays nothing: no quota file read, no
// driver loaded, no message (even with no quota file at all).
func TestNonCUDAProcessUntouched(t *testing.T) {
	e := newEnv(t, []uint64{GiB})
	e.vars = append(e.vars, "VGPU_QUOTA_FILE=", "LD_DEBUG=files")
	cmd := exec.Command("/bin/sh", "-c", "echo hello")
	cmd.Env = e.vars
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.String() != "hello\n" {
		t.Fatalf("sh under the library: %v %q", err, out.String())
	}
	if strings.Contains(errb.String(), "vgpu:") || strings.Contains(errb.String(), "libcuda.so."+simroot.DriverVersion) {
		t.Errorf("the real driver was loaded or a message printed:\n%s", errb.String())
	}
	if !strings.Contains(errb.String(), "libvgpu-cuda.so") {
		t.Errorf("the stand-in was not even preloaded (LD_DEBUG shows no libvgpu-cuda.so)")
	}
}

// Graph memory nodes, every route (and with a compute limit, where graph
// launches take the paced path): counted from the launch (or upload) that maps
// them until a trim, exactly as the driver holds them; a node or a launch that
// would pass the limit is refused with OUT_OF_MEMORY; the container never
// holds more than its limit.
func TestGraphMemoryCounted(t *testing.T) {
	dir := clients(t)
	const limit = 2 * GiB
	const devTotal = 16 * GiB // simroot's default device
	for _, c := range []struct{ name, route, compute string }{
		{"link", "link", ""}, {"dlsym", "dlsym", ""}, {"procaddr", "procaddr", ""}, {"link-compute50", "link", " compute=50"},
	} {
		route := c.route
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, []uint64{limit})
			if c.compute != "" {
				q, err := os.ReadFile(e.quota)
				if err != nil {
					t.Fatal(err)
				}
				line := fmt.Sprintf(" memory=%d\n", uint64(limit))
				if !bytes.Contains(q, []byte(line)) {
					t.Fatalf("quota file without %q:\n%s", line, q)
				}
				q = bytes.Replace(q, []byte(line), []byte(strings.TrimSuffix(line, "\n")+c.compute+"\n"), 1)
				if err := os.WriteFile(e.quota, q, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := e.run(filepath.Join(dir, "client-"+route), "graphmem",
				filepath.Join(e.root.LibDir(), "libcuda.so."+simroot.DriverVersion))
			for _, k := range []string{"a_add", "a_inst", "a_launch", "a_relaunch", "a_trim", "a_upload", "b_add", "b_inst",
				"plain_alloc", "plain_freed", "b_launch", "c_begin", "c_alloc", "c_free", "c_end", "c_inst", "c_launch",
				"end_trim"} {
				if r.kv[k] != "0" {
					t.Errorf("%s returned %q, want CUDA_SUCCESS (stderr: %s)", k, r.kv[k], r.stderr)
				}
			}
			if r.kv["destroy"] != "0,0,0" {
				t.Errorf("cuGraphExecDestroy returned %s", r.kv["destroy"])
			}
			for _, k := range []string{"over_add", "b_launch_over"} {
				if r.kv[k] != "2" {
					t.Errorf("%s returned %q, want CUDA_ERROR_OUT_OF_MEMORY (2)", k, r.kv[k])
				}
			}
			free0 := uint64(limit - ctx)
			for _, s := range []struct {
				step  string
				graph uint64 // graph memory the driver holds at that step
				other uint64 // other memory besides the context
			}{
				{"start", 0, 0},
				{"a_inst", 0, 0},           // an allocation node is only an address
				{"a_launch", 512 * MiB, 0}, // mapped at the launch, kept after the graph's free node
				{"a_relaunch", 512 * MiB, 0},
				{"a_trim", 0, 0},
				{"over", 0, 0},
				{"a_upload", 512 * MiB, 0},
				{"plain", 512 * MiB, 800 * MiB},
				{"b_refused", 0, 800 * MiB}, // the refused launch trimmed A's idle memory first
				{"b_launch", GiB, 0},
				{"c_inst", GiB, 0},
				{"c_launch", GiB + 256*MiB, 0},  // the captured cuMemAllocAsync
				{"destroyed", GiB + 256*MiB, 0}, // destroying the execs leaves it in the pool
				{"end", 0, 0},
			} {
				hookFree, realFree := r.u(t, s.step+"_free"), r.u(t, s.step+"_real_free")
				if got := r.u(t, s.step+"_total"); got != limit {
					t.Errorf("%s: total %d, want the limit", s.step, got)
				}
				if got := r.u(t, s.step+"_graph_reserved"); got != s.graph {
					t.Errorf("%s: the driver's graph pool holds %d MiB, want %d MiB", s.step, got/MiB, s.graph/MiB)
				}
				if want := free0 - s.graph - s.other; hookFree != want {
					t.Errorf("%s: free %d MiB, want %d MiB", s.step, hookFree/MiB, want/MiB)
				}
				// the library counts exactly what the driver holds, never more than the limit
				if used, real := limit-hookFree, devTotal-realFree; used != real || real > limit {
					t.Errorf("%s: counted %d MiB, the driver holds %d MiB (limit %d MiB)", s.step, used/MiB, real/MiB, uint64(limit)/MiB)
				}
			}
		})
	}
}

var (
	simClientsMu sync.Mutex
	simClients   = map[string]*simClientBuild{}
)

type simClientBuild struct {
	once sync.Once
	bin  string
	err  error
}

// simClient builds testdata/<name>.c once per test binary, linked with the
// simulated driver's libcuda and libs, and returns the program's path.
func simClient(t *testing.T, name string, libs ...string) string {
	t.Helper()
	buildDir(t)
	simClientsMu.Lock()
	b := simClients[name]
	if b == nil {
		b = &simClientBuild{}
		simClients[name] = b
	}
	simClientsMu.Unlock()
	b.once.Do(func() {
		root, err := simroot.Create(mustTemp(), simroot.Options{})
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(mustTemp(), name)
		args := append([]string{"-O1", "-Wall", "-Werror", "-Iinclude", "-o", b.bin, "testdata/" + name + ".c", "-L" + root.LibDir(), "-l:libcuda.so.1"}, libs...)
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("gcc %s.c: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}
