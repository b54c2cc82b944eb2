package setup

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tailscale/hujson"
)

func addSeeds(f *testing.F, dir, ext string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.in."+ext))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
}

// FuzzDocker: daemon.json is outside input. Whatever it holds, Docker never
// panics; what it accepts it turns into JSON with our runtime and every other
// key unchanged; a second run changes nothing; remove undoes add byte for
// byte when add's was the only change.
func FuzzDocker(f *testing.F) {
	addSeeds(f, "docker", "json")
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte("{\n}"))
	f.Add([]byte(`{"runtimes":{"vgpu":"x"}}`))
	f.Add([]byte(`{"runtimes":{"vgpu":{"path":1}},"default-runtime":null}`))
	f.Add([]byte(`{"a":"\u00e9\"}\\","b":[{"c":{}}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		o := DockerOptions{RuntimePath: "/usr/local/bin/vgpu-runtime", Default: len(in)%2 == 1}
		out, err := Docker(in, o)
		if err != nil {
			return
		}
		var orig, got map[string]any
		if err := json.Unmarshal(in, &orig); err != nil {
			if len(bytes.TrimSpace(in)) == 0 {
				return
			}
			t.Fatalf("accepted input that is not a JSON object: %v", err)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("result is not JSON: %v\n%q", err, out)
		}
		rts, _ := got["runtimes"].(map[string]any)
		if vg, _ := rts[RuntimeName].(map[string]any); vg == nil || vg["path"] != o.RuntimePath {
			t.Fatalf("runtime missing: %q", out)
		}
		for k := range orig {
			if k != "runtimes" && k != "default-runtime" {
				a, _ := json.Marshal(orig[k])
				b, _ := json.Marshal(got[k])
				if !bytes.Equal(a, b) {
					t.Fatalf("%q changed: %s -> %s", k, a, b)
				}
			}
		}
		again, err := Docker(out, o)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("second run: %v\n%q\n%q", err, out, again)
		}
		back, err := Docker(out, DockerOptions{Remove: true})
		if err != nil {
			t.Fatalf("remove: %v", err)
		}
		v, err := hujson.Parse(in)
		if err != nil {
			t.Fatalf("hujson.Parse of accepted input: %v", err)
		}
		root := v.Value.(*hujson.Object)
		count := map[string]int{}
		for _, m := range root.Members {
			count[m.Name.Value.(hujson.Literal).String()]++
		}
		onlyOurs := !o.Default && len(root.Members) > 0 && count["default-runtime"] == 0
		if i := memberIndex(root, "runtimes"); i >= 0 {
			rt, ok := root.Members[i].Value.Value.(*hujson.Object)
			onlyOurs = onlyOurs && ok && len(rt.Members) > 0 && memberIndex(rt, RuntimeName) < 0
		}
		for _, n := range count {
			if n > 1 {
				onlyOurs = false
			}
		}
		if onlyOurs && !bytes.Equal(back, in) {
			t.Fatalf("remove did not restore:\n%q\n%q\n%q", in, out, back)
		}
	})
}

// FuzzContainerd: config.toml is outside input, with the same properties.
func FuzzContainerd(f *testing.F) {
	addSeeds(f, "containerd", "toml")
	f.Add([]byte("version = 2\n[plugins]\n"))
	f.Add([]byte("version = 3\n# c\n"))
	f.Add([]byte("version = 2\nimports = [\"/a.toml\"]\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.vgpu]\nruntime_type = 1\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 1<<16 {
			return
		}
		o := ContainerdOptions{RuntimePath: "/usr/local/bin/vgpu-runtime", Default: len(in)%2 == 1}
		out, dropIn, err := Containerd(in, testDropIn, o)
		if err != nil {
			return
		}
		if _, err := parseTOMLDoc(out); err != nil {
			t.Fatalf("config.toml does not parse: %v\n%q", err, out)
		}
		di, err := parseTOMLDoc(dropIn)
		if err != nil {
			t.Fatalf("drop-in does not parse: %v\n%q", err, dropIn)
		}
		v, _ := configVersion(di)
		rt, err := ContainerdRuntimePath(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := lookup(di, append(rt, "options", "BinaryName")...); got != o.RuntimePath {
			t.Fatalf("BinaryName %v in %q", got, dropIn)
		}
		if list, _, _, _, _ := importsOf(out); !slices.ContainsFunc(list, func(p string) bool { m, _ := filepath.Match(p, testDropIn); return m }) {
			t.Fatalf("imports %v do not name the drop-in:\n%q", list, out)
		}
		again, again2, err := Containerd(out, testDropIn, o)
		if err != nil || !bytes.Equal(again, out) || !bytes.Equal(again2, dropIn) {
			t.Fatalf("second run: %v\n%q\n%q", err, out, again)
		}
		back, _, err := Containerd(out, testDropIn, ContainerdOptions{Remove: true})
		if err != nil {
			t.Fatalf("remove: %v\n%q", err, out)
		}
		if _, err := parseTOMLDoc(back); err != nil {
			t.Fatalf("after remove: %v\n%q", err, back)
		}
		if id, _ := parseTOMLDoc(in); len(id) > 0 && !bytes.Equal(back, in) {
			if list, _, _, _, _ := importsOf(in); !slices.Contains(list, testDropIn) {
				t.Fatalf("remove did not restore:\n%q\n%q\n%q", in, out, back)
			}
		}
	})
}
