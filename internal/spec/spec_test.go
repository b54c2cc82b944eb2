package spec

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

var update = flag.Bool("update", false, "rewrite golden files")

var corpus = []string{"docker", "containerd", "podman", "nogpu"}

func bundleFrom(t *testing.T, name string, mode os.FileMode) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigName), data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, ConfigName), mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// edit applies one edit of every kind vgpu makes.
func edit(t *testing.T, s *Spec) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.SetEnv("NVIDIA_VISIBLE_DEVICES", "void"))
	must(s.SetAnnotation(InjectedAnnotation, "c1"))
	must(s.AddMounts(specs.Mount{Destination: "/run/vgpu/quota", Type: "bind", Source: "/run/vgpu/containers/c1/quota", Options: []string{"rbind", "ro", "nosuid", "nodev"}}))
	must(s.AddDevices(specs.LinuxDevice{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}))
	must(s.AddDeviceRules(specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: i64(195), Minor: i64(0), Access: "rwm"}))
	must(s.AddHook("createContainer", specs.Hook{Path: "/usr/bin/vgpu-hook", Args: []string{"vgpu-hook", "createContainer"}}))
}

func i64(v int64) *int64 { return &v }

// editedPaths are the JSON paths vgpu may change; everything else must stay.
var editedPaths = [][]string{
	{"process", "env"}, {"mounts"}, {"linux", "devices"}, {"linux", "resources", "devices"},
	{"hooks", "createContainer"}, {"annotations", InjectedAnnotation},
}

func tree(t *testing.T, data []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode: %v\n%s", err, data)
	}
	return m
}

func prune(m map[string]any, path []string) any {
	if len(path) == 1 {
		v := m[path[0]]
		delete(m, path[0])
		return v
	}
	child, ok := m[path[0]].(map[string]any)
	if !ok {
		return nil
	}
	v := prune(child, path[1:])
	if len(child) == 0 {
		delete(m, path[0]) // an object created only to hold the edit
	}
	return v
}

func TestEditKeepsUntouchedFields(t *testing.T) {
	for _, name := range corpus {
		t.Run(name, func(t *testing.T) {
			dir := bundleFrom(t, name, 0o640)
			orig, _ := os.ReadFile(filepath.Join(dir, ConfigName))
			s, err := LoadBundle(dir)
			if err != nil {
				t.Fatal(err)
			}
			edit(t, s)
			if err := s.Save(); err != nil {
				t.Fatal(err)
			}
			out, _ := os.ReadFile(filepath.Join(dir, ConfigName))
			fi, _ := os.Stat(filepath.Join(dir, ConfigName))
			if fi.Mode().Perm() != 0o640 {
				t.Errorf("mode %v, want 0640", fi.Mode().Perm())
			}
			before, after := tree(t, orig), tree(t, out)
			for _, p := range editedPaths {
				old, _ := prune(before, p).([]any)
				nw := prune(after, p)
				// Arrays we append to keep their old elements first.
				if arr, ok := nw.([]any); ok && len(old) > 0 && p[len(p)-1] != "env" {
					if !reflect.DeepEqual(arr[:len(old)], old) {
						t.Errorf("%v: old elements changed", p)
					}
				}
			}
			if !reflect.DeepEqual(before, after) {
				a, _ := json.MarshalIndent(before, "", " ")
				b, _ := json.MarshalIndent(after, "", " ")
				t.Errorf("untouched fields changed:\nbefore %s\nafter %s", a, b)
			}
			// Top-level members we did not edit are byte-identical, and
			// the keys keep their order.
			ko, ob := members(t, orig)
			kn, nb := members(t, out)
			for _, k := range ko {
				switch k {
				case "process", "mounts", "linux", "hooks", "annotations":
					continue
				}
				if nb[k] != ob[k] {
					t.Errorf("%s: bytes changed:\n%s\n%s", k, ob[k], nb[k])
				}
			}
			if !reflect.DeepEqual(kn[:len(ko)], ko) {
				t.Errorf("key order: %v -> %v", ko, kn)
			}
			// The result still decodes as a runtime spec.
			var sp specs.Spec
			if err := json.Unmarshal(out, &sp); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".edited.golden")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(want, out) {
				t.Errorf("output differs from %s (run go test -update)", golden)
			}
		})
	}
}

// members are the top-level keys of a JSON object in order, and each one's
// value as the document spells it.
func members(t *testing.T, doc []byte) ([]string, map[string]string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %v", err)
	}
	var keys []string
	vals := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		vals[tok.(string)] = string(v)
	}
	return keys, vals
}

