package setup

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite golden files")

const runtimePath = "/usr/local/bin/vgpu-runtime"

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test -update to accept):\n%s", path, UnifiedDiff("want", "got", want, got, 3))
	}
}

// inputs lists testdata/<dir>/*.in.<ext> by case name.
func inputs(t *testing.T, dir, ext string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.in."+ext))
	if err != nil || len(files) == 0 {
		t.Fatalf("no inputs in testdata/%s: %v", dir, err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".in."+ext)] = b
	}
	return out
}

// ---- docker -------------------------------------------------------------------------

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return m
}

func TestDockerGolden(t *testing.T) {
	cases := inputs(t, "docker", "json")
	cases["missing"] = nil
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			for _, def := range []bool{false, true} {
				o := DockerOptions{RuntimePath: runtimePath, Default: def}
				suffix := ".add.diff"
				if def {
					suffix = ".default.diff"
				}
				out, err := Docker(in, o)
				gp := filepath.Join("testdata", "docker", name+suffix)
				if strings.HasPrefix(name, "bad-") {
					if err == nil {
						t.Fatalf("accepted:\n%s", out)
					}
					golden(t, gp, []byte(err.Error()+"\n"))
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				from := "a/daemon.json"
				if in == nil {
					from = "/dev/null"
				}
				golden(t, gp, []byte(UnifiedDiff(from, "b/daemon.json", in, out, 3)))
				checkDockerResult(t, in, out, o)
			}
		})
	}
}

// checkDockerResult: the runtime is there, everything else decodes as before,
// a second run changes nothing, and remove gives the input back.
func checkDockerResult(t *testing.T, in, out []byte, o DockerOptions) {
	t.Helper()
	m := decodeJSON(t, out)
	rts, _ := m["runtimes"].(map[string]any)
	vg, _ := rts[RuntimeName].(map[string]any)
	if vg == nil || vg["path"] != o.RuntimePath {
		t.Errorf("runtimes.vgpu.path missing or wrong: %v", m["runtimes"])
	}
	if o.Default && m["default-runtime"] != RuntimeName {
		t.Errorf("default-runtime = %v", m["default-runtime"])
	}
	if in != nil {
		orig := decodeJSON(t, in)
		for k, v := range orig {
			if k == "runtimes" || k == "default-runtime" && o.Default {
				continue
			}
			if !reflect.DeepEqual(m[k], v) {
				t.Errorf("%s changed: %v -> %v", k, v, m[k])
			}
		}
		if ort, ok := orig["runtimes"].(map[string]any); ok {
			for k, v := range ort {
				if k != RuntimeName && !reflect.DeepEqual(rts[k], v) {
					t.Errorf("runtimes.%s changed: %v -> %v", k, v, rts[k])
				}
			}
		}
	}
	again, err := Docker(out, o)
	if err != nil || !bytes.Equal(again, out) {
		t.Errorf("second run changed the file (err %v):\n%s", err, UnifiedDiff("first", "second", out, again, 3))
	}
	back, err := Docker(out, DockerOptions{Remove: true})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(in, []byte(`"vgpu"`)) {
		return // it was there before: remove takes it out, not back
	}
	if o.Default {
		// default-runtime goes back to runc, not away (dockerd's reload keeps
		// the value of a key that is gone).
		if bm := decodeJSON(t, back); bm["default-runtime"] != "runc" || bm["runtimes"] != nil && bm["runtimes"].(map[string]any)[RuntimeName] != nil {
			t.Errorf("after remove: %s", back)
		}
		return
	}
	if bytes.Equal(bytes.TrimSpace(in), []byte("{}")) {
		if back != nil {
			t.Errorf("remove left %q, want the file gone (it held nothing but ours)", back)
		}
		return
	}
	if !bytes.Equal(back, in) {
		t.Errorf("remove did not restore the input:\n%s", UnifiedDiff("input", "removed", in, back, 3))
	}
}

