package vgpuexec

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

func libDir(t *testing.T) string {
	b := os.Getenv("VGPU_BUILD")
	if b == "" {
		t.Fatal("VGPU_BUILD is not set: run `make c-build` and VGPU_BUILD=$PWD/build go test")
	}
	return filepath.Join(b, "lib")
}

// One simulated root (two GPUs) for the package: GPU discovery loads its NVML
// into this test process, and a process can hold only one simulator.
var shared *simroot.Root

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vgpuexec-test-")
	if err != nil {
		panic(err)
	}
	shared, err = simroot.Create(dir, simroot.Options{Devices: make([]simroot.Device, 2)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, kv := range shared.Env() {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestPrepareWritesPrivateQuota(t *testing.T) {
	root := shared
	phase := 40
	p, err := Prepare(Options{MemoryLimit: "4Gi", ComputeLimit: 30, ComputePhase: &phase, Devices: "1", DriverRoot: root.Dir(), LibDir: libDir(t),
		Args: []string{"true"}, Env: []string{"PATH=/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(p.Dir)
	fi, err := os.Stat(p.Dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("temp dir %v mode %v, want 0700", err, fi.Mode())
	}
	q, err := os.ReadFile(filepath.Join(p.Dir, "quota"))
	if err != nil {
		t.Fatal(err)
	}
	want := "device 0 " + simroot.DefaultUUID(1) + " memory=4294967296 compute=30 phase=40\n"
	if !strings.Contains(string(q), want) || strings.Contains(string(q), simroot.DefaultUUID(0)) {
		t.Errorf("quota:\n%s\nwant only %q", q, want)
	}
	if !strings.Contains(string(q), "driver-cuda "+filepath.Join(root.LibDir(), "libcuda.so."+simroot.DriverVersion)) {
		t.Errorf("quota does not name the real libcuda:\n%s", q)
	}
	env := strings.Join(p.Env, "\n")
	for _, w := range []string{"VGPU_QUOTA_FILE=" + filepath.Join(p.Dir, "quota"),
		"LD_PRELOAD=" + filepath.Join(libDir(t), "libvgpu-cuda.so") + ":" + filepath.Join(libDir(t), "libvgpu-nvml.so"),
		"CUDA_VISIBLE_DEVICES=" + simroot.DefaultUUID(1)} {
		if !strings.Contains(env, w) {
			t.Errorf("environment lacks %s:\n%s", w, env)
		}
	}
}

func TestPrepareErrors(t *testing.T) {
	root := shared
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{MemoryLimit: "lots"}, "--memory-limit"},
		{Options{ComputeLimit: 101}, "--compute-limit"},
		{Options{ComputeLimit: 30, ComputePhase: &[]int{100}[0]}, "--compute-phase 100"},
		{Options{Devices: "7"}, `no GPU "7"`},
		{Options{LibDir: "/nonexistent"}, "not found"},
	} {
		c.o.DriverRoot = root.Dir()
		if c.o.LibDir == "" {
			c.o.LibDir = libDir(t)
		}
		if _, err := Prepare(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Prepare(%+v) = %v, want %q", c.o, err, c.want)
		}
	}
	if _, err := Prepare(Options{DriverRoot: t.TempDir(), LibDir: libDir(t)}); err == nil {
		t.Error("a driver root without libcuda was accepted")
	}
}

// End to end: the simulator's nvidia-smi run by vgpu exec shows the limit,
// the exit status comes back and the private directory is gone afterwards.
func TestRunNvidiaSmiSeesLimit(t *testing.T) {
	root := shared
	var out, errb bytes.Buffer
	tmp := t.TempDir()
	code, err := Run(Options{MemoryLimit: "4Gi", DriverRoot: root.Dir(), LibDir: libDir(t),
		Args:   []string{"sh", "-c", `nvidia-smi; echo "quota=$VGPU_QUOTA_FILE"; exit 7`},
		Env:    []string{"PATH=" + filepath.Join(root.Dir(), "usr", "bin") + ":/usr/bin:/bin", "TMPDIR=" + tmp},
		Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if code != 7 {
		t.Errorf("exit status %d, want 7\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "4096MiB") {
		t.Errorf("nvidia-smi under vgpu exec does not show 4096MiB:\n%s\n%s", out.String(), errb.String())
	}
	var q string
	for _, l := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "quota="); ok {
			q = v
		}
	}
	if q == "" {
		t.Fatalf("VGPU_QUOTA_FILE not set in the command")
	}
	if _, err := os.Stat(filepath.Dir(q)); !os.IsNotExist(err) {
		t.Errorf("%s left behind after exit (%v)", filepath.Dir(q), err)
	}
}
