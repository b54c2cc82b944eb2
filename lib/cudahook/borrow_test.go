//go:build integration

package cudahook_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/node/daemon"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/state"
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
			q := &quota.File{
				DriverCuda: filepath.Join(e.root.LibDir(), "libcuda.so."+e.root.Version()),
				DriverNvml: filepath.Join(e.root.LibDir(), "libnvidia-ml.so."+e.root.Version()),
				SharedDir:  filepath.Join(stateDir, "b", "shared"),
				Devices:    []quota.Device{{Index: 0, UUID: simroot.DefaultUUID(0), Compute: 100, Memory: 12 * GiB, MemoryRequest: 4 * GiB}},
			}
			if _, err := state.Create(stateDir, state.FromQuota("b", q), nil); err != nil {
				t.Fatal(err)
			}
			for i, v := range e.vars {
				if len(v) > len("VGPU_QUOTA_FILE=") && v[:len("VGPU_QUOTA_FILE=")] == "VGPU_QUOTA_FILE=" {
					e.vars[i] = "VGPU_QUOTA_FILE=" + filepath.Join(stateDir, "b", "quota")
				}
			}
			if tc.node {
				d, err := daemon.New(daemon.Options{StateDir: stateDir, ProcRoot: t.TempDir(), CgroupRoot: t.TempDir(), Policy: enforce.DefaultConfig(),
					Source: outsider{held: 8 * GiB}, Log: os.Stderr})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { d.Run(ctx); close(done) }()
				defer func() { cancel(); <-done }()
				for deadline := time.Now().Add(30 * time.Second); d.MemoryCeilings()["b"][0] == 0; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("vgpu node published no ceiling in 30 s")
					}
				}
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
