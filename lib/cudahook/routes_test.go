//go:build integration

// Memory routes that are not allocation calls (docs/memory-routes.md): limits set with
// cuCtxSetLimit, local memory grown at launch, module and library data,
// contexts of every exported version. Each route is run twice with
// testdata/routes.c: on a small simulated device without the stand-in (the
// simulator's own rule: the driver refuses what the device cannot hold) and on
// a 16 GiB device under a 1 GiB limit with the stand-in (the call that would
// cross the limit gets OUT_OF_MEMORY, and the process's figure in the driver's
// NVML, what the host reads, stays within limit + 64 MiB).
package cudahook_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

const cudaErrorOutOfMemory = 2

// routesProgram builds testdata/routes.c once, linked with the simulated driver.
func routesProgram(t *testing.T) string { return simClient(t, "routes", "-ldl") }

// routeEnv is one process's world: a simulated root with one device of devMem
// bytes, and (limit > 0) the stand-in preloaded with that limit.
func routeEnv(t *testing.T, devMem, limit uint64) *env {
	t.Helper()
	var e *env
	if limit > 0 {
		e = newEnv(t, []uint64{limit})
		// newEnv's device has the simulator's default 16 GiB; the limit is the quota's
	} else {
		root, err := simroot.Create(t.TempDir(), simroot.Options{Devices: []simroot.Device{{MemoryBytes: devMem}}})
		if err != nil {
			t.Fatal(err)
		}
		e = &env{t: t, root: root, vars: append(os.Environ(), root.Env()...)}
	}
	e.vars = append(e.vars, "ROUTES_NVML="+filepath.Join(e.root.LibDir(), "libnvidia-ml.so."+simroot.DriverVersion))
	return e
}

type routeCase struct {
	scenario string
	env      []string // extra environment (the driver reads CUDA_MODULE_LOADING)
	// the crossing: one of these steps got OUT_OF_MEMORY, those that ran before
	// it succeeded (the driver and the stand-in may refuse at different steps)
	refused []string
	allowed []string // steps that must have run and succeeded
	// under the stand-in, when it refuses earlier than the driver would
	libRefused, libAllowed []string
}

var routeCases = []routeCase{
	{scenario: "heap", refused: []string{"set_big"}, allowed: []string{"set_fits", "set_back"}},
	{scenario: "stack", refused: []string{"set_big"}, allowed: []string{"set_fits", "set_back"}},
	{scenario: "fifo", refused: []string{"set_big"}, allowed: []string{"set_fits", "set_back"}},
	{scenario: "pending", refused: []string{"set_big"}, allowed: []string{"set_fits", "set_back"}},
	{scenario: "local", refused: []string{"get_deep", "deep"}, allowed: []string{"shallow", "fits"}},
	{scenario: "module", refused: []string{"load_big"}, allowed: []string{"load_small", "unload_small"}},
	{scenario: "library", refused: []string{"get_function", "get_global"},
		allowed: []string{"load", "get_kernel", "unload"}},
	// the driver loads at cuKernelGetFunction, the stand-in already at
	// cuLibraryGetKernel with a context current
	{scenario: "library-ctx", refused: []string{"load", "get_kernel", "get_function"},
		allowed: []string{"small_kernel", "small_function", "small_launch", "small_unload"}},
	{scenario: "library-ctx", env: []string{"CUDA_MODULE_LOADING=EAGER"},
		refused: []string{"load", "get_kernel", "get_function"},
		allowed: []string{"small_kernel", "small_function", "small_launch", "small_unload"}},
	{scenario: "library-launch", refused: []string{"launch"}, allowed: []string{"unload"}},
	// a kernel handle launched in a second context where its library was never used
	{scenario: "library-other-ctx", refused: []string{"launch_other"},
		allowed: []string{"get_kernel", "launch_here", "launch_again", "unload"}},
	{scenario: "contexts-v1", refused: []string{"create"}, allowed: []string{"destroyed"}},
	{scenario: "contexts-v2", refused: []string{"create"}, allowed: []string{"destroyed"}},
	{scenario: "contexts-green", refused: []string{"create"}, allowed: []string{"destroyed"}},
}

