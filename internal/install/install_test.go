package install

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tree is every file, directory and link under root: path -> kind and content.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.IsDir():
			m[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			m[rel] = "link " + l
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fi, _ := d.Info()
			m[rel] = fi.Mode().String() + " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func diffTrees(a, b map[string]string) []string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, "gone: "+k)
		} else if v != w {
			d = append(d, "changed: "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "new: "+k)
		}
	}
	return d
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
}

const containerdV3 = `version = 3
# the node's own setting, kept
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
`

type fixture struct {
	host, payload string
	o             Options
}

func newFixture(t *testing.T, containerdConfig string) *fixture {
	t.Helper()
	f := &fixture{host: t.TempDir(), payload: t.TempDir()}
	writePayload(t, f.payload, "1")
	if containerdConfig != "" {
		p := filepath.Join(f.host, "etc/containerd/config.toml")
		mustMkdir(t, filepath.Dir(p))
		if err := os.WriteFile(p, []byte(containerdConfig), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustMkdir(t, filepath.Join(f.host, "etc"))
	mustMkdir(t, filepath.Join(f.host, "run/vgpu/containers"))
	f.o = Options{HostRoot: f.host, Payload: f.payload, InstallRoot: "/opt/vgpu", ConfigPath: "/etc/vgpu/config.toml",
		ContainerdConfig: "/etc/containerd/config.toml", StateDir: "/run/vgpu/containers"}
	return f
}

func writePayload(t *testing.T, dir, release string) {
	t.Helper()
	for _, sub := range []string{"bin", "lib"} {
		mustMkdir(t, filepath.Join(dir, sub))
	}
	files := map[string]string{
		"bin/vgpu-runtime": "runtime " + release, "bin/vgpu-node": "node " + release, "bin/vgpu": "cli " + release,
		"lib/libvgpu-cuda.so": "cuda " + release, "lib/libvgpu-nvml.so": "nvml " + release,
		"config.toml": "[library]\ndir = \"/usr/lib/vgpu\"\n",
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func ino(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// Install writes the files, the configuration and the drop-in; twice is a
// no-op; remove leaves the host tree exactly as it was.
func TestInstallRemoveRoundTrip(t *testing.T) {
	f := newFixture(t, containerdV3)
	before := tree(t, f.host)

	res, err := Install(f.o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.ContainerdChange {
		t.Error("the first install did not report a containerd change")
	}
	h := func(p string) string { return filepath.Join(f.host, p) }
	for _, p := range []string{"opt/vgpu/bin/vgpu-runtime", "opt/vgpu/lib/libvgpu-cuda.so", "opt/vgpu/" + RecordName, "etc/containerd/conf.d/99-vgpu.toml"} {
		if _, err := os.Stat(h(p)); err != nil {
			t.Errorf("after install: %v", err)
		}
	}
	cfg, _ := os.ReadFile(h("etc/vgpu/config.toml"))
	if !strings.Contains(string(cfg), `dir = "/opt/vgpu/lib"`) {
		t.Errorf("the written configuration does not name the installed libraries: %s", cfg)
	}
	drop, _ := os.ReadFile(h("etc/containerd/conf.d/99-vgpu.toml"))
	if !strings.Contains(string(drop), `BinaryName = '/opt/vgpu/bin/vgpu-runtime'`) && !strings.Contains(string(drop), `BinaryName = "/opt/vgpu/bin/vgpu-runtime"`) {
		t.Errorf("the drop-in does not name the installed runtime (the node's path, not the pod's): %s", drop)
	}
	ctrd, _ := os.ReadFile(h("etc/containerd/config.toml"))
	if !strings.Contains(string(ctrd), "/etc/containerd/conf.d/99-vgpu.toml") || strings.Contains(string(ctrd), f.host) {
		t.Errorf("config.toml does not import the drop-in by the node's path: %s", ctrd)
	}

	installed := tree(t, f.host)
	libIno := ino(t, h("opt/vgpu/lib/libvgpu-cuda.so"))
	res, err = Install(f.o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changed) != 0 || res.ContainerdChange {
		t.Errorf("a second install changed %v (containerd: %v); want nothing", res.Changed, res.ContainerdChange)
	}
	if d := diffTrees(installed, tree(t, f.host)); len(d) != 0 || ino(t, h("opt/vgpu/lib/libvgpu-cuda.so")) != libIno {
		t.Errorf("a second install changed the host: %v", d)
	}

	res, err = Remove(f.o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.ContainerdChange {
		t.Error("remove did not report a containerd change")
	}
	if d := diffTrees(before, tree(t, f.host)); len(d) != 0 {
		t.Errorf("after remove the host differs from before install: %v", d)
	}
}

// An upgrade writes each changed file as a new inode: a tenant that has the
// old library bind-mounted (open) keeps reading the old content.
func TestUpgradeNeverOverwritesInPlace(t *testing.T) {
	f := newFixture(t, containerdV3)
	if _, err := Install(f.o); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(f.host, "opt/vgpu/lib/libvgpu-cuda.so")
	held, err := os.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	writePayload(t, f.payload, "2")
	res, err := Install(f.o)
	if err != nil {
		t.Fatal(err)
	}
	if res.ContainerdChange {
		t.Error("an upgrade with the same runtime path changed containerd's configuration (a needless restart)")
	}
	now, _ := os.ReadFile(lib)
	old := make([]byte, 64)
	n, _ := held.ReadAt(old, 0)
	if string(now) != "cuda 2" || string(old[:n]) != "cuda 1" {
		t.Errorf("after the upgrade the path reads %q and the open (old) file %q; want %q and %q", now, old[:n], "cuda 2", "cuda 1")
	}
}

// Remove refuses while a vgpu container runs, and changes nothing then.
func TestRemoveRefusedWithTenants(t *testing.T) {
	f := newFixture(t, containerdV3)
	if _, err := Install(f.o); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(f.host, "run/vgpu/containers/abc")
	mustMkdir(t, rec)
	mustWrite(t, filepath.Join(rec, "container.json"), []byte("{}"), 0o600)
	installed := tree(t, f.host)
	_, err := Remove(f.o)
	if !errors.Is(err, ErrTenants) || !strings.Contains(err.Error(), "abc") {
		t.Fatalf("remove with a running container: %v; want ErrTenants naming it", err)
	}
	if d := diffTrees(installed, tree(t, f.host)); len(d) != 0 {
		t.Errorf("a refused remove changed the host: %v", d)
	}
	f.o.Force = true
	if _, err := Remove(f.o); err != nil {
		t.Fatalf("forced remove: %v", err)
	}
}

// A file changed on the node after the install is the administrator's: kept.
// A containerd config.toml the install created goes; one the node had keeps
// the node's own edits.
func TestRemoveKeepsWhatChanged(t *testing.T) {
	f := newFixture(t, containerdV3)
	if _, err := Install(f.o); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(f.host, "etc/vgpu/config.toml")
	mustWrite(t, cfg, []byte("# mine\n"), 0o644)
	ctrd := filepath.Join(f.host, "etc/containerd/config.toml")
	data, _ := os.ReadFile(ctrd)
	mustWrite(t, ctrd, append(data, "# added later\n"...), 0o644)
	res, err := Remove(f.o)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "# mine\n" {
		t.Errorf("remove touched a configuration changed since: %q", b)
	}
	if len(res.Kept) == 0 {
		t.Error("remove did not say what it kept")
	}
	after, _ := os.ReadFile(ctrd)
	if !bytes.Equal(after, []byte(containerdV3+"# added later\n")) {
		t.Errorf("containerd's config.toml after remove:\n%s\nwant the node's own, with its later edit", after)
	}
}

func TestOptionsChecked(t *testing.T) {
	f := newFixture(t, containerdV3)
	for name, mod := range map[string]func(*Options){
		"relative install root": func(o *Options) { o.InstallRoot = "opt/vgpu" },
		"install root /":        func(o *Options) { o.InstallRoot = "/" },
		"relative config":       func(o *Options) { o.ConfigPath = "config.toml" },
	} {
		o := f.o
		mod(&o)
		if _, err := Install(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if d := tree(t, f.host); d["opt"] != "" {
		t.Error("a refused install wrote something")
	}
}

// The chart's configuration replaces the node's; remove puts the node's back.
func TestConfigSourceRestoredAtRemove(t *testing.T) {
	f := newFixture(t, containerdV3)
	cfg := filepath.Join(f.host, "etc/vgpu/config.toml")
	mustMkdir(t, filepath.Dir(cfg))
	mustWrite(t, cfg, []byte("# the node's own\n"), 0o644)
	src := filepath.Join(t.TempDir(), "config.toml")
	mustWrite(t, src, []byte("# the chart's\n"), 0o644)
	f.o.ConfigSource = src
	before := tree(t, f.host)
	for range 2 {
		if _, err := Install(f.o); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(cfg); string(b) != "# the chart's\n" {
			t.Fatalf("after install the configuration is %q; want the chart's", b)
		}
	}
	if _, err := Remove(f.o); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(before, tree(t, f.host)); len(d) != 0 {
		t.Errorf("after remove the host differs from before install: %v", d)
	}
}

// A node set up by hand (vgpu setup containerd: its own drop-in, imported)
// gets the installer's drop-in, and after remove its own again, with the
// import left in place: exactly as before.
func TestRemoveRestoresHandSetUp(t *testing.T) {
	f := newFixture(t, "version = 3\nimports = [\"/etc/containerd/conf.d/99-vgpu.toml\"]\n")
	drop := filepath.Join(f.host, "etc/containerd/conf.d/99-vgpu.toml")
	mustMkdir(t, filepath.Dir(drop))
	mustWrite(t, drop, []byte("# the node's own drop-in\n"), 0o644)
	before := tree(t, f.host)
	if _, err := Install(f.o); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(drop); !strings.Contains(string(b), "/opt/vgpu/bin/vgpu-runtime") {
		t.Fatalf("install did not write its drop-in: %s", b)
	}
	if _, err := Install(f.o); err != nil {
		t.Fatal(err)
	}
	if _, err := Remove(f.o); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(before, tree(t, f.host)); len(d) != 0 {
		t.Errorf("after remove the hand-set-up node differs from before: %v", d)
	}
}
