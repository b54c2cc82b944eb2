//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/procinfo"
)

// Tenants against vgpu node's attribution and kills (docs/security.md):
// real runc and podman containers on the simulated GPU.

// waitMemoryKill waits for vgpu node's memory kill of container id and
// returns the killed pid.
func waitMemoryKill(t *testing.T, cli, stateDir, id string, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if c := container(vgpuStatus(t, cli, stateDir), id); c != nil {
			for _, ev := range c.Enforcement {
				if ev.Kind == "kill" && ev.Reason == "memory" && ev.PID > 0 {
					return ev.PID
				}
			}
		}
		if time.Now().After(deadline) {
			text, _ := exec.Command(cli, "status", "--state-dir", stateDir).CombinedOutput()
			t.Fatalf("%s: no memory kill after %v:\n%s", id, timeout, text)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitDead(t *testing.T, pid int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for pidAlive(pid) {
		if time.Now().After(deadline) {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			t.Fatalf("pid %d still alive %v after its kill:\n%s", pid, timeout, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A tenant that moves /run/vgpu away (any process of the container, no
// capability) switched attribution off: its real-driver allocation of 4x
// its limit went on. Its cgroup, recorded at create, holds it: killed, on
// the runtime's create+start path and on run --detach.
func TestNodeAttributionSurvivesHiddenQuota(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	addAttacker(t, f)
	e := newEnv(t, "node-hide")
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cli := vgpuCLI(t)
	root := filepath.Join(e.dir, "runc")
	startNode(t, e)
	hide := "mv /run/vgpu /run/hidden && sleep 3600 | vgpu-attack driver 4096"
	env := []string{"VGPU_MEMORY_LIMIT=1073741824", "VGPU_VISIBLE_DEVICES=0"}
	b := makeBundle(t, filepath.Join(e.dir, "bundle-hide"), f.rootfs, []string{"/bin/sh", "-c", hide}, env, nil)
	if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "create", "--bundle", b, "--pid-file", filepath.Join(e.dir, "hide.pid"), "hide"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	t.Cleanup(func() { run(t, 10*time.Second, nil, "runc", "--root", root, "delete", "--force", "hide") })
	if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "start", "hide"); err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	// the init and the cgroup, recorded at start, before the tenant's code ran
	var info struct {
		PIDs      []int  `json:"pids"`
		InitStart uint64 `json:"initStart"`
		Cgroup    string `json:"cgroup"`
	}
	data, _ := os.ReadFile(filepath.Join(e.stateDir, "hide", "container.json"))
	if err := json.Unmarshal(data, &info); err != nil || len(info.PIDs) != 1 || info.InitStart == 0 || info.Cgroup == "" {
		t.Fatalf("container.json of a started container: %s (%v)", data, err)
	}
	if cg, err := procinfo.CgroupOf("", info.PIDs[0]); err != nil || cg.Path() != info.Cgroup {
		t.Errorf("recorded cgroup %q, the init's is %q (%v)", info.Cgroup, cg.Path(), err)
	}
	b2 := makeBundle(t, filepath.Join(e.dir, "bundle-hiderun"), f.rootfs, []string{"/bin/sh", "-c", hide}, env, nil)
	if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "run", "--detach", "--bundle", b2, "hiderun"); err != nil {
		t.Fatalf("run --detach: %v\n%s", err, out)
	}
	t.Cleanup(func() { run(t, 10*time.Second, nil, "runc", "--root", root, "delete", "--force", "hiderun") })
	for _, id := range []string{"hide", "hiderun"} {
		pid := waitMemoryKill(t, cli, e.stateDir, id, 90*time.Second)
		waitDead(t, pid, 30*time.Second)
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); len(b) > 0 && !strings.HasPrefix(string(b), "vgpu-attack") {
			t.Errorf("%s: killed %q, want the attacker", id, b)
		}
	}
	// vgpu status sees the container running, its init alive, though its
	// processes no longer see their quota file
	if c := container(vgpuStatus(t, cli, e.stateDir), "hide"); c == nil || c.State != "running" || !c.InitAlive {
		t.Errorf("status of the container that hid /run/vgpu: %+v", c)
	}
}

// The hook path (podman hooks.d) records the container's init and cgroup
// at createContainer: the same tenant is held there too.
func TestNodeHookPathRecordsCgroup(t *testing.T) {
	f := shared(t)
	need(t, "gcc")
	addAttacker(t, f)
	e := newEnv(t, "node-hook")
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cli := vgpuCLI(t)
	p := podmanWithHooks(t, e, f)
	startNode(t, e)
	args := []string{"run", "-d", "--network=none", "--name", "hooked", "-v", filepath.Join(f.rootfs, "usr/bin/vgpu-attack") + ":/usr/bin/vgpu-attack:ro"}
	args = append(args, simDeviceArgs(e)...)
	args = append(args, "--annotation", "vgpu.io/memory-limit=1Gi", "--annotation", "vgpu.io/visible-devices=0", imageRef,
		"/bin/sh", "-c", "mv /run/vgpu /run/hidden && sleep 3600 | vgpu-attack driver 4096")
	out, err := p.podman(t, args...)
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	cid := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	var info struct {
		Name      string `json:"name"`
		PIDs      []int  `json:"pids"`
		InitStart uint64 `json:"initStart"`
		Cgroup    string `json:"cgroup"`
	}
	data, _ := os.ReadFile(filepath.Join(e.stateDir, cid, "container.json"))
	if err := json.Unmarshal(data, &info); err != nil || len(info.PIDs) != 1 || info.InitStart == 0 || info.Cgroup == "" || info.Cgroup == "/" {
		t.Fatalf("container.json written by the hook: %s (%v)", data, err)
	}
	if info.Name != "hooked" { // podman passes none: read from its storage
		t.Errorf("name %q, podman's --name hooked", info.Name)
	}
	pidOut, _ := p.podman(t, "inspect", "-f", "{{.State.Pid}}", cid)
	lines := strings.Fields(pidOut) // podman's warnings first
	if pid, _ := strconv.Atoi(lines[len(lines)-1]); pid != info.PIDs[0] {
		t.Errorf("recorded init pid %d, podman's %q", info.PIDs[0], pidOut)
	} else if cg, err := procinfo.CgroupOf("", pid); err != nil || cg.Path() != info.Cgroup {
		t.Errorf("recorded cgroup %q, the init's %q (%v)", info.Cgroup, cg.Path(), err)
	}
	pid := waitMemoryKill(t, cli, e.stateDir, cid, 90*time.Second)
	waitDead(t, pid, 30*time.Second)
}

// A tenant that freezes its own memory holder in a cgroup below its
// container's (a user and cgroup namespace of its own; done here from the
// host) kept vgpu node's SIGKILL from landing on the v1 freezer, and the
// runtime's delete from working. The daemon thaws such cgroups before it
// kills; vgpu-runtime delete thaws them before the runtime's.
func TestNodeKillLandsThroughTenantFreeze(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	addAttacker(t, f)
	e := newEnv(t, "node-frozen")
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cli := vgpuCLI(t)
	root := filepath.Join(e.dir, "runc")
	env := []string{"VGPU_MEMORY_LIMIT=1073741824", "VGPU_VISIBLE_DEVICES=0"}
	start := func(id, sh string) int {
		b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/sh", "-c", sh}, env, nil)
		pidFile := filepath.Join(e.dir, id+".pid")
		if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "create", "--bundle", b, "--pid-file", pidFile, id); err != nil {
			t.Fatalf("create: %v\n%s", err, out)
		}
		t.Cleanup(func() { run(t, 10*time.Second, nil, "runc", "--root", root, "delete", "--force", id) })
		if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "start", id); err != nil {
			t.Fatalf("start: %v\n%s", err, out)
		}
		pb, _ := os.ReadFile(pidFile)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(pb)))
		return pid
	}
	// trap freezes the container's process named comm in a cgroup below the
	// container's, as a tenant with its own cgroup namespace can
	trap := func(init int, comm string) (dir string) {
		cg, err := procinfo.CgroupOf("", init)
		if err != nil {
			t.Fatal(err)
		}
		base, file, frozen, thawed := "/sys/fs/cgroup", "cgroup.freeze", "1", "0"
		if cg.Freezer != "" {
			base, file, frozen, thawed = "/sys/fs/cgroup/freezer", "freezer.state", "FROZEN", "THAWED"
		}
		dir = filepath.Join(base, cg.Path(), "trap")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.WriteFile(filepath.Join(dir, file), []byte(thawed), 0)
			time.Sleep(200 * time.Millisecond)
			os.Remove(dir)
		})
		deadline := time.Now().Add(60 * time.Second)
		victim := 0
		for victim == 0 {
			b, _ := os.ReadFile(filepath.Join(base, cg.Path(), "cgroup.procs"))
			for _, l := range strings.Fields(string(b)) {
				if c, _ := os.ReadFile("/proc/" + l + "/comm"); strings.TrimSpace(string(c)) == comm {
					victim, _ = strconv.Atoi(l)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s in the container", comm)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(victim)), 0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(frozen), 0); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// the runtime's delete of a container with a frozen cgroup inside
	init := start("frozen-delete", "sleep 3600")
	trap(init, "sleep")
	if out, err := run(t, 60*time.Second, e.vars(), e.runtime, "--root", root, "delete", "--force", "frozen-delete"); err != nil {
		t.Fatalf("vgpu-runtime delete --force of a container with a frozen cgroup inside: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "frozen-delete")); !os.IsNotExist(err) {
		t.Errorf("state left after the delete: %v", err)
	}
	// vgpu node's kill of a frozen memory holder
	init = start("frozen-kill", "sleep 3600 | vgpu-attack driver 4096")
	time.Sleep(2 * time.Second) // it allocates
	trap(init, "vgpu-attack")
	startNode(t, e)
	pid := waitMemoryKill(t, cli, e.stateDir, "frozen-kill", 90*time.Second)
	waitDead(t, pid, 30*time.Second)
}

// A container whose supervisor respawns its worker after every kill
// (holding 4x its limit again each time) is killed whole: every process of
// its cgroup, the supervisor too, and vgpu status says so.
func TestNodeKillsRespawningContainerWhole(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc")
	addAttacker(t, f)
	e := newEnv(t, "node-respawn")
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cli := vgpuCLI(t)
	root := filepath.Join(e.dir, "runc")
	startNode(t, e)
	b := makeBundle(t, filepath.Join(e.dir, "bundle-respawn"), f.rootfs,
		// the worker holds until killed: a FIFO that never ends (a pipe
		// from sleep would hold the loop until the sleep ends)
		[]string{"/bin/sh", "-c", "mkfifo /run/hold && exec 3<>/run/hold && while true; do vgpu-attack driver 4096 <&3; done"},
		[]string{"VGPU_MEMORY_LIMIT=1073741824", "VGPU_VISIBLE_DEVICES=0"}, nil)
	if out, err := run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "run", "--detach", "--bundle", b, "respawn"); err != nil {
		t.Fatalf("run --detach: %v\n%s", err, out)
	}
	t.Cleanup(func() { run(t, 10*time.Second, nil, "runc", "--root", root, "delete", "--force", "respawn") })
	pb, _ := os.ReadFile(filepath.Join(e.stateDir, "respawn", "container.json"))
	var info struct {
		PIDs []int `json:"pids"`
	}
	if err := json.Unmarshal(pb, &info); err != nil || len(info.PIDs) != 1 {
		t.Fatalf("container.json: %s (%v)", pb, err)
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		c := container(vgpuStatus(t, cli, e.stateDir), "respawn")
		whole := false
		kills := 0
		if c != nil {
			for _, ev := range c.Enforcement {
				if ev.Kind == "kill" {
					kills++
				}
				if ev.Kind == "kill-container" && ev.Reason == "repeat" && ev.Error == "" {
					whole = true
				}
			}
		}
		if whole {
			if kills < 1 {
				t.Errorf("killed whole without a kill before: %+v", c.Enforcement)
			}
			break
		}
		if time.Now().After(deadline) {
			text, _ := exec.Command(cli, "status", "--state-dir", e.stateDir).CombinedOutput()
			t.Fatalf("respawning container not killed whole after 120 s:\n%s", text)
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitDead(t, info.PIDs[0], 30*time.Second) // the supervisor (the container's init) too
	text, _ := exec.Command(cli, "status", "--state-dir", e.stateDir).CombinedOutput()
	if !strings.Contains(string(text), "killed the whole container") {
		t.Errorf("status text:\n%s", text)
	}
}
