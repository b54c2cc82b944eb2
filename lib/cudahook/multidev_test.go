//go:build integration

package cudahook_test

import (
	"fmt"
	"path/filepath"
	"testing"
)

// Peer access and copies between two limited devices are neither blocked
// nor counted: cuDeviceCanAccessPeer and cuCtxEnablePeerAccess answer as
// the driver does without the library, cuMemcpyPeer moves the bytes both
// ways, and each device's free memory moves only by what was allocated on
// it (under CUDA_VISIBLE_DEVICES=1,0 too, where ordinal 0 is the second
// device and its limit).
func TestPeerCopiesNeitherBlockedNorCounted(t *testing.T) {
	dir := clients(t)
	limits := []uint64{1 * GiB, 2 * GiB}
	const n = 64 * MiB
	for _, route := range routes {
		for _, cvd := range []string{"", "1,0"} {
			t.Run(route+"/cvd="+cvd, func(t *testing.T) {
				e := newEnv(t, limits)
				native := append(append([]string(nil), e.root.Env()...), "PATH=/usr/bin:/bin")
				want := limits
				if cvd != "" {
					e.vars = append(e.vars, "CUDA_VISIBLE_DEVICES="+cvd)
					native = append(native, "CUDA_VISIBLE_DEVICES="+cvd)
					want = []uint64{limits[1], limits[0]}
				}
				prog := filepath.Join(dir, "client-"+route)
				r := e.run(prog, "peer", "64")
				plain := (&env{t: t, vars: native}).run(prog, "peer", "64")
				for _, k := range []string{"can_access", "enable_peer"} {
					if r.kv[k] != plain.kv[k] {
						t.Errorf("%s = %q under the library, %q without it", k, r.kv[k], plain.kv[k])
					}
				}
				for _, k := range []string{"alloc0", "alloc1", "htod", "peer01", "peer10", "dtoh"} {
					if r.kv[k] != "0" {
						t.Errorf("%s returned %q, want CUDA_SUCCESS", k, r.kv[k])
					}
				}
				if r.kv["copy_ok"] != "1" {
					t.Errorf("the bytes did not come back through both peer copies")
				}
				for d := 0; d < 2; d++ {
					k := func(tag string) string { return fmt.Sprintf("%s_free%d", tag, d) }
					if got := r.u(t, fmt.Sprintf("before_total%d", d)); got != want[d] {
						t.Errorf("ordinal %d: total %d, want its device's limit %d", d, got, want[d])
					}
					before, alloc, copied, freed := r.u(t, k("before")), r.u(t, k("alloc")), r.u(t, k("copied")), r.u(t, k("freed"))
					if before-alloc != n {
						t.Errorf("ordinal %d: the %d MiB allocation took %d bytes of its limit", d, n/MiB, before-alloc)
					}
					if copied != alloc {
						t.Errorf("ordinal %d: free %d after the peer copies, %d before them: a copy was counted", d, copied, alloc)
					}
					if freed != before {
						t.Errorf("ordinal %d: free %d after the frees, %d at the start", d, freed, before)
					}
				}
			})
		}
	}
}

// VMM memory lives until its last handle reference and its last mapping are
// gone, as the driver keeps it: a program that maps and then releases the
// handle (or retains it from the address and releases it, as NCCL frees
// its buffers) still holds the memory until it unmaps, and must still
// count. Otherwise map-then-release would take any amount past the limit.
func TestVMMCountedWhileMapped(t *testing.T) {
	dir := clients(t)
	const limit, n = 2 * GiB, 512 * MiB
	for _, route := range routes {
		for _, mode := range []string{"release", "retain"} {
			t.Run(route+"/"+mode, func(t *testing.T) {
				e := newEnv(t, []uint64{limit})
				r := e.run(filepath.Join(dir, "client-"+route), "vmmmap", mode, "512")
				start := r.u(t, "before_free")
				steps := []string{"create", "reserve", "map", "release", "unmap", "addrfree"}
				if mode == "retain" {
					steps = []string{"create", "reserve", "map", "retain", "release1", "unmap", "release2", "addrfree"}
				}
				held := true
				for _, s := range steps {
					if r.kv[s] != "0" {
						t.Fatalf("%s returned %q, want CUDA_SUCCESS (stderr: %s)", s, r.kv[s], r.stderr)
					}
					// gone once unmapped and every reference released
					if s == "unmap" && mode == "release" || s == "release2" {
						held = false
					}
					want := start
					if held {
						want = start - n
					}
					if got := r.u(t, s+"_free"); got != want {
						t.Errorf("after %s: free %d MiB, want %d MiB (the memory is %s)", s, got/MiB, want/MiB,
							map[bool]string{true: "still held", false: "gone"}[held])
					}
				}
			})
		}
	}
}
