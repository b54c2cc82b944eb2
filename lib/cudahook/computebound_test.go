//go:build integration

package cudahook_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// lowerBoundWindow: long enough that a launch loop woken late on a loaded
// machine (two CPU hogs on 2 cores) still keeps the device busy for at least
// half its limit; the upper bound is the usual loadMargin.
const lowerBoundWindow = 4 * time.Second

// A limit delivers, not only caps: alone and busy, a container with limit P
// keeps the simulated device busy at least P/2 % of a 4 s window, and at most
// P + loadMargin, with vgpu node's arbitration off (the library's own pacer,
// built from the quota) and on (the pacer built from the node's grant).
// Pacing every limit at a fraction of its value fails here, where the upper
// bounds alone let it pass.
func TestComputeLimitLowerBound(t *testing.T) {
	for _, node := range []bool{false, true} {
		for _, limit := range []int{30, 70} {
			t.Run(fmt.Sprintf("node=%v/limit=%d", node, limit), func(t *testing.T) {
				t.Parallel()
				root, err := simroot.Create(t.TempDir(), simroot.Options{})
				if err != nil {
					t.Fatal(err)
				}
				var c *container
				if node {
					stateDir := t.TempDir()
					c = tenantIn(t, root, stateDir, "t", limit, nil)
					startNode(t, stateDir, noNVML{}, nil)
				} else {
					c = newContainer(t, root, limit)
				}
				r := c.start(t, "kernel")
				measure(t, 500*time.Millisecond, lowerBoundWindow, r)
				res := r.wait(t)
				occ := 100 * float64(res.u(t, "busy0_ns")) / float64(res.u(t, "window_ns"))
				t.Logf("limit %d, vgpu node %v: device busy %.1f%% of %v", limit, node, occ, lowerBoundWindow)
				if lo, hi := float64(limit)/2, float64(limit+loadMargin); occ < lo || occ > hi {
					t.Errorf("limit %d (vgpu node running: %v): the device was busy %.1f%% of %v, want %.0f..%.0f%%",
						limit, node, occ, lowerBoundWindow, lo, hi)
				}
			})
		}
	}
}

// The pacer is built from the quota's value: the library says at setup what
// share its pacer holds, and that is the limit of the quota, for a limit
// alone and for a request below it.
func TestComputePacerFromQuota(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		limit   int
		request *int
		want    string
	}{
		{30, nil, "compute request 30%, limit 30%, paced at 30.00%"},
		{70, nil, "compute request 70%, limit 70%, paced at 70.00%"},
		{100, intp(25), "compute request 25%, limit 100%, paced at 25.00%"},
	} {
		c := newContainer(t, root, tc.limit)
		rewriteQuota(t, c, func(q *quota.File) {
			q.LogLevel = "info"
			q.Devices[0].ComputeRequest = tc.request
		})
		r := c.start(t, "kernel")
		measure(t, 0, 50*time.Millisecond, r)
		res := r.wait(t)
		if !strings.Contains(res.stderr, "device 0 ("+simroot.DefaultUUID(0)+"): "+tc.want) {
			t.Errorf("limit %d, request %s: the library's setup does not say %q:\n%s", tc.limit, pctOrNone(tc.request), tc.want, res.stderr)
		}
	}
}

// rewriteQuota changes c's quota file with f.
func rewriteQuota(t *testing.T, c *container, f func(*quota.File)) {
	t.Helper()
	var path string
	for _, v := range c.vars {
		if p, ok := strings.CutPrefix(v, "VGPU_QUOTA_FILE="); ok {
			path = p
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	q, err := quota.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	f(q)
	if data, err = q.Marshal(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func pctOrNone(p *int) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("%d%%", *p)
}
