//go:build integration

package cudahook_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// outsider is a driver whose GPU (16 GiB) holds held bytes in a process
// outside vgpu.
type outsider struct{ held uint64 }

func (o outsider) Read() ([]nvmlfeed.Sample, error) {
	return []nvmlfeed.Sample{{HostPID: 1 << 30, GPU: simroot.DefaultUUID(0), UsedBytes: o.held}}, nil
}
func (outsider) Close() error { return nil }
func (outsider) GPUs() ([]nvmlfeed.GPU, error) {
	return []nvmlfeed.GPU{{UUID: simroot.DefaultUUID(0), MemoryTotal: 16 * GiB, Busy: -1}}, nil
}

// borrowNode runs vgpu node beside a process outside vgpu holding held
// bytes, until the test ends, and waits for tenant id's first ceiling.
func borrowNode(t *testing.T, stateDir, id string, held uint64) {
	t.Helper()
	d := startNode(t, stateDir, outsider{held: held}, os.Stderr)
	for deadline := time.Now().Add(30 * time.Second); d.MemoryCeilings()[id][0] == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("vgpu node published no ceiling in 30 s")
		}
	}
}

// The library holds a tenant with memory request 4 GiB and limit 12 GiB to
// its request without vgpu node; with vgpu node, beside a process outside
// vgpu holding 8 GiB of the 16, it takes the 4 GiB no one needs (8 in all)
// and no more, and cuMemGetInfo's free says so before it allocates (each
// less the 256 MiB of its CUDA context, which the library counts).
func TestMemoryBorrowing(t *testing.T) {
	dir := clients(t)
	for _, tc := range []struct {
		name string
		node bool
		want uint64
	}{{"no vgpu node", false, 4 * GiB}, {"vgpu node", true, 8 * GiB}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, []uint64{12 * GiB})
			stateDir := t.TempDir()
			recordTenant(t, e.root, stateDir, "b", tenant.Device{Compute: 100, Memory: 12 * GiB, MemoryRequest: 4 * GiB}, e.vars)
			if tc.node {
				borrowNode(t, stateDir, "b", 8*GiB)
			}
			r := e.run(filepath.Join(dir, "client-procaddr"), "fill", "alloc", "256")
			const ctx = 256 << 20 // the simulated GPU's context
			if got := r.u(t, "first_bytes"); got != tc.want-ctx {
				t.Errorf("filled %d bytes, want %d", got, tc.want-ctx)
			}
			if got := r.u(t, "before_free"); got != tc.want-ctx {
				t.Errorf("cuMemGetInfo free %d before filling, want %d", got, tc.want-ctx)
			}
			if got := r.u(t, "before_total"); got != 12*GiB {
				t.Errorf("cuMemGetInfo total %d, want the limit", got)
			}
		})
	}
}

// An owner (request 8 GiB, limit 12) whose allocation within its request the
// driver refuses for want of room, because a process outside vgpu holds 15
// of the GPU's 16 GiB, marks its need in the region and waits; once the
// outsider lets go, the same call succeeds. Every route that allocates a
// size the program names waits so. Without vgpu node nobody takes memory
// back: the allocation fails at once, with no need marked.
func TestOwnerWaitsForRoomOnEveryRoute(t *testing.T) {
	dir := clients(t)
	client := filepath.Join(dir, "client-procaddr")
	const need = 1024 // MiB: more than the 0.5 GiB the outsider and two contexts leave
	for _, tc := range []struct {
		route string
		node  bool
	}{
		{"alloc", true}, {"pitch", true}, {"async", true}, {"pool", true}, {"vmm", true},
		{"array", true}, {"array3d", true}, {"mipmap", true}, {"alloc", false},
	} {
		name := tc.route
		if !tc.node {
			name += "/no vgpu node"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, []uint64{12 * GiB})
			stateDir := t.TempDir()
			q := recordTenant(t, e.root, stateDir, "o", tenant.Device{Compute: 100, Memory: 12 * GiB, MemoryRequest: 8 * GiB}, e.vars)
			var outside []string // the same driver, no vgpu library
			for _, v := range e.vars {
				if !strings.HasPrefix(v, "LD_PRELOAD=") && !strings.HasPrefix(v, "VGPU_") {
					outside = append(outside, v)
				}
			}
			if tc.node {
				borrowNode(t, stateDir, "o", 15*GiB)
			}
			hog := (&env{t: t, vars: outside}).start(t, client, "hold", strconv.Itoa(15<<10))
			if free := hog.u(t, "hold_free"); free >= need<<20 {
				t.Fatalf("the outsider holds 15 GiB and the GPU still has %d bytes free", free)
			}
			owner := e.start(t, client, "one", tc.route, strconv.Itoa(need))
			owner.wait(t, "one_start", 30*time.Second)
			region := filepath.Join(q.SharedDir, contract.RegionFile)
			if !tc.node {
				if rc := owner.wait(t, "one_rc", 30*time.Second); rc != "2" {
					t.Errorf("without vgpu node: rc %s, want CUDA_ERROR_OUT_OF_MEMORY (2) at once", rc)
				}
				if n := needMiB(t, region); n != 0 {
					t.Errorf("without vgpu node the owner marked a need of %d MiB", n)
				}
				return
			}
			// the library waits (its need is in the region; pitch rounds rows up) until the outsider lets go
			for deadline := time.Now().Add(30 * time.Second); needMiB(t, region) < need; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no need of at least %d MiB in the region (now %d)", need, needMiB(t, region))
				}
			}
			hog.stdin.Close()
			if rc := owner.wait(t, "one_rc", 30*time.Second); rc != "0" {
				t.Fatalf("the owner's %d MiB after the outsider let go: rc %s, want success\nstderr: %s", need, rc, owner.errb.String())
			}
			if n := needMiB(t, region); n != 0 {
				t.Errorf("need still %d MiB after the allocation succeeded", n)
			}
		})
	}
}

// needMiB is the need the owner's library marked on device 0.
func needMiB(t *testing.T, region string) uint32 {
	t.Helper()
	b, err := os.ReadFile(region)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	h, ok := contract.DecodeRegionHeader(b)
	if !ok {
		return 0
	}
	return h.NeedMib[0]
}
