//go:build integration

package cudahook_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/node/daemon"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// noNVML: vgpu node's arbitration needs no driver figures.
type noNVML struct{}

func (noNVML) Read() ([]nvmlfeed.Sample, error) { return nil, nil }
func (noNVML) Close() error                     { return nil }

// recordTenant registers tenant id in stateDir as the state store does (its
// grant file included), with the one device dev, and points vars' quota
// file at that entry's quota.
func recordTenant(t *testing.T, root *simroot.Root, stateDir, id string, dev tenant.Device, vars []string) *quota.File {
	t.Helper()
	dev.Index, dev.GPU.UUID = 0, simroot.DefaultUUID(0)
	q := &quota.File{
		DriverCuda: filepath.Join(root.LibDir(), "libcuda.so."+root.Version()),
		DriverNvml: filepath.Join(root.LibDir(), "libnvidia-ml.so."+root.Version()),
		SharedDir:  filepath.Join(stateDir, id, "shared"),
		Devices:    []tenant.Device{dev},
	}
	if _, err := state.Create(stateDir, state.FromQuota(id, q), nil); err != nil {
		t.Fatal(err)
	}
	for i, v := range vars {
		if strings.HasPrefix(v, "VGPU_QUOTA_FILE=") {
			vars[i] = "VGPU_QUOTA_FILE=" + filepath.Join(stateDir, id, "quota")
		}
	}
	return q
}

// tenantIn registers a tenant in stateDir (recordTenant) and returns it as a
// container whose library reads that entry's quota, region and grant file.
func tenantIn(t *testing.T, root *simroot.Root, stateDir, id string, limit int, request *int) *container {
	t.Helper()
	return tenantOf(t, root, stateDir, id, tenant.Device{Compute: limit, ComputeRequest: request})
}

// tenantOf is tenantIn for a device as given (its priority, say).
func tenantOf(t *testing.T, root *simroot.Root, stateDir, id string, dev tenant.Device) *container {
	t.Helper()
	c := newContainerQuota(t, root, nil, nil, dev.Compute)
	c.shared = recordTenant(t, root, stateDir, id, dev, c.vars).SharedDir
	return c
}

// startNode runs vgpu node's daemon over stateDir, reading source, until the
// test ends; log takes its lines (nil: none).
func startNode(t *testing.T, stateDir string, source nvmlfeed.Source, log io.Writer) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(daemon.Options{StateDir: stateDir, ProcRoot: t.TempDir(), CgroupRoot: t.TempDir(), Policy: enforce.DefaultConfig(),
		Source: source, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { runErr = d.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if runErr != nil {
			t.Errorf("vgpu node's Run: %v", runErr)
		}
	})
	return d
}

// On the simulated GPU with vgpu node's arbitration running, a tenant with
// request 30 and limit 100 alone gets at least 60 % of the device over 5 s
// (the idle GPU is used), while a control with request = limit = 30 gets
// 30 % (15 to 30 + loadMargin on a loaded machine); without the arbitration
// the request-30 tenant is held to its request, as closely.
func TestComputeRequestUsesIdleGPU(t *testing.T) {
	r30 := 30
	for _, tc := range []struct {
		name     string
		limit    int
		request  *int
		node     bool
		min, max float64
	}{
		{"request 30 limit 100", 100, &r30, true, 60, 101},
		{"request = limit = 30", 30, nil, true, 15, 30 + loadMargin},
		{"request 30 limit 100, no vgpu node", 100, &r30, false, 15, 30 + loadMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, err := simroot.Create(t.TempDir(), simroot.Options{})
			if err != nil {
				t.Fatal(err)
			}
			stateDir := t.TempDir()
			c := tenantIn(t, root, stateDir, "t", tc.limit, tc.request)
			if tc.node {
				startNode(t, stateDir, noNVML{}, nil)
			}
			r := c.start(t, "kernel")
			measure(t, 1500*time.Millisecond, 5*time.Second, r)
			res := r.wait(t)
			occ := 100 * float64(res.u(t, "busy0_ns")) / float64(res.u(t, "window_ns"))
			t.Logf("%s: device busy %.1f%% of 5 s", tc.name, occ)
			if occ < tc.min || occ > tc.max {
				t.Errorf("%s: the device was busy %.1f%% of 5 s, want %.0f..%.0f%%", tc.name, occ, tc.min, tc.max)
			}
		})
	}
}

// Two busy tenants with requests 30 and 50 (limits 100) split the device by
// their requests (37.5 : 62.5) and lose little of it: each gets at least its
// request, together at least 85 % (wide margins: a loaded machine).
func TestComputeRequestsShareTheRest(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	r30, r50 := 30, 50
	a := tenantIn(t, root, stateDir, "a", 100, &r30)
	b := tenantIn(t, root, stateDir, "b", 100, &r50)
	d := startNode(t, stateDir, noNVML{}, nil)
	ra, rb := a.start(t, "kernel"), b.start(t, "kernel")
	measure(t, 1500*time.Millisecond, 5*time.Second, ra, rb)
	resA, resB := ra.wait(t), rb.wait(t)
	oa, ob := occupancy(t, resA), occupancy(t, resB)
	t.Logf("requests 30 and 50, both busy: %.1f%% and %.1f%% of the device (ideal 37.5 and 62.5); grants %v", oa, ob, d.Grants())
	if oa < 30 || ob < 50 || oa+ob < 85 {
		t.Errorf("requests 30 and 50: %.1f%% and %.1f%%; want each at least its request, together at least 85%%", oa, ob)
	}
}

// A tenant with no compute setting paced from its start (defaults.pace_all:
// request 0, surplus only) costs nothing while it is alone and lets a
// request given later hold: alone it keeps the whole device busy; once a
// request-70 tenant arrives, both flooding, the newcomer gets at least its
// request. Created unpaced instead (request and limit 100: as without
// pace_all), it held the newcomer to half of the device, below its request.
func TestRequestHoldsBesideATenantPacedFromItsStart(t *testing.T) {
	root, err := simroot.Create(t.TempDir(), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	zero, r70 := 0, 70
	early := tenantIn(t, root, stateDir, "early", 100, &zero)
	d := startNode(t, stateDir, noNVML{}, nil)
	retry(t, func() (errs []string) {
		r := early.start(t, "kernel")
		measure(t, 1500*time.Millisecond, 3*time.Second, r)
		alone := occupancy(t, r.wait(t))
		t.Logf("request 0, alone: %.1f%% of the device", alone)
		if alone < 100-loadMargin {
			errs = append(errs, fmt.Sprintf("paced at request 0 and alone, the tenant kept the device %.1f%% busy, want the whole of it (-%d)", alone, loadMargin))
		}
		return errs
	})
	late := tenantIn(t, root, stateDir, "late", 100, &r70)
	retry(t, func() (errs []string) {
		re, rl := early.start(t, "kernel"), late.start(t, "kernel")
		measure(t, 1500*time.Millisecond, 5*time.Second, re, rl)
		oe, ol := occupancy(t, re.wait(t)), occupancy(t, rl.wait(t))
		t.Logf("beside it, request 70: %.1f%% (the earlier one %.1f%%); grants %v", ol, oe, d.Grants())
		if ol < 70-loadMargin/2 {
			errs = append(errs, fmt.Sprintf("the request-70 tenant got %.1f%% beside one paced at request 0 from its start, want at least its request, 70%% (-%d)", ol, loadMargin/2))
		}
		return errs
	})
}
