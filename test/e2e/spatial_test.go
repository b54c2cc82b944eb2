//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/status"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// The spatial mode's host side (docs/spatial.md) with real runc on the
// simulated GPU and the simulated MPS control program (test/simgpu/mpsd):
// vgpu node runs and restarts GPU 1's control daemon; a container on GPU 1
// gets the pipe directory, the shared /dev/shm, the client environment and
// a version 3 quota line; creation is refused without a daemon and for a
// second user; a tenant's GPU process that is not a client of the GPU's
// MPS server is killed, a client is not.

// addMPSClient builds test/e2e/mpsclient into the shared rootfs as
// /usr/bin/vgpu-mpsclient.
func addMPSClient(t *testing.T, f *fixture) {
	t.Helper()
	buildIntoRootfs(t, f, "vgpu-mpsclient", "mpsclient/mpsclient.c")
}

// setUser makes a bundle's process run as uid.
func setUser(t *testing.T, bundle string, uid int) {
	t.Helper()
	p := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	s["process"].(map[string]any)["user"] = map[string]any{"uid": uid, "gid": uid}
	out, _ := json.MarshalIndent(s, "", "\t")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mpsOf(r *status.Report, uuid string) *events.MPS {
	for i := range r.MPS {
		if r.MPS[i].GPU == uuid {
			return &r.MPS[i]
		}
	}
	return nil
}

func TestSpatialMode(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	addAttacker(t, f)
	addMPSClient(t, f)
	e := newEnv(t, "spatial")
	if _, err := os.Stat(filepath.Join(e.sim.Dir(), "usr/bin/nvidia-cuda-mps-control")); err != nil {
		t.Fatalf("the simulated MPS control program is not in the driver root (make go-build builds it): %v", err)
	}
	appendConfig(t, e, "[spatial]\ngpus = [\"1\"]\n")
	mkStateDir(t, e)
	uuid := simroot.DefaultUUID(1)
	mpsDir := filepath.Join(e.stateDir, ".mps", uuid)
	cli := vgpuCLI(t)
	rt := e.runc(t)
	bundle := func(id string, sh string, env ...string) string {
		return makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/sh", "-c", sh}, append([]string{"VGPU_VISIBLE_DEVICES=1"}, env...), nil)
	}
	runFG := func(id, b string) (string, error) { return rt.run(b, id) }

	// No vgpu node: no control daemon, so no container on the spatial GPU.
	if out, err := runFG("early", bundle("early", "true")); err == nil || !strings.Contains(out, "its MPS control daemon is not running") {
		t.Fatalf("without vgpu node: %v\n%s", err, out)
	}

	metricsURL, logPath := startNode(t, e)
	var daemonPID int
	eventuallyTrue(t, 30*time.Second, "vgpu status shows GPU 1's MPS control daemon running", func() bool {
		m := mpsOf(vgpuStatus(t, cli, e.stateDir), uuid)
		if m != nil && m.State == "running" {
			daemonPID = m.PID
		}
		return daemonPID > 0
	})
	if m := mpsOf(vgpuStatus(t, cli, e.stateDir), simroot.DefaultUUID(0)); m != nil {
		t.Errorf("time-sliced GPU 0 has a control daemon: %+v", m)
	}
	for _, p := range []struct {
		rel  string
		mode os.FileMode
	}{{"", 0o700}, {"pipe", 0o755}, {"log", 0o700}, {"shm", 0o777 | os.ModeSticky}} {
		fi, err := os.Stat(filepath.Join(mpsDir, p.rel))
		if err != nil || fi.Mode().Perm()|fi.Mode()&os.ModeSticky != p.mode {
			t.Errorf(".mps/<uuid>/%s: %v %v, want %v", p.rel, fi.Mode(), err, p.mode)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mpsDir, "log", "control.log")); err != nil || !strings.Contains(string(b), "Starting control daemon") {
		t.Errorf("control.log: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(fmt.Sprintf("/proc/%d/environ", daemonPID))); err != nil || !strings.Contains(string(b), "CUDA_VISIBLE_DEVICES="+uuid+"\x00") {
		t.Errorf("the daemon's environment lacks CUDA_VISIBLE_DEVICES=%s: %v", uuid, err)
	}

	// What a container on the spatial GPU gets.
	out, err := runFG("look", bundle("look", `echo "env $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"; cat /run/vgpu/quota; `+
		`ls /run/vgpu/mps; touch /run/vgpu/mps/x 2>/dev/null && echo pipe-writable; echo hi > /dev/shm/from-look && echo shm-written`,
		"VGPU_MEMORY_LIMIT=1Gi", "VGPU_COMPUTE_LIMIT=50"))
	if err != nil {
		t.Fatalf("container on the spatial GPU: %v\n%s", err, out)
	}
	for _, want := range []string{"env /run/vgpu/mps 50 0=1024M\n", "\nvgpu-quota 3\n", "\ndevice 0 " + uuid + " memory=1073741824 compute=50 mode=spatial mps_pipe=/run/vgpu/mps\n",
		"control\n", "shm-written\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "pipe-writable") {
		t.Errorf("the pipe directory is writable in the container:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(mpsDir, "shm", "from-look")); err != nil || string(b) != "hi\n" {
		t.Errorf("the container's /dev/shm is not the GPU's shm directory: %q %v", b, err)
	}
	// and the daemon's /dev/shm is that directory too (its own mount namespace)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/dev/shm/from-look", daemonPID)); err != nil || string(b) != "hi\n" {
		t.Errorf("the MPS control daemon's /dev/shm is not the GPU's shm directory: %q %v", b, err)
	}

	// A client of the server, and a process that reached the GPU around
	// MPS (the real driver by its path, without the pipe directory: the
	// driver, real or simulated, makes a process that keeps it an MPS
	// client); no memory limit, so only the client rule can act.
	// It is low and asks MPS for normal priority itself: the host's wins.
	rt.createStart(bundle("client", "sleep 3600 | vgpu-mpsclient cuda-fill hold 64 2>/dev/shm/client.log", "VGPU_COMPUTE_LIMIT=40",
		"VGPU_PRIORITY=low", "CUDA_MPS_CLIENT_PRIORITY=0"), "client")
	// another user on the spatial GPU while the client's user is on it
	other := bundle("other", "true")
	setUser(t, other, 1000)
	if out, err := runFG("other", other); err == nil || !strings.Contains(out, "MPS serves one user per GPU at a time") {
		t.Errorf("a second user on the spatial GPU: %v\n%s", err, out)
	}
	rt.createStart(bundle("bypass", "sleep 3600 | env -u CUDA_MPS_PIPE_DIRECTORY vgpu-attack driver 64", "VGPU_COMPUTE_LIMIT=40"), "bypass")
	eventuallyTrue(t, 60*time.Second, "vgpu node to kill the bypass (reason mps)", func() bool {
		evs, _ := events.Read(e.stateDir)
		for _, ev := range evs {
			if ev.Kind == "kill" && ev.Reason == "mps" && ev.Container == "bypass" && ev.Error == "" {
				return true
			}
		}
		return false
	})
	// rounds past the MPS grace (2 s, 20 intervals), where a wrong kill of
	// the client would land
	waitRounds(t, metricsURL, 40)
	r := vgpuStatus(t, cli, e.stateDir)
	if c := container(r, "client"); c == nil || len(c.Processes) == 0 {
		cl, _ := os.ReadFile(filepath.Join(mpsDir, "shm", "client.log"))
		ctl, _ := os.ReadFile(filepath.Join(mpsDir, "log", "control.log"))
		t.Errorf("the client container has no GPU process left: %+v\nits stderr:\n%s\ncontrol.log:\n%s", c, cl, ctl)
	}
	evs, _ := events.Read(e.stateDir)
	for _, ev := range evs {
		if ev.Kind == "kill" && ev.Container == "client" {
			t.Errorf("the MPS client was killed: %+v", ev)
		}
	}
	if m := mpsOf(r, uuid); m == nil || len(m.Servers) != 1 || m.Clients < 1 || m.Cap != 40 {
		t.Errorf("status of the daemon: %+v (want one server, the client, held to 40%%)", m)
	}
	// its driver's connection (the one after vgpu-mpsclient's own, which
	// is no driver's): a low tenant's, below normal as the server saw it
	if b, _ := os.ReadFile(filepath.Join(mpsDir, "log", "control.log")); !strings.Contains(string(b), "with priority 1\n") {
		t.Errorf("the low tenant's MPS client priority is not 1 (below normal); control.log:\n%s", b)
	}

	// A dead control daemon is started again and the restart recorded.
	syscall.Kill(daemonPID, syscall.SIGKILL)
	eventuallyTrue(t, 30*time.Second, "the daemon's restart", func() bool {
		m := mpsOf(vgpuStatus(t, cli, e.stateDir), uuid)
		return m != nil && m.State == "running" && m.PID != daemonPID && m.Restarts == 1
	})
	evs, _ = events.Read(e.stateDir)
	exits := 0
	for _, ev := range evs {
		if ev.Kind == "mps-exit" && ev.GPU == uuid {
			exits++
		}
	}
	text := statusText(cli, e.stateDir)
	if exits != 1 || !strings.Contains(text, "restarted 1 time(s)") || !strings.Contains(text, "(spatial: MPS share)") {
		t.Errorf("%d mps-exit events; vgpu status:\n%s", exits, text)
	}
	_ = logPath
}
