//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// A driver other than the one the stand-ins' symbol lists
// came from. The simulated driver is laid out under another version string:
// its exports are covered, so a container gets its GPU without a rebuild.
// A driver that exports a function the stand-ins lack is refused at create
// time with one message saying what to run.

const otherVersion = "590.12.34"

// relabel renames the simulated driver's libraries from version from to v.
func relabel(t *testing.T, sim *simroot.Root, from, v string) {
	t.Helper()
	for _, lib := range []string{"libcuda", "libnvidia-ml"} {
		old := filepath.Join(sim.LibDir(), lib+".so."+from)
		nu := filepath.Join(sim.LibDir(), lib+".so."+v)
		if err := os.Rename(old, nu); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(sim.LibDir(), lib+".so.1")
		os.Remove(link)
		if err := os.Symlink(lib+".so."+v, link); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOtherDriverVersion(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	e := newEnvSim(t, "driver-version", simroot.Options{Devices: []simroot.Device{{}}})
	relabel(t, e.sim, simroot.DriverVersion, otherVersion)
	if out, _, _ := runCLI(t, e.config, vgpuCLI(t), "version"); !strings.Contains(out, "\ndriver: "+otherVersion+" ") {
		t.Errorf("vgpu version does not see driver %s:\n%s", otherVersion, out)
	}
	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/sh", "-c", gpuPrograms},
		[]string{"VGPU_MEMORY_LIMIT=2Gi", "VGPU_VISIBLE_DEVICES=0"}, nil)
	out, err := e.runc(t).run(b, "other-version")
	if err != nil {
		t.Fatalf("vgpu-runtime run on driver %s: %v\n%s", otherVersion, err, out)
	}
	checkLimited(t, parseReport(t, out), "2147483648")
	checkGPUPrograms(t, out, 2<<30)
	if _, err := os.Stat(filepath.Join(e.stateDir, ".driver-checked")); err != nil {
		t.Errorf("the check's success is not remembered: %v", err)
	}

	// A newer driver with a function the stand-ins do not export: the
	// library is rebuilt with one more function (under yet another version).
	newer := "600.1.2"
	relabel(t, e.sim, otherVersion, newer)
	src := filepath.Join(e.dir, "future.c")
	writeFile(t, src, []byte("int cuFutureFunctionOfDriver600(void) { return 0; }\n"), 0o644)
	lib := filepath.Join(e.sim.LibDir(), "libcuda.so."+newer)
	// The simulated driver plus the new function: link the old one in whole.
	real := filepath.Join(e.dir, "libcuda-sim.so")
	if err := os.Rename(lib, real); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src, "-Wl,-soname,libcuda.so.1", "-Wl,--no-as-needed", real).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	b = makeBundle(t, filepath.Join(e.dir, "bundle2"), f.rootfs, []string{"/bin/true"},
		[]string{"VGPU_MEMORY_LIMIT=2Gi", "VGPU_VISIBLE_DEVICES=0"}, nil)
	out, err = e.runc(t).run(b, "newer")
	want := "driver " + newer + ": libcuda.so." + newer + " exports 1 function(s) that the vgpu stand-in "
	if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "(cuFutureFunctionOfDriver600)") ||
		!strings.Contains(out, "lib/cudahook/update-syms.sh "+e.sim.LibDir()+" && make build && make install") {
		t.Errorf("driver %s with a function the stand-ins lack: err %v, want a refusal containing %q and what to run:\n%s", newer, err, want, out)
	}
	if left := stateLeft(e.stateDir); len(left) != 0 {
		t.Errorf("a refused container left state: %v", left)
	}
}