func checkRoute(t *testing.T, r result, scenario string, refused, allowed []string, bound uint64) {
	t.Helper()
	oom := 0
	for _, s := range refused {
		if _, ok := r.kv["rc_"+s]; !ok {
			continue
		}
		switch rc := r.u(t, "rc_"+s); {
		case rc == cudaErrorOutOfMemory:
			oom++
		case rc != 0 || oom > 0:
			t.Errorf("%s: step %s: got CUresult %d, want CUDA_ERROR_OUT_OF_MEMORY", scenario, s, rc)
		}
	}
	if oom == 0 {
		t.Errorf("%s: none of the steps %v got CUDA_ERROR_OUT_OF_MEMORY (stderr: %s)", scenario, refused, r.stderr)
	}
	for _, s := range allowed {
		if rc := r.u(t, "rc_"+s); rc != 0 {
			t.Errorf("%s: step %s: got CUresult %d, want CUDA_SUCCESS", scenario, s, rc)
		}
	}
	for k, v := range r.kv {
		if strings.HasPrefix(k, "used_") {
			if u := r.u(t, k); u > bound {
				t.Errorf("%s: %s: the driver's NVML shows %d MiB for the process, bound %d MiB (%s=%s)",
					scenario, k, u>>20, bound>>20, k, v)
			}
		}
	}
}

// The simulator alone: a 1 GiB device refuses what it cannot hold on every
// route, and its NVML counts what it holds.
func TestSimulatorChargesEveryRoute(t *testing.T) {
	prog := routesProgram(t)
	for _, c := range routeCases {
		t.Run(strings.Join(append([]string{c.scenario}, c.env...), ","), func(t *testing.T) {
			e := routeEnv(t, 1*GiB, 0)
			e.vars = append(e.vars, c.env...)
			r := e.run(prog, c.scenario)
			checkRoute(t, r, c.scenario, c.refused, c.allowed, 1*GiB)
		})
	}
}

// The simulator's figures for each route are the documented rules, so that the
// stand-in's tests below test something.
func TestSimulatorRouteFigures(t *testing.T) {
	prog := routesProgram(t)
	e := routeEnv(t, 16*GiB, 0)
	r := e.run(prog, "heap")
	if got, want := r.u(t, "used_set_fits")-r.u(t, "used_start"), uint64(248*MiB); got != want {
		t.Errorf("heap of 256 MiB costs %d MiB beyond the context, want %d", got>>20, want>>20)
	}
	if got := r.u(t, "used_set_back"); got != ctx {
		t.Errorf("heap back at its default: process holds %d MiB, want the context's %d", got>>20, ctx>>20)
	}
	r = e.run(prog, "stack")
	if got, want := r.u(t, "used_set_fits")-r.u(t, "used_start"), uint64(132*2048*1024); got != want {
		t.Errorf("stack of 2 KiB costs %d beyond the context, want %d (132 SMs x 2048 threads x 1 KiB)", got, want)
	}
	r = routeEnv(t, 1*GiB, 0).run(prog, "local")
	if got := r.u(t, "stack_after_deep"); got != 1024 {
		t.Errorf("stack limit after the refused 8 KiB frame: %d, want 1024 (unchanged)", got)
	}
	if got := r.u(t, "stack_after_fits"); got != 2048 {
		t.Errorf("stack limit after the 2 KiB frame's launch: %d, want 2048 (grown and kept)", got)
	}
	if got, want := r.u(t, "used_fits")-r.u(t, "used_start"), uint64(132*2048*1024); got != want {
		t.Errorf("the 2 KiB frame's launch costs %d, want %d", got, want)
	}
	r = e.run(prog, "library-ctx")
	if r.u(t, "used_load") != r.u(t, "used_start") || r.u(t, "used_get_kernel") != r.u(t, "used_start") {
		t.Errorf("a library costs nothing before its first use in a context: start %d, load %d, get_kernel %d",
			r.u(t, "used_start"), r.u(t, "used_load"), r.u(t, "used_get_kernel"))
	}
	if got, want := r.u(t, "used_get_function")-r.u(t, "used_start"), uint64(1792*MiB); got != want {
		t.Errorf("first use of the library: %d MiB, want %d", got>>20, want>>20)
	}
	r = e.run(prog, "library")
	if r.u(t, "used_unload") != r.u(t, "used_start") {
		t.Errorf("unloaded library still held: %d vs %d", r.u(t, "used_unload"), r.u(t, "used_start"))
	}
}

