//go:build e2e

package e2e

import (
	"fmt"
	"os"
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
	pid := 0
	if err := pollAt(timeout, 200*time.Millisecond, func() error {
		if c := container(vgpuStatus(t, cli, stateDir), id); c != nil {
			for _, ev := range c.Enforcement {
				if ev.Kind == "kill" && ev.Reason == "memory" && ev.PID > 0 {
					pid = ev.PID
					return nil
				}
			}
		}
		return fmt.Errorf("no memory kill")
	}); err != nil {
		t.Fatalf("%s: %v:\n%s", id, err, statusText(cli, stateDir))
	}
	return pid
}

func waitDead(t *testing.T, pid int, timeout time.Duration) {
	t.Helper()
	if err := poll(timeout, func() error { return holds(!pidAlive(pid), "pid %d alive", pid) }); err != nil {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		t.Fatalf("pid %d still alive after its kill (%v):\n%s", pid, err, st)
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
	e := newNodeHost(t, "node-hide")
	cli := vgpuCLI(t)
	rt := e.runc(t)
	hide := "mv /run/vgpu /run/hidden && sleep 3600 | vgpu-attack driver 4096"
	env := []string{"VGPU_MEMORY_LIMIT=1073741824", "VGPU_VISIBLE_DEVICES=0"}
	b := makeBundle(t, filepath.Join(e.dir, "bundle-hide"), f.rootfs, []string{"/bin/sh", "-c", hide}, env, nil)
	rt.createStart(b, "hide")
	// the init and the cgroup, recorded at start, before the tenant's code ran
	info, data, err := readRecord(t, e.stateDir, "hide")
	if err != nil || len(info.PIDs) != 1 || info.InitStart == 0 || info.Cgroup == "" {
		t.Fatalf("container.json of a started container: %s (%v)", data, err)
	}
	if cg, err := procinfo.CgroupOf("", info.PIDs[0]); err != nil || cg.Path() != info.Cgroup {
		t.Errorf("recorded cgroup %q, the init's is %q (%v)", info.Cgroup, cg.Path(), err)
	}
	b2 := makeBundle(t, filepath.Join(e.dir, "bundle-hiderun"), f.rootfs, []string{"/bin/sh", "-c", hide}, env, nil)
	rt.detach(b2, "hiderun")
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
	mkStateDir(t, e)
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
	info, data, err := readRecord(t, e.stateDir, cid)
	if err != nil || len(info.PIDs) != 1 || info.InitStart == 0 || info.Cgroup == "" || info.Cgroup == "/" {
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
	mkStateDir(t, e)
	cli := vgpuCLI(t)
	rt := e.runc(t)
	env := []string{"VGPU_MEMORY_LIMIT=1073741824", "VGPU_VISIBLE_DEVICES=0"}
	start := func(id, sh string) int {
		b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/sh", "-c", sh}, env, nil)
		return rt.createStart(b, id)
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
			// Clean-up: thawing and removing a cgroup that may be gone
			// with its container already.
			_ = os.WriteFile(filepath.Join(dir, file), []byte(thawed), 0)
			time.Sleep(200 * time.Millisecond)
			_ = os.Remove(dir)
		})
		victim := 0
		eventually(t, 60*time.Second, "a "+comm+" in the container", func() error {
			b, err := os.ReadFile(filepath.Join(base, cg.Path(), "cgroup.procs"))
			if err != nil {
				return err
			}
			for _, l := range strings.Fields(string(b)) {
				if c, _ := os.ReadFile("/proc/" + l + "/comm"); strings.TrimSpace(string(c)) == comm {
					victim, _ = strconv.Atoi(l)
				}
			}
			return holds(victim != 0, "no %s among %q", comm, b)
		})
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
	if out, err := rt.cmd(60*time.Second, "delete", "--force", "frozen-delete"); err != nil {
		t.Fatalf("vgpu-runtime delete --force of a container with a frozen cgroup inside: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "frozen-delete")); !os.IsNotExist(err) {
		t.Errorf("state left after the delete: %v", err)
	}
	// vgpu node's kill of a frozen memory holder
	// frozen only once it holds its memory: frozen before, it never
	// allocates and there is nothing to kill
	init = start("frozen-kill", "sleep 3600 | vgpu-attack driver 4096 >/run/attack")
	attackOut := fmt.Sprintf("/proc/%d/root/run/attack", init)
	eventually(t, 90*time.Second, "vgpu-attack in frozen-kill to print held_mib= (it holds its memory)", func() error {
		b, err := os.ReadFile(attackOut)
		if err != nil {
			return err
		}
		return holds(strings.Contains(string(b), "held_mib="), "%s: %q", attackOut, b)
	})
	if b, _ := os.ReadFile(attackOut); !strings.Contains(string(b), "held_mib=4096\n") {
		t.Fatalf("vgpu-attack in frozen-kill holds less than 4 GiB before its freeze: %q", b)
	}
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
	e := newNodeHost(t, "node-respawn")
	cli := vgpuCLI(t)
	b := makeBundle(t, filepath.Join(e.dir, "bundle-respawn"), f.rootfs,
		// the worker holds until killed: a FIFO that never ends (a pipe
		// from sleep would hold the loop until the sleep ends)
		[]string{"/bin/sh", "-c", "mkfifo /run/hold && exec 3<>/run/hold && while true; do vgpu-attack driver 4096 <&3; done"},
		[]string{"VGPU_MEMORY_LIMIT=1073741824", "VGPU_VISIBLE_DEVICES=0"}, nil)
	e.runc(t).detach(b, "respawn")
	info, pb, err := readRecord(t, e.stateDir, "respawn")
	if err != nil || len(info.PIDs) != 1 {
		t.Fatalf("container.json: %s (%v)", pb, err)
	}
	if err := pollAt(120*time.Second, 200*time.Millisecond, func() error {
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
		if whole && kills < 1 {
			t.Errorf("killed whole without a kill before: %+v", c.Enforcement)
		}
		return holds(whole, "not killed whole")
	}); err != nil {
		t.Fatalf("respawning container: %v:\n%s", err, statusText(cli, e.stateDir))
	}
	waitDead(t, info.PIDs[0], 30*time.Second) // the supervisor (the container's init) too
	if text := statusText(cli, e.stateDir); !strings.Contains(text, "killed the whole container") {
		t.Errorf("status text:\n%s", text)
	}
}