func TestDockerBadJSONLine(t *testing.T) {
	in, _ := os.ReadFile("testdata/docker/bad-syntax.in.json")
	_, err := Docker(in, DockerOptions{RuntimePath: runtimePath})
	if err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("error %v, want one naming line 4", err)
	}
	// Through DockerChange: the file is reported and not touched.
	dir := t.TempDir()
	p := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(p, in, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := DockerChange(p, DockerOptions{RuntimePath: runtimePath}); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not changed") {
		t.Errorf("DockerChange: %v", err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, in) {
		t.Error("file changed")
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
		t.Errorf("files left: %v (%v)", ents, err)
	}
}

func TestDockerRemoveOnly(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"not ours", `{"runtimes": {"crun": {"path": "/usr/bin/crun"}}}`, `{"runtimes": {"crun": {"path": "/usr/bin/crun"}}}`},
		{"first of two", "{\n  \"runtimes\": {\n    \"vgpu\": {\"path\": \"/x\"},\n    \"crun\": {\"path\": \"/c\"}\n  }\n}\n", "{\n  \"runtimes\": {\n    \"crun\": {\"path\": \"/c\"}\n  }\n}\n"},
		{"default kept when other", `{"default-runtime": "crun", "runtimes": {"vgpu": {"path": "/x"}}, "debug": true}`, `{"default-runtime": "crun", "debug": true}`},
		{"default back to runc", `{"runtimes": {"vgpu": {"path": "/x"}}, "default-runtime": "vgpu"}`, `{"default-runtime": "runc"}`},
		{"only ours: file goes", "{\n  \"runtimes\": {\n    \"vgpu\": {\"path\": \"/x\"}\n  }\n}\n", ""},
		{"missing", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in []byte
			if tc.in != "" {
				in = []byte(tc.in)
			}
			out, err := Docker(in, DockerOptions{Remove: true})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && out != nil || tc.want != "" && string(out) != tc.want {
				t.Errorf("got %q, want %q", out, tc.want)
			}
		})
	}
}

// ---- containerd ---------------------------------------------------------------------

func defaultConfig() ([]byte, error) { return os.ReadFile("testdata/containerd/default-1.6.in.toml") }

// testDropIn is the drop-in's path in the golden files.
const testDropIn = "/etc/containerd/conf.d/" + DropInName

func TestContainerdGolden(t *testing.T) {
	cases := inputs(t, "containerd", "toml")
	cases["missing"] = nil
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			for _, def := range []bool{false, true} {
				o := ContainerdOptions{RuntimePath: runtimePath, Default: def, DefaultConfig: defaultConfig}
				suffix := ".add.diff"
				if def {
					suffix = ".default.diff"
				}
				gp := filepath.Join("testdata", "containerd", name+suffix)
				out, dropIn, err := Containerd(in, testDropIn, o)
				if strings.HasPrefix(name, "bad-") {
					if err == nil {
						t.Fatalf("accepted:\n%s", out)
					}
					golden(t, gp, []byte(err.Error()+"\n"))
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				from := "a/config.toml"
				if in == nil {
					from = "/dev/null"
				}
				golden(t, gp, []byte(UnifiedDiff(from, "b/config.toml", in, out, 3)+UnifiedDiff("/dev/null", "b/conf.d/"+DropInName, nil, dropIn, 3)))
				checkContainerdResult(t, in, out, dropIn, o)
			}
		})
	}
}