// The stand-in under a 1 GiB limit on a 16 GiB device: the call that would
// cross the limit is refused on every route, and the host's figure never
// passes limit + 64 MiB.
func TestLimitHoldsOnEveryRoute(t *testing.T) {
	prog := routesProgram(t)
	for _, c := range routeCases {
		t.Run(strings.Join(append([]string{c.scenario}, c.env...), ","), func(t *testing.T) {
			e := routeEnv(t, 0, 1*GiB)
			e.vars = append(e.vars, c.env...)
			r := e.run(prog, c.scenario)
			refused, allowed := c.refused, c.allowed
			if c.libRefused != nil {
				refused, allowed = c.libRefused, c.libAllowed
			}
			checkRoute(t, r, c.scenario, refused, allowed, 1*GiB+64*MiB)
			if strings.HasPrefix(c.scenario, "contexts-") {
				if n := r.u(t, "contexts"); n != 4 {
					t.Errorf("%s: %d contexts of 256 MiB under a 1 GiB limit, want 4", c.scenario, n)
				}
				if u := r.u(t, "used_destroyed"); u != 0 {
					t.Errorf("%s: the process holds %d MiB after destroying them all, want 0", c.scenario, u>>20)
				}
			}
		})
	}
}

// A limit set and set back: the container's view (cuMemGetInfo under the
// stand-in) loses what the limit holds, then gets it back.
func TestLimitSetBackGivesBack(t *testing.T) {
	prog := routesProgram(t)
	for _, c := range []struct {
		scenario string
		min      uint64 // the least the stand-in may count for the "fits" value
	}{
		{"heap", 248 * MiB},
		{"stack", 132 * 2048 * 1024},
		{"fifo", 63 * MiB},
		{"pending", 14336 * 2048},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			r := routeEnv(t, 0, 1*GiB).run(prog, c.scenario)
			if got, want := r.u(t, "free_back"), uint64(1*GiB-ctx); got != want {
				t.Errorf("free after the limit is back at its default: %d MiB, want %d", got>>20, want>>20)
			}
			if held := r.u(t, "free_back") - r.u(t, "free_fits"); held < c.min {
				t.Errorf("the limit's value that fits is counted as %d bytes, want at least %d", held, c.min)
			}
		})
	}
}

// A context created by cuCtxCreate_v2 and destroyed by the v1 export gives its
// charge back: eight rounds leave the container's free memory where one does.
func TestContextV1DestroyGivesBack(t *testing.T) {
	prog := routesProgram(t)
	e := routeEnv(t, 0, 2*GiB)
	r := e.run(prog, "v1destroy")
	if got, want := r.u(t, "free"), uint64(2*GiB-ctx); got != want {
		t.Errorf("free with one context after 8 created and destroyed through cuCtxDestroy: %d MiB, want %d",
			got>>20, want>>20)
	}
	if got := r.u(t, "used_after"); got != 0 {
		t.Errorf("the driver's NVML shows %d MiB after the last destroy, want 0", got>>20)
	}
}
