//go:build e2e

package e2e

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/events"
)

// A lying owner under memory_borrow = "free", real runc on the simulated
// GPU (16 GiB), vgpu node running: a borrower (request 6 GiB, limit 12)
// holds 11 GiB; a second tenant with the same request and limit runs no
// GPU process at all and writes into its region a need of 5 GiB (more
// than the GPU has free, within its request). It has no allocation
// waiting: vgpu node kills nobody, and the borrower keeps its memory.
func TestNodeIgnoresNeedOfOwnerHoldingNothing(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	e := newEnv(t, "liar")
	setBorrowFree(t, e)
	mkStateDir(t, e)
	metricsURL, _ := startNode(t, e)
	f := shared(t)
	rt := e.runc(t)
	env := []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_REQUEST=6Gi", "VGPU_MEMORY_LIMIT=12Gi"}
	bp := startBorrower(t, e, f, rt, env)
	b := makeBundle(t, filepath.Join(e.dir, "bundle-liar"), f.rootfs, []string{"/bin/sh", "-c", "exec sleep 3600"}, env, nil)
	rt.detach(b, "liar")
	// what the tenant can write at /run/vgpu/shared/vgpu.region: a region
	// header of layout 5 saying device 0 waits for 5 GiB
	h := make([]byte, contract.RegionHeaderSize)
	binary.LittleEndian.PutUint64(h[0:], contract.RegionMagic)
	binary.LittleEndian.PutUint32(h[8:], 5)
	binary.LittleEndian.PutUint32(h[704:], 5<<10)
	if err := os.WriteFile(filepath.Join(e.stateDir, "liar", "shared", contract.RegionFile), h, 0o666); err != nil {
		t.Fatal(err)
	}
	waitRounds(t, metricsURL, 50)
	evs, err := events.Read(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Reason == "borrow" || ev.Container == "borrower" {
			t.Errorf("acted on a need of a tenant holding nothing on the GPU: %+v", ev)
		}
	}
	select {
	case l, ok := <-bp.lines:
		if !ok {
			t.Errorf("the borrower ended: its memory was taken for a lie")
		} else {
			t.Logf("borrower: %s", l)
		}
	default:
	}
}
