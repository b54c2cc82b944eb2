package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/mps"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// fakeMPS is a control daemon that answers as the real one did on the H200:
// no command while it starts a server, then the server and its client.
type fakeMPS struct {
	pid     int
	servers []int
	clients map[int]bool
	caps    []int // the percentage of each Cap call
}

func (f *fakeMPS) State() mps.State { return mps.State{State: mps.Running, PID: f.pid} }
func (f *fakeMPS) Clients(context.Context) ([]int, map[int]bool, error) {
	if f.servers == nil {
		return nil, nil, errors.New("get_server_list: exit status 1 Cannot send command to MPS control daemon process")
	}
	return f.servers, f.clients, nil
}
func (f *fakeMPS) Cap(_ context.Context, _ []int, pct int) error {
	f.caps = append(f.caps, pct)
	return nil
}

// The MPS server the node's own control daemon started is never a tenant's
// process, even where it shares the tenant's cgroup (a `vgpu exec` of the
// same session, as the serving benchmark ran it); a client the driver lists
// with an MPS context is left alone before the daemon answers; a process of
// the tenant outside MPS is killed once MPSGrace has passed, whether the
// daemon answers and names it a client (it registered on the socket) or
// never answers (down: a root tenant sent it quit).
func TestDaemonSpatialServerAndClients(t *testing.T) {
	for _, daemonUp := range []bool{true, false} {
		h := newHost(t, "")
		dir := filepath.Join(h.state, "c1")
		if err := os.WriteFile(filepath.Join(dir, "quota"), []byte("vgpu-quota 3\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\ndevice 0 "+uuid+" memory=8589934592 compute=50 mode=spatial mps_pipe=/run/vgpu/mps\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		stat := func(pid, ppid int) {
			d := filepath.Join(h.proc, fmt.Sprint(pid))
			if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "cgroup"), []byte("6:freezer:/runc/c1\n0::/\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			setMountNS(t, d, "mnt:[4026539999]")
			if err := os.WriteFile(filepath.Join(d, "stat"), []byte(fmt.Sprintf("%d (x) S %d 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, ppid, 5000+pid)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		const daemonPID, serverPID = 50, 103
		stat(100, 1)
		stat(101, 100)
		stat(102, 100)
		stat(serverPID, daemonPID) // in the tenant's cgroup, a child of the node's daemon
		f := &feed{samples: []nvmlfeed.Sample{
			{HostPID: serverPID, GPU: uuid, UsedBytes: 66 << 20},
			{HostPID: 101, GPU: uuid, UsedBytes: 502 << 20, MPS: true},
			{HostPID: 102, GPU: uuid, UsedBytes: 300 << 20}, // around MPS
		}}
		md := &fakeMPS{pid: daemonPID}
		now := time.Unix(1_800_000_000, 0)
		var killed []int
		var log bytes.Buffer
		d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: f, Log: &log,
			Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }, MPS: map[string]MPSDaemon{uuid: md},
			Kill: func(pid int) error { killed = append(killed, pid); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		grace := enforce.DefaultConfig().MPSGrace
		for i := 0; now.Before(time.Unix(1_800_000_000, 0).Add(grace + time.Second)); i++ {
			if i == 5 && daemonUp { // the daemon answers once its server runs; 102 registered on its socket
				md.servers, md.clients = []int{serverPID}, map[int]bool{101: true, 102: true}
			}
			d.Round()
			now = now.Add(100 * time.Millisecond)
		}
		if !slices.Equal(killed, []int{102}) {
			t.Fatalf("daemon up %v: killed %v, want only the process outside MPS [102]\n%s", daemonUp, killed, log.String())
		}
		if !strings.Contains(log.String(), "kill pid 102 of c1: on spatial GPU") {
			t.Errorf("daemon up %v: log:\n%s", daemonUp, log.String())
		}
	}
}

// The node holds a spatial GPU's servers to the tenants' share again at
// every refresh of the client lists, not only when the share changes: a
// root tenant that raised it through the control daemon's socket keeps the
// raise at most until the next refresh.
func TestDaemonReassertsMPSCap(t *testing.T) {
	h := newHost(t, "")
	dir := filepath.Join(h.state, "c1")
	if err := os.WriteFile(filepath.Join(dir, "quota"), []byte("vgpu-quota 3\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\ndevice 0 "+uuid+" memory=8589934592 compute=50 mode=spatial mps_pipe=/run/vgpu/mps\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	md := &fakeMPS{pid: 50, servers: []int{103}, clients: map[int]bool{}}
	now := time.Unix(1_800_000_000, 0)
	d, err := New(Options{StateDir: h.state, ProcRoot: h.proc, CgroupRoot: h.cg, Policy: enforce.DefaultConfig(), Source: &feed{}, Log: &bytes.Buffer{},
		Registry: prometheus.NewRegistry(), Now: func() time.Time { return now }, MPS: map[string]MPSDaemon{uuid: md},
		Kill: func(int) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 35; i++ { // 3.5 s of 100 ms rounds
		d.Round()
		now = now.Add(100 * time.Millisecond)
	}
	if len(md.caps) < 4 || slices.ContainsFunc(md.caps, func(p int) bool { return p != 50 }) {
		t.Errorf("caps over 3.5 s with refreshes every %v: %v, want 50 at the start and again at each refresh", mpsRefresh, md.caps)
	}
}