func checkContainerdResult(t *testing.T, in, out, dropIn []byte, o ContainerdOptions) {
	t.Helper()
	d, err := parseTOMLDoc(out)
	if err != nil {
		t.Fatalf("config.toml does not parse: %v\n%s", err, out)
	}
	if list, _, _, _, _ := importsOf(out); !slices.Contains(list, testDropIn) {
		t.Errorf("imports = %v, want it to name %s", list, testDropIn)
	}
	v, _ := configVersion(d)
	rt, err := ContainerdRuntimePath(v)
	if err != nil {
		t.Fatal(err)
	}
	di, err := parseTOMLDoc(dropIn)
	if err != nil {
		t.Fatalf("drop-in does not parse: %v\n%s", err, dropIn)
	}
	if dv, _ := configVersion(di); dv != v {
		t.Errorf("drop-in version %d, config.toml's %d", dv, v)
	}
	if got := lookup(di, append(rt, "runtime_type")...); got != RuncShim {
		t.Errorf("runtime_type = %v", got)
	}
	if got := lookup(di, append(rt, "options", "BinaryName")...); got != o.RuntimePath {
		t.Errorf("BinaryName = %v", got)
	}
	if o.Default {
		if got := lookup(di, append(rt[:3:3], "default_runtime_name")...); got != RuntimeName {
			t.Errorf("default_runtime_name = %v", got)
		}
	}
	// containerd 1.x: the drop-in's runtimes replace containerd's built-in
	// ones, so the runtime the CRI plugin defaults to must be among them or
	// the plugin does not load.
	if v == 2 {
		def, _ := lookup(di, append(rt[:3:3], "default_runtime_name")...).(string)
		if def == "" {
			def = DefaultRuntime
		}
		for _, name := range []string{def, DefaultRuntime} {
			if lookup(di, append(rt[:4:4], name)...) == nil {
				t.Errorf("the drop-in's runtimes lack %s (default_runtime_name %q): containerd 1.x's CRI plugin would not load", name, def)
			}
		}
	}
	// containerd 1.x: the drop-in replaces config.toml's CRI section, so it
	// holds all of it.
	if v == 2 {
		if cri, ok := lookup(d, rt[:2]...).(map[string]any); ok {
			for k := range cri {
				if lookup(di, append(rt[:2:2], k)...) == nil {
					t.Errorf("config.toml's CRI setting %s is not in the drop-in", k)
				}
			}
		}
	}
	// Comments survive.
	for _, line := range strings.Split(string(in), "\n") {
		if c := strings.TrimSpace(line); strings.HasPrefix(c, "#") && !bytes.Contains(out, []byte(c)) {
			t.Errorf("comment %q lost", c)
		}
	}
	again, again2, err := Containerd(out, testDropIn, o)
	if err != nil || !bytes.Equal(again, out) || !bytes.Equal(again2, dropIn) {
		t.Errorf("second run changed the files (err %v):\n%s%s", err, UnifiedDiff("first", "second", out, again, 3), UnifiedDiff("first", "second", dropIn, again2, 3))
	}
	back, backDropIn, err := Containerd(out, testDropIn, ContainerdOptions{Remove: true})
	if err != nil {
		t.Fatal(err)
	}
	if backDropIn != nil {
		t.Error("remove keeps a drop-in")
	}
	if in == nil {
		return // the file containerd config default made stays
	}
	if !bytes.Equal(back, in) {
		t.Errorf("remove did not restore the input:\n%s", UnifiedDiff("input", "removed", in, back, 3))
	}
}

func TestContainerdVersions(t *testing.T) {
	for v, want := range map[int64]string{2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime", 4: "io.containerd.cri.v1.runtime"} {
		p, err := ContainerdRuntimePath(v)
		if err != nil || p[1] != want || p[4] != RuntimeName {
			t.Errorf("version %d: %v %v", v, p, err)
		}
	}
	if _, err := ContainerdRuntimePath(5); err == nil {
		t.Error("version 5 accepted")
	}
}

// The drop-in must also decode with go-toml into a typed view like
// containerd's (the plugin config is a map of runtimes).
func TestContainerdTyped(t *testing.T) {
	in, _ := os.ReadFile("testdata/containerd/default-1.6.in.toml")
	_, out, err := Containerd(in, testDropIn, ContainerdOptions{RuntimePath: runtimePath})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Plugins map[string]struct {
			Containerd struct {
				Runtimes map[string]struct {
					RuntimeType string         `toml:"runtime_type"`
					Options     map[string]any `toml:"options"`
				} `toml:"runtimes"`
			} `toml:"containerd"`
		} `toml:"plugins"`
	}
	if err := toml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	r := cfg.Plugins["io.containerd.grpc.v1.cri"].Containerd.Runtimes[RuntimeName]
	if r.RuntimeType != RuncShim || r.Options["BinaryName"] != runtimePath {
		t.Errorf("%+v", r)
	}
	if len(cfg.Plugins["io.containerd.grpc.v1.cri"].Containerd.Runtimes) != 2 {
		t.Errorf("runtimes: %v", cfg.Plugins["io.containerd.grpc.v1.cri"].Containerd.Runtimes)
	}
}

