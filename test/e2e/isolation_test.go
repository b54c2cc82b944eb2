//go:build e2e

package e2e

// Tenant isolation (docs/security.md points here): what a
// container's own settings cannot obtain from the host.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/apply"
)

// acceptNvidiaEnv turns accept_nvidia_visible_devices_envvar on in e's config.
func (e *env) acceptNvidiaEnv(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	// A top-level key: before the first table.
	if err := os.WriteFile(e.config, append([]byte("accept_nvidia_visible_devices_envvar = true\n"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkUntouched asserts that a container got nothing from vgpu.
func checkUntouched(t *testing.T, r report, stateDir string) {
	t.Helper()
	if r.QuotaErr != "ENOENT" || len(r.Devs) != 0 || r.Preload != "" || r.Files["/run/vgpu/shared"] {
		t.Errorf("a container whose only GPU setting is NVIDIA_VISIBLE_DEVICES=all got something: %+v", r)
	}
	if ents, _ := os.ReadDir(stateDir); len(ents) != 0 {
		t.Errorf("state written for it: %v", ents)
	}
}

// checkAllGPUs asserts that a container got both simulated GPUs.
func checkAllGPUs(t *testing.T, r report) {
	t.Helper()
	if !strings.Contains(r.Quota, "\ndevice 0 GPU-") || !strings.Contains(r.Quota, "\ndevice 1 GPU-") {
		t.Errorf("accepted NVIDIA_VISIBLE_DEVICES=all: quota lacks devices 0 and 1:\n%s (%+v)", r.Quota, r)
	}
	for _, d := range []string{"/dev/nvidia0", "/dev/nvidia1"} {
		if _, ok := r.Devs[d]; !ok {
			t.Errorf("accepted NVIDIA_VISIBLE_DEVICES=all: %s missing: %v", d, r.Devs)
		}
	}
}

// Case 2: NVIDIA_VISIBLE_DEVICES=all (every CUDA image has it) grants nothing
// unless the host config accepts it; the spec is left as it was.
func TestIsolationNvidiaVisibleDevicesRunc(t *testing.T) {
	f := shared(t)
	need(t, "runc")
	e := newEnv(t, "iso-nvenv")
	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/probe"}, []string{"NVIDIA_VISIBLE_DEVICES=all"}, nil)
	p := filepath.Join(b, "config.json")
	before, _ := os.ReadFile(p)
	var st1, st2 syscall.Stat_t
	if err := syscall.Stat(p, &st1); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(e.dir, "runtime.log")
	out, err := e.runc(t).cmd(60*time.Second, "--log", logPath, "run", "-b", b, "nvenv")
	if err != nil {
		t.Fatalf("vgpu-runtime run: %v\n%s", err, out)
	}
	checkUntouched(t, parseReport(t, out), e.stateDir)
	// Not silent: the runtime's log (where the engine looks) says what to write.
	if b, _ := os.ReadFile(logPath); !bytes.Contains(b, []byte("level=warning")) || !bytes.Contains(b, []byte(`NVIDIA_VISIBLE_DEVICES=\"all\" grants no GPU`)) || !bytes.Contains(b, []byte("VGPU_VISIBLE_DEVICES=all")) {
		t.Errorf("the runtime's log does not say NVIDIA_VISIBLE_DEVICES was not read:\n%s", b)
	}
	after, _ := os.ReadFile(p)
	if err := syscall.Stat(p, &st2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) || st1.Ino != st2.Ino {
		t.Error("config.json was rewritten")
	}

	e.acceptNvidiaEnv(t)
	out, err = e.runc(t).run(b, "nvenv2")
	if err != nil {
		t.Fatalf("vgpu-runtime run (accepted): %v\n%s", err, out)
	}
	checkAllGPUs(t, parseReport(t, out))
}

// The same through docker, with the variable baked into the image as CUDA
// images have it (ENV), not given on the command line.
func TestIsolationNvidiaVisibleDevicesDocker(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "iso-nvenv-docker")
	d := startDockerd(t, map[string]string{"vgpu": e.wrapper})
	if out, err := d.docker(t, "import", "--change", "ENV NVIDIA_VISIBLE_DEVICES=all", f.rootfsTar, "vgpu-e2e/cuda-like:1"); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	out, err := d.docker(t, "run", "--rm", "--runtime=vgpu", "--network=none", "vgpu-e2e/cuda-like:1", "/bin/probe")
	if err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	checkUntouched(t, parseReport(t, out), e.stateDir)

	e.acceptNvidiaEnv(t)
	out, err = d.docker(t, "run", "--rm", "--runtime=vgpu", "--network=none", "vgpu-e2e/cuda-like:1", "/bin/probe")
	if err != nil {
		t.Fatalf("docker run (accepted): %v\n%s", err, out)
	}
	checkAllGPUs(t, parseReport(t, out))
}

// Case 3: a config.json with both "mounts" and "Mounts" (runc's decoder
// matches keys case-insensitively and keeps the last) is refused with one
// error, and nothing is edited or written.
func TestIsolationAmbiguousConfigRunc(t *testing.T) {
	f := shared(t)
	need(t, "runc")
	e := newEnv(t, "iso-keys")
	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/probe"}, []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=1Gi"}, nil)
	p := filepath.Join(b, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]json.RawMessage
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	// The same mounts again under "Mounts", after "mounts": runc would use these.
	doc := append(bytes.TrimSuffix(bytes.TrimSpace(raw), []byte("}")), []byte(`,"Mounts":`)...)
	doc = append(append(doc, s["mounts"]...), '}')
	if err := os.WriteFile(p, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := e.runc(t).run(b, "keys")
	if err == nil {
		t.Fatalf("vgpu-runtime ran a config.json with both mounts and Mounts:\n%s", out)
	}
	if !strings.Contains(out, `keys "mounts" and "Mounts" match case-insensitively`) {
		t.Errorf("the error does not name both keys:\n%s", out)
	}
	if after, _ := os.ReadFile(p); !bytes.Equal(after, doc) {
		t.Error("config.json changed")
	}
	if ents, _ := os.ReadDir(e.stateDir); len(ents) != 0 {
		t.Errorf("state written: %v", ents)
	}
}

// sharedMountOptions returns the per-mount options of /run/vgpu/shared in
// the /proc/self/mountinfo lines of out.
func sharedMountOptions(t *testing.T, out string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 6 && f[4] == "/run/vgpu/shared" {
			// After the optional fields and "-": the filesystem type, which
			// is the capped tmpfs on every path (TestIsolationSharedDirCapped).
			for i := 6; i+1 < len(f); i++ {
				if f[i] == "-" && f[i+1] != "tmpfs" {
					t.Errorf("/run/vgpu/shared is a %s, not the capped tmpfs: %s", f[i+1], l)
				}
			}
			return strings.Split(f[5], ",")
		}
	}
	t.Fatalf("no /run/vgpu/shared in the container's mountinfo:\n%s", out)
	return nil
}

func checkSharedOptions(t *testing.T, path, out string) {
	t.Helper()
	opts := sharedMountOptions(t, out)
	for _, want := range []string{"rw", "nosuid", "nodev", "noexec"} {
		if !slices.Contains(opts, want) {
			t.Errorf("%s: /run/vgpu/shared mounted %v, without %s", path, opts, want)
		}
	}
}

// Case 6: the shim (spec) and the hook (mount_setattr) mount the shared
// directory with the same options: rw,nosuid,nodev,noexec.
func TestIsolationSharedMountOptions(t *testing.T) {
	f := shared(t)
	t.Run("shim", func(t *testing.T) {
		need(t, "runc")
		e := newEnv(t, "iso-opts")
		b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/sh", "-c", "cat /proc/self/mountinfo"},
			[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=1Gi"}, nil)
		out, err := e.runc(t).run(b, "opts")
		if err != nil {
			t.Fatalf("vgpu-runtime run: %v\n%s", err, out)
		}
		checkSharedOptions(t, "shim", out)
	})
	t.Run("hook", func(t *testing.T) {
		e := newEnv(t, "iso-opts-podman")
		p := podmanWithHooks(t, e, f)
		args := []string{"run", "--rm", "--network=none", "--annotation", "vgpu.io/visible-devices=0"}
		args = append(args, simDeviceArgs(e)...)
		out, err := p.podman(t, append(args, imageRef, "/bin/cat", "/proc/self/mountinfo")...)
		if err != nil {
			t.Fatalf("podman run: %v\n%s", err, out)
		}
		checkSharedOptions(t, "hook", out)
	})
}

// fillShared is a tenant filling its /run/vgpu/shared until a write fails:
// it prints fill_rc (cat's exit status) and fill_size (what it wrote).
const fillShared = "cat /dev/zero > /run/vgpu/shared/junk; echo fill_rc=$?; stat -c fill_size=%s /run/vgpu/shared/junk"

// filledSize is fillShared's fill_size, -1 when it printed none.
func filledSize(out string) int64 {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "fill_size="); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// Case 1: a tenant filling its writable /run/vgpu/shared fills the capped
// tmpfs the shim mounted there (apply.SharedFSSize), not the host
// filesystem that holds state_dir; the next container is created as usual.
func TestIsolationSharedDirCapped(t *testing.T) {
	f := shared(t)
	need(t, "runc")
	e := newEnv(t, "iso-fill")
	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs,
		[]string{"/bin/sh", "-c", fillShared},
		[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=1Gi"}, nil)
	out, err := e.runc(t).run(b, "fill")
	if err != nil {
		t.Fatalf("vgpu-runtime run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "fill_rc=1") {
		t.Errorf("writing /dev/zero into /run/vgpu/shared did not stop with an error:\n%s", out)
	}
	size := filledSize(out)
	if size < 0 || size > apply.SharedFSSize {
		t.Errorf("the tenant wrote %d bytes into /run/vgpu/shared, want at most %d:\n%s", size, apply.SharedFSSize, out)
	}
	if left := stateLeft(e.stateDir); len(left) != 0 {
		t.Errorf("state left after the container exited: %v", left)
	}
	// The next container of the host is created and gets its quota.
	b2 := makeBundle(t, filepath.Join(e.dir, "bundle2"), f.rootfs, []string{"/bin/probe"}, []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=1Gi"}, nil)
	out, err = e.runc(t).run(b2, "next")
	if err != nil {
		t.Fatalf("vgpu-runtime run of the next container: %v\n%s", err, out)
	}
	if r := parseReport(t, out); r.QuotaErr != "" || r.SharedW != "ok" {
		t.Errorf("next container: %+v", r)
	}
}

// The same on the hook path (podman): the hook mounts the capped tmpfs in
// the runtime's mount namespace, and poststop takes it off again.
func TestIsolationSharedDirCappedHook(t *testing.T) {
	f := shared(t)
	e := newEnv(t, "iso-fill-podman")
	p := podmanWithHooks(t, e, f)
	args := []string{"run", "--rm", "--network=none", "--annotation", "vgpu.io/visible-devices=0"}
	args = append(args, simDeviceArgs(e)...)
	out, err := p.podman(t, append(args, imageRef, "/bin/sh", "-c", fillShared)...)
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	size := filledSize(out)
	if !strings.Contains(out, "fill_rc=1") || size < 0 || size > apply.SharedFSSize {
		t.Errorf("the tenant wrote %d bytes into /run/vgpu/shared, want a failed write of at most %d:\n%s", size, apply.SharedFSSize, out)
	}
	// While a container runs, the host sees the same capped tmpfs at
	// <state_dir>/<id>/shared, where vgpu status reads the region.
	id, err := p.podman(t, append(append([]string{"run", "-d"}, args[2:]...), imageRef, "/bin/sh", "-c", "echo x > /run/vgpu/shared/mark; sleep 60")...)
	if err != nil {
		t.Fatalf("podman run -d: %v\n%s", err, id)
	}
	id = strings.TrimSpace(id)
	host := filepath.Join(e.stateDir, id, "shared")
	var st unix.Statfs_t
	// the mark's absence after the wait is asserted below, with the tmpfs
	_ = pollAt(20*time.Second, 50*time.Millisecond, func() error {
		_, err := os.Stat(filepath.Join(host, "mark"))
		return err
	})
	if err := unix.Statfs(host, &st); err != nil || st.Type != unix.TMPFS_MAGIC || uint64(st.Blocks)*uint64(st.Bsize) != apply.SharedFSSize {
		t.Errorf("host view of %s: %v, type %#x, %d bytes; want the container's capped tmpfs", host, err, st.Type, uint64(st.Blocks)*uint64(st.Bsize))
	}
	if _, err := os.Stat(filepath.Join(host, "mark")); err != nil {
		t.Errorf("the host does not see what the container wrote into /run/vgpu/shared: %v", err)
	}
	if out, err := p.podman(t, "rm", "-f", "-t", "0", id); err != nil {
		t.Fatalf("podman rm: %v\n%s", err, out)
	}
	if left := stateLeft(e.stateDir); len(left) != 0 {
		t.Errorf("poststop left state: %v", left)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), e.stateDir) {
		t.Errorf("a mount under %s is left on the host:\n%s", e.stateDir, mi)
	}
}