func TestNoChangeNoWrite(t *testing.T) {
	for _, name := range corpus {
		t.Run(name, func(t *testing.T) {
			dir := bundleFrom(t, name, 0o600)
			p := filepath.Join(dir, ConfigName)
			old := time.Now().Add(-time.Hour)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
			fi1, _ := os.Stat(p)
			s, err := LoadBundle(dir)
			if err != nil {
				t.Fatal(err)
			}
			// A no-op edit: setting an env entry to the value it has.
			if env := s.Env(); len(env) > 0 {
				k, v, _ := strings.Cut(env[0], "=")
				if err := s.SetEnv(k, v); err != nil {
					t.Fatal(err)
				}
			}
			if s.Modified() {
				t.Error("Modified after no-op edit")
			}
			if err := s.Save(); err != nil {
				t.Fatal(err)
			}
			fi2, _ := os.Stat(p)
			if !fi2.ModTime().Equal(fi1.ModTime()) || fi1.Sys().(*syscall.Stat_t).Ino != fi2.Sys().(*syscall.Stat_t).Ino {
				t.Error("file was rewritten")
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 1 {
				t.Errorf("stray files: %v", ents)
			}
		})
	}
}

func TestAccessors(t *testing.T) {
	dir := bundleFrom(t, "containerd", 0o644)
	s, err := LoadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.RootfsPath(), filepath.Join(dir, "rootfs"); got != want {
		t.Errorf("RootfsPath %q want %q", got, want)
	}
	if got := s.Annotations()["io.containerd.image.name"]; got != "docker.io/library/cuda:13.0" {
		t.Errorf("annotation %q", got)
	}
	if env := s.Env(); len(env) != 3 || env[1] != "VGPU_VISIBLE_DEVICES=all" {
		t.Errorf("env %q", env)
	}
	c := s.Clone()
	if err := c.SetEnv("A", "b"); err != nil {
		t.Fatal(err)
	}
	if s.Modified() || len(s.Env()) != 3 {
		t.Error("Clone shares state")
	}
	if !c.Modified() || c.Env()[3] != "A=b" {
		t.Errorf("clone env %q", c.Env())
	}
	// SetEnv replaces in place and drops later duplicates.
	p, _ := Parse([]byte(`{"process":{"env":["A=1","B=2","A=3"]}}`))
	if err := p.SetEnv("A", "x"); err != nil {
		t.Fatal(err)
	}
	if got := p.Env(); !reflect.DeepEqual(got, []string{"A=x", "B=2"}) {
		t.Errorf("env %q", got)
	}
	if err := p.Save(); err == nil {
		t.Error("Save of a parsed document should fail")
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`[]`, "not a JSON object"},
		{`{"a":1,"a":2}`, "duplicate key"},
		{`{"process":{"env":["A"],"env":[]}}`, "duplicate key"},
		{`{"process":{"env":"A=1"}}`, "process.env"},
		{`{"mounts":{}}`, "mounts"},
		{`{"linux":{"devices":[{"path":1}]}}`, "linux.devices"},
		{`{"annotations":{"a":1}}`, "annotations"},
		{`{"linux":{"resources":[]}}`, "not a JSON object"},
		{`{} {}`, "after top-level value"},
		{`{"a":`, "not valid JSON"},
		{`{"a":1,}`, "trailing comma"},
		{`{"a":1 /* x */}`, "comments"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.doc, err, tc.want)
		}
	}
	if _, err := Parse([]byte(`{"annotations":null,"linux":null,"hooks":null}`)); err != nil {
		t.Errorf("nulls: %v", err)
	}
}

