package e2e

// Tenant isolation (issue 19; docs/security.md points here): what a
// container's own settings cannot obtain from the host.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
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
	if r.QuotaErr != "ENOENT" || len(r.Devs) != 0 || r.Files["/etc/ld.so.preload"] || r.Files["/run/vgpu/shared"] {
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
	syscall.Stat(p, &st1)
	out, err := run(t, 60*time.Second, e.vars(), e.runtime, "--root", filepath.Join(e.dir, "runc"), "run", "-b", b, "nvenv")
	if err != nil {
		t.Fatalf("vgpu-runtime run: %v\n%s", err, out)
	}
	checkUntouched(t, parseReport(t, out), e.stateDir)
	after, _ := os.ReadFile(p)
	syscall.Stat(p, &st2)
	if !bytes.Equal(before, after) || st1.Ino != st2.Ino {
		t.Error("config.json was rewritten")
	}

	e.acceptNvidiaEnv(t)
	out, err = run(t, 60*time.Second, e.vars(), e.runtime, "--root", filepath.Join(e.dir, "runc"), "run", "-b", b, "nvenv2")
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
	out, err := run(t, 60*time.Second, e.vars(), e.runtime, "--root", filepath.Join(e.dir, "runc"), "run", "-b", b, "keys")
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
		out, err := run(t, 60*time.Second, e.vars(), e.runtime, "--root", filepath.Join(e.dir, "runc"), "run", "-b", b, "opts")
		if err != nil {
			t.Fatalf("vgpu-runtime run: %v\n%s", err, out)
		}
		checkSharedOptions(t, "shim", out)
	})
	t.Run("hook", func(t *testing.T) {
		e := newEnv(t, "iso-opts-podman")
		p := newPodman(t)
		for _, stage := range []string{"createContainer", "poststop"} {
			hook := fmt.Sprintf(`{"version":"1.0.0","hook":{"path":%q,"args":["vgpu-hook",%q],"env":["VGPU_CONFIG=%s"],"timeout":30},"when":{"always":true},"stages":[%q]}`,
				e.hook, stage, e.config, stage)
			os.WriteFile(filepath.Join(p.hooks, "vgpu-"+stage+".json"), []byte(hook), 0o644)
		}
		if out, err := p.podman(t, "import", f.rootfsTar, imageRef); err != nil {
			t.Fatalf("podman import: %v\n%s", err, out)
		}
		args := []string{"run", "--rm", "--network=none", "--annotation", "vgpu.io/visible-devices=0"}
		for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0"} {
			args = append(args, "--device", filepath.Join(e.sim.DevDir(), n)+":/dev/"+n)
		}
		out, err := p.podman(t, append(args, imageRef, "/bin/cat", "/proc/self/mountinfo")...)
		if err != nil {
			t.Fatalf("podman run: %v\n%s", err, out)
		}
		checkSharedOptions(t, "hook", out)
	})
}