// ---- podman -------------------------------------------------------------------------

// checkPodmanHook asserts the hooks.d file without the golden one: schema
// 1.0.0, the hook binary at its path run for the stage, the configuration
// passed on, and run for a container with vgpu's annotation (or always).
func checkPodmanHook(t *testing.T, b []byte, stage string, o PodmanOptions) {
	t.Helper()
	var h struct {
		Version string `json:"version"`
		Hook    struct {
			Path string   `json:"path"`
			Args []string `json:"args"`
			Env  []string `json:"env"`
		} `json:"hook"`
		When struct {
			Always      *bool             `json:"always"`
			Annotations map[string]string `json:"annotations"`
		} `json:"when"`
		Stages []string `json:"stages"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatalf("%s hook: %v\n%s", stage, err, b)
	}
	if h.Version != "1.0.0" || h.Hook.Path != o.HookPath || !slices.Equal(h.Stages, []string{stage}) || !slices.Equal(h.Hook.Args, []string{"vgpu-hook", stage}) {
		t.Errorf("%s hook: version %s, path %s, args %v, stages %v; want 1.0.0, %s, [vgpu-hook %s], [%s]", stage, h.Version, h.Hook.Path, h.Hook.Args, h.Stages, o.HookPath, stage, stage)
	}
	if o.VgpuConfig != "" && !slices.Contains(h.Hook.Env, "VGPU_CONFIG="+o.VgpuConfig) {
		t.Errorf("%s hook: env %v lacks VGPU_CONFIG=%s", stage, h.Hook.Env, o.VgpuConfig)
	}
	if o.Default {
		if h.When.Always == nil || !*h.When.Always {
			t.Errorf("%s hook: when %+v, want always", stage, h.When)
		}
	} else if h.When.Always != nil || h.When.Annotations[`^vgpu\.io/visible-devices$`] != ".+" {
		t.Errorf("%s hook: when %+v, want only containers with the vgpu.io/visible-devices annotation", stage, h.When)
	}
}

func TestPodmanGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    PodmanOptions
	}{
		{"annotation", PodmanOptions{HookPath: "/usr/local/bin/vgpu-hook"}},
		{"always-config", PodmanOptions{HookPath: "/usr/local/bin/vgpu-hook", Default: true, VgpuConfig: "/srv/vgpu.toml"}},
	} {
		for _, f := range HookFiles {
			b, err := PodmanHook(f.Stage, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", "podman", tc.name+"-"+f.Name), b)
			checkPodmanHook(t, b, f.Stage, tc.o)
		}
	}
	if _, err := PodmanHook("poststop", PodmanOptions{HookPath: "vgpu-hook"}); err == nil {
		t.Error("relative hook path accepted")
	}
}

func TestPodmanChangesApply(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hooks.d")
	o := PodmanOptions{HooksDirs: []string{dir}, HookPath: "/usr/bin/vgpu-hook"}
	apply := func(o PodmanOptions) int {
		cs, err := PodmanChanges(o)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range cs {
			if c.Changed() {
				n++
			}
			if _, err := c.Apply(); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	if n := apply(o); n != 2 {
		t.Errorf("first run changed %d files", n)
	}
	if n := apply(o); n != 0 {
		t.Errorf("second run changed %d files", n)
	}
	o.Remove = true
	if n := apply(o); n != 2 {
		t.Errorf("remove changed %d files", n)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), BackupSuffix) {
			t.Errorf("left after remove: %s", e.Name())
		}
	}
}

// Without --hooks-dir the hooks go where podman reads them: containers.conf's
// engine.hooks_dir when a file sets it (the last one that does), else both
// default directories, since podman 4 reads only the first.
func TestPodmanHooksDirs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	shipped := write("shipped.conf", "[engine]\n#hooks_dir = [\n#  \"/usr/share/containers/oci/hooks.d\",\n#]\nruntime = \"crun\"\n")
	admin := write("admin.conf", "[engine]\nhooks_dir = [\"/srv/hooks.d\", \"/opt/hooks.d\"]\n")
	dropIn := write("dropin.conf", "[engine]\nhooks_dir = [\"/last/hooks.d\"]\n")
	for _, tc := range []struct {
		name  string
		files []string
		want  []string
	}{
		{"no file", []string{filepath.Join(dir, "missing.conf")}, DefaultHooksDirs},
		{"shipped, commented out", []string{shipped}, []string{"/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d"}},
		{"set by the administrator", []string{shipped, admin}, []string{"/srv/hooks.d", "/opt/hooks.d"}},
		{"a later file wins", []string{shipped, admin, dropIn}, []string{"/last/hooks.d"}},
	} {
		got, err := PodmanHooksDirs(tc.files)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
	bad := write("bad.conf", "[engine\n")
	if _, err := PodmanHooksDirs([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "--hooks-dir") {
		t.Errorf("a broken containers.conf: %v", err)
	}
	rel := write("rel.conf", "[engine]\nhooks_dir = [\"hooks.d\"]\n")
	if _, err := PodmanHooksDirs([]string{rel}); err == nil || !strings.Contains(err.Error(), `"hooks.d"`) {
		t.Errorf("a relative hooks_dir: %v", err)
	}

	// Both default directories get the same files; --remove takes them out of both.
	t.Setenv("CONTAINERS_CONF", write("none.conf", "[engine]\n"))
	root := t.TempDir()
	o := PodmanOptions{HooksDirs: []string{filepath.Join(root, "usr"), filepath.Join(root, "etc")}, HookPath: "/usr/bin/vgpu-hook"}
	cs, err := PodmanChanges(o)
	if err != nil || len(cs) != 2*len(HookFiles) {
		t.Fatalf("%d changes, %v", len(cs), err)
	}
	if def, err := PodmanChanges(PodmanOptions{HookPath: "/usr/bin/vgpu-hook"}); err != nil || len(def) != len(DefaultHooksDirs)*len(HookFiles) || !strings.HasPrefix(def[0].Path, DefaultHooksDirs[0]) || !strings.HasPrefix(def[len(def)-1].Path, DefaultHooksDirs[1]) {
		t.Errorf("default directories: %v", err)
	}
}

// ---- apply, diff ----------------------------------------------------------------------

func TestApplyBackupAndMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(p, []byte("{\"debug\": true}\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	c, err := DockerChange(p, DockerOptions{RuntimePath: runtimePath})
	if err != nil {
		t.Fatal(err)
	}
	bk, err := c.Apply()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(bk); string(b) != "{\"debug\": true}\n" {
		t.Errorf("backup %s holds %q", bk, b)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640 kept", fi.Mode())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		t.Errorf("files: %v (temp files left?)", ents)
	}
	// Dry run: Diff only.
	c2, _ := DockerChange(p, DockerOptions{RuntimePath: "/other", Default: true})
	d := c2.Diff()
	if !strings.Contains(d, `"path": "/other"`) || !strings.Contains(d, `"default-runtime": "vgpu"`) || !strings.HasPrefix(d, "--- "+p+"\n+++ "+p+"\n@@ -1 +1 @@\n") {
		t.Errorf("diff:\n%s", d)
	}
}

func TestUnifiedDiff(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"insert-middle", "a\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nd\nX\ne\nf\ng\nh\n"},
		{"two-hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n", "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\nY\n14\n"},
		{"noeol", "a\nb", "a\nb\nc\n"},
		{"from-empty", "", "x\ny\n"},
		{"to-empty", "x\ny\n", ""},
		{"replace", "a\nb\nc\n", "a\nB\nc\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, filepath.Join("testdata", "diff-"+tc.name+".diff"), []byte(UnifiedDiff("a", "b", []byte(tc.a), []byte(tc.b), 3)))
		})
	}
	if UnifiedDiff("a", "b", []byte("x"), []byte("x"), 3) != "" {
		t.Error("diff of equal texts")
	}
}

// configs/ holds what the setup commands write, for hosts set up by hand,
// with make install's default paths (PREFIX=/usr/local): it must not drift
// from the code.
func TestConfigsInSync(t *testing.T) {
	want, err := Docker(nil, DockerOptions{RuntimePath: "/usr/local/bin/vgpu-runtime"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile("../../configs/docker-daemon.json"); !bytes.Equal(got, want) {
		t.Errorf("configs/docker-daemon.json differs from vgpu setup docker's:\n%s", UnifiedDiff("configs", "setup", got, want, 3))
	}
	want, err = PodmanHook("createContainer", PodmanOptions{HookPath: "/usr/local/bin/vgpu-hook"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile("../../configs/podman-hooks.d-vgpu.json"); !bytes.Equal(got, want) {
		t.Errorf("configs/podman-hooks.d-vgpu.json differs from vgpu setup podman's:\n%s", UnifiedDiff("configs", "setup", got, want, 3))
	}
	// What vgpu setup containerd writes into conf.d for a config.toml of
	// each version, runc with the systemd cgroup driver.
	for f, in := range map[string]string{
		"containerd-v2.toml": "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n",
		"containerd-v3.toml": "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n",
	} {
		want, err := os.ReadFile("../../configs/" + f)
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := Containerd([]byte(in), testDropIn, ContainerdOptions{RuntimePath: "/usr/local/bin/vgpu-runtime"})
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("configs/%s differs from vgpu setup containerd's (%v):\n%s", f, err, UnifiedDiff(f, "setup", want, got, 3))
		}
	}
}

// configs/k8s: the manifests parse, and the RuntimeClass's handler is the
// runtime name setup gives containerd.
func TestK8sManifests(t *testing.T) {
	files, _ := filepath.Glob("../../configs/k8s/*.yaml")
	if len(files) < 2 {
		t.Fatalf("manifests: %v", files)
	}
	kinds := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			kind, _ := doc["kind"].(string)
			if doc["apiVersion"] == nil || kind == "" {
				t.Errorf("%s: document without apiVersion/kind", f)
			}
			kinds[kind] = true
			if kind == "RuntimeClass" && doc["handler"] != RuntimeName {
				t.Errorf("%s: handler %v, want %q", f, doc["handler"], RuntimeName)
			}
		}
	}
	if !kinds["RuntimeClass"] || !kinds["DaemonSet"] {
		t.Errorf("kinds %v", kinds)
	}
}

// The hint after a change of daemon.json says what dockerd does with it:
// a reload, unless --remove took the "runtimes" key (or the file) away.
func TestDockerHint(t *testing.T) {
	for _, c := range []struct {
		before string
		remove bool
		want   string
	}{
		{`{"debug": false}`, false, DockerReload},
		{`{"debug": false, "runtimes": {"vgpu": {"path": "/v"}}}`, true, DockerRestart},
		{`{"runtimes": {"vgpu": {"path": "/v"}, "other": {"path": "/o"}}}`, true, DockerReload},
		{`{"runtimes": {"vgpu": {"path": "/v"}}}`, true, DockerRestart}, // the file goes
	} {
		o := DockerOptions{RuntimePath: "/v", Remove: c.remove}
		after, err := Docker([]byte(c.before), o)
		if err != nil {
			t.Fatal(err)
		}
		if got := DockerHint(Change{Before: []byte(c.before), After: after}, o); got != c.want {
			t.Errorf("%s (remove %v): hint %q, want %q", c.before, c.remove, got, c.want)
		}
	}
}