func TestEditNullAndMissing(t *testing.T) {
	s, err := Parse([]byte(`{"ociVersion":"1.0.0","linux":null,"mounts":null}`))
	if err != nil {
		t.Fatal(err)
	}
	edit(t, s)
	var sp specs.Spec
	if err := json.Unmarshal(s.Bytes(), &sp); err != nil {
		t.Fatal(err)
	}
	if len(sp.Mounts) != 1 || len(sp.Linux.Devices) != 1 || len(sp.Linux.Resources.Devices) != 1 || len(sp.Hooks.CreateContainer) != 1 || sp.Process.Env[0] != "NVIDIA_VISIBLE_DEVICES=void" {
		t.Errorf("%s", s.Bytes())
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, name := range corpus {
		data, _ := os.ReadFile(filepath.Join("testdata", name+".json"))
		f.Add(data)
	}
	f.Add([]byte(`{"process":{"env":null},"linux":{}}`))
	for _, c := range ambiguous {
		f.Add([]byte(c.doc))
	}
	f.Add([]byte(`{"Mounts":[],"PROCESS":{"Env":["A=1"]},"Linux":{"Resources":{"Devices":[]}},"Annotations":{}}`))
	f.Add([]byte(`{"annotations":{"k":"a","K":"b"}}`))
	for _, s := range []string{
		`{}`, ` { } `, `[]`, `"x"`, `1`, `null`, `{"a":[{"b":1,"B":2}]}`, `{"a":{"b":[1,{"c":{},"C":[]}]}}`,
		`{"\u0041":1,"a":2}`, `{"k\"":"v\\","k\\":{"x":"\"}"}}`, "{\"\xff\":1,\"\xfe\":2}", `{"a" : 1 , "b" :[ true , false , null , -1.5e3 ]}`,
		`[[[{"x":1}],{"y":2,"Y":3}]]`, `{"a":1,}`, `{"a":[1,]}`, "{\"a\":1 // c\n}", `{"a":01}`, `{"a":+1}`, `{"a":"\x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"process":{"user":{"uid":5}},"linux":{"uidMappings":[{"containerID":0,"hostID":100000,"size":65536}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		// What vgpu accepts, runc's decoder reads: JSON, no HuJSON extension.
		if !json.Valid(data) {
			t.Fatalf("accepted a document encoding/json refuses: %q", data)
		}
		if !bytes.Equal(s.Bytes(), data) {
			t.Fatal("unedited Bytes differ from input")
		}
		_ = s.Env()
		_ = s.Annotations()
		_ = s.RootfsPath()
		_, _ = s.HostUID()
		if err := s.SetEnv("NVIDIA_VISIBLE_DEVICES", "void"); err != nil {
			t.Fatal(err)
		}
		if err := s.AddMounts(specs.Mount{Destination: "/x", Source: "/y", Type: "bind"}); err != nil {
			t.Fatal(err)
		}
		if err := s.AddDeviceRules(specs.LinuxDeviceCgroup{Allow: true, Access: "rwm"}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetAnnotation("k", "v"); err != nil {
			t.Fatal(err)
		}
		out := s.Bytes()
		s2, err := Parse(out)
		if err != nil {
			t.Fatalf("edited document does not parse: %v\n%s", err, out)
		}
		if s2.Annotations()["k"] != "v" {
			t.Fatal("annotation lost")
		}
		env := s2.Env()
		if len(env) == 0 || !strings.Contains(strings.Join(env, "\n"), "NVIDIA_VISIBLE_DEVICES=void") {
			t.Fatalf("env lost: %q", env)
		}
		// runc's view (encoding/json into the runtime-spec types) must hold
		// every edit: no key spelled another way can hide one from it.
		var sp specs.Spec
		if json.Unmarshal(out, &sp) != nil {
			return // types runc would refuse too
		}
		if sp.Annotations["k"] != "v" || sp.Process == nil || !slices.Contains(sp.Process.Env, "NVIDIA_VISIBLE_DEVICES=void") ||
			!slices.ContainsFunc(sp.Mounts, func(m specs.Mount) bool { return m.Destination == "/x" }) ||
			sp.Linux == nil || sp.Linux.Resources == nil || len(sp.Linux.Resources.Devices) == 0 {
			t.Fatalf("runc's decoder does not see the edits:\n%s", out)
		}
	})
}

// ambiguous are documents in which runc's decoder (case-insensitive, last
// key wins) and a key-exact reader would disagree.
var ambiguous = []struct{ name, doc, want string }{
	{"top", `{"mounts":[],"Mounts":[]}`, `config.json: keys "mounts" and "Mounts" match case-insensitively`},
	{"exact", `{"process":{"env":[]},"process":{}}`, `config.json: duplicate key "process"`},
	{"nested", `{"linux":{"resources":{"devices":[],"DEVICES":[]}}}`, `config.json.linux.resources: keys "devices" and "DEVICES"`},
	{"in array", `{"mounts":[{"destination":"/a"},{"type":"bind","Type":"tmpfs"}]}`, `config.json.mounts[1]: keys "type" and "Type"`},
	{"escaped", `{"hooks":{},"Hoo\u006bs":{}}`, `keys "hooks" and "Hooks"`},
	{"kelvin", `{"linux":{"\u212Aernel":1,"kernel":2}}`, "config.json.linux: keys \"\u212aernel\" and \"kernel\""},
	{"annotations", `{"annotations":{"a":"1","A":"2"}}`, `config.json.annotations: keys "a" and "A"`},
}

func TestAmbiguousKeysRefused(t *testing.T) {
	for _, c := range ambiguous {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "keep one") {
				t.Fatalf("Parse(%s) = %v, want an error with %q", c.doc, err, c.want)
			}
		})
	}
	// Through a bundle: the file is left as it was.
	dir := t.TempDir()
	p := filepath.Join(dir, ConfigName)
	doc := []byte(`{"ociVersion":"1.0.2","mounts":[{"destination":"/proc","type":"proc","source":"proc"}],"Mounts":[]}`)
	if err := os.WriteFile(p, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadBundle(dir); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("LoadBundle: %v, want an error naming %s", err, p)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, doc) {
		t.Errorf("config.json changed: %s", got)
	}
}

// A key spelled in another case alone is the key runc uses: vgpu edits it
// there rather than adding a second spelling beside it.
func TestCaseVariantKeyEditedInPlace(t *testing.T) {
	s, err := Parse([]byte(`{"Process":{"Env":["PATH=/bin"],"args":["sh"]},"Mounts":[{"destination":"/proc","type":"proc","source":"proc"}],"Linux":{"namespaces":[{"type":"pid"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	edit(t, s)
	out := s.Bytes()
	if _, err := Parse(out); err != nil {
		t.Fatalf("edited document refused: %v\n%s", err, out)
	}
	var sp specs.Spec
	if err := json.Unmarshal(out, &sp); err != nil {
		t.Fatal(err)
	}
	if len(sp.Mounts) != 2 || sp.Mounts[0].Destination != "/proc" || len(sp.Process.Args) != 1 ||
		!slices.Equal(sp.Process.Env, []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"}) || len(sp.Linux.Namespaces) != 1 || len(sp.Linux.Devices) != 1 {
		t.Errorf("runc's view: %+v\n%s", sp, out)
	}
}

// A hostile bundle: config.json of millions of nested objects (or one past
// the size bound) is refused with one error naming the bound, before
// anything allocates per level; a spec at the depth bound still parses.
func TestHostileSizeAndNesting(t *testing.T) {
	deep := []byte(strings.Repeat(`{"a":`, 1_000_000) + "1" + strings.Repeat("}", 1_000_000))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Parse(deep)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "MaxSpecDepth") {
		t.Fatalf("deep: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("refusing a %d-byte document allocated %d bytes", len(deep), grew)
	}
	ok := `{"ociVersion":"1.2.0","annotations":{"x":"` + strings.Repeat(`{[`, 100) + `"},"process":{"env":[]},"a":` + strings.Repeat("[", MaxSpecDepth-1) + strings.Repeat("]", MaxSpecDepth-1) + "}"
	if _, err := Parse([]byte(ok)); err != nil {
		t.Fatalf("brackets in strings and a spec at the depth bound: %v", err)
	}
	big := []byte(`{"annotations":{"x":"` + strings.Repeat("a", MaxSpecSize) + `"}}`)
	if _, err := Parse(big); err == nil || !strings.Contains(err.Error(), "MaxSpecSize") {
		t.Fatalf("big: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadBundle(dir); err == nil || !strings.Contains(err.Error(), "MaxSpecSize") {
		t.Fatalf("big bundle: %v", err)
	}
}

// BenchmarkParseDocker is what vgpu-runtime pays to read a docker
// config.json, for every container (go test -bench ParseDocker).
func BenchmarkParseDocker(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "docker.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// HostUID: the process's uid, mapped through the user namespace's
// uidMappings; not known when unset, unmapped or malformed.
func TestHostUID(t *testing.T) {
	for _, tc := range []struct {
		doc string
		uid uint32
		ok  bool
	}{
		{`{"process":{"user":{"uid":1000,"gid":1000}}}`, 1000, true},
		{`{"process":{"user":{"uid":0}}}`, 0, true},
		{`{"process":{"user":{"uid":5}},"linux":{"uidMappings":[{"containerID":0,"hostID":100000,"size":65536}]}}`, 100005, true},
		{`{"process":{"user":{"uid":5}},"linux":{"uidMappings":[]}}`, 5, true},
		{`{"process":{"user":{"uid":70000}},"linux":{"uidMappings":[{"containerID":0,"hostID":100000,"size":65536}]}}`, 0, false},
		{`{"process":{"user":{}}}`, 0, false},
		{`{"process":{"user":{"uid":-1}}}`, 0, false},
		{`{"process":{"user":{"uid":"x"}}}`, 0, false},
		{`{"process":{"user":{"uid":1}},"linux":{"uidMappings":{}}}`, 0, false},
	} {
		s, err := Parse([]byte(tc.doc))
		if err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		if uid, ok := s.HostUID(); uid != tc.uid || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.doc, uid, ok, tc.uid, tc.ok)
		}
	}
}
