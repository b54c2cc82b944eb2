package setup

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
)

// shippedDefaults are the containerd versions whose `containerd config
// default` output, verbatim, is in testdata/containerd-default (SOURCES
// there says which build gave each): one per supported line, 1.6 and 1.7
// (config version 2) and 2.x (version 3 tables; 2.4 writes version 4).
var shippedDefaults = []string{"1.6", "1.7", "2.4"}

// A user whose config.toml is what their containerd ships runs vgpu setup
// containerd: the configuration containerd then reads (config.toml with the
// drop-in imported, merged as that version merges imports) still runs pods
// on the shipped default runtime, keeps every other shipped CRI setting,
// and has the vgpu runtime class (the default one with --default).
func TestContainerdShippedDefaults(t *testing.T) {
	for _, version := range shippedDefaults {
		in, err := os.ReadFile(filepath.Join("testdata", "containerd-default", version+".toml"))
		if err != nil {
			t.Fatalf("containerd %s's default config: %v", version, err)
		}
		shipped, err := parseTOMLDoc(in)
		if err != nil {
			t.Fatalf("containerd %s's default config: %v", version, err)
		}
		for _, def := range []bool{false, true} {
			t.Run(version+map[bool]string{false: "", true: "/default"}[def], func(t *testing.T) {
				config, dropIn, err := Containerd(in, testDropIn, ContainerdOptions{RuntimePath: runtimePath, Default: def})
				if err != nil {
					t.Fatal(err)
				}
				main, err := parseTOMLDoc(config)
				if err != nil {
					t.Fatal(err)
				}
				di, err := parseTOMLDoc(dropIn)
				if err != nil {
					t.Fatal(err)
				}
				v, _ := configVersion(shipped)
				cri, err := criPlugin(v)
				if err != nil {
					t.Fatal(err)
				}
				// containerd 2.x's default imports conf.d/*.toml already.
				imports, _ := main["imports"].([]any)
				if !slices.ContainsFunc(imports, func(i any) bool {
					ok, _ := filepath.Match(i.(string), testDropIn)
					return ok
				}) {
					t.Fatalf("config.toml's imports %v do not take the drop-in %s", imports, testDropIn)
				}
				merged := mergeImported(v, main, di)

				ctrdPath := []string{"plugins", cri, "containerd"}
				shippedCtrd, _ := lookup(shipped, ctrdPath...).(map[string]any)
				got, _ := lookup(merged, ctrdPath...).(map[string]any)
				if shippedCtrd == nil || got == nil {
					t.Fatalf("no [plugins.%q.containerd] in the shipped (%v) or the merged config (%v)", cri, shippedCtrd != nil, got != nil)
				}
				shippedDefault, _ := shippedCtrd["default_runtime_name"].(string)
				if shippedDefault == "" {
					t.Fatalf("containerd %s's default config names no default_runtime_name", version)
				}
				runtimes, _ := got["runtimes"].(map[string]any)
				shippedRuntimes, _ := shippedCtrd["runtimes"].(map[string]any)
				if !reflect.DeepEqual(runtimes[shippedDefault], shippedRuntimes[shippedDefault]) {
					t.Errorf("the default runtime %q is not containerd %s's any more:\nshipped %v\nmerged  %v", shippedDefault, version, shippedRuntimes[shippedDefault], runtimes[shippedDefault])
				}
				wantDefault := shippedDefault
				if def {
					wantDefault = RuntimeName
				}
				if got["default_runtime_name"] != wantDefault {
					t.Errorf("default_runtime_name = %v, want %q", got["default_runtime_name"], wantDefault)
				}
				if name, _ := got["default_runtime_name"].(string); runtimes[name] == nil {
					t.Errorf("default_runtime_name %q names no runtime (runtimes: %v): the CRI plugin would not load", name, slices.Sorted(maps.Keys(runtimes)))
				}
				vgpu, _ := runtimes[RuntimeName].(map[string]any)
				if vgpu["runtime_type"] != RuncShim || lookup(vgpu, "options", "BinaryName") != runtimePath {
					t.Errorf("the vgpu runtime class is %v, want runtime_type %s with BinaryName %s", vgpu, RuncShim, runtimePath)
				}
				// Nothing else of the shipped configuration changed: the
				// merged config less the vgpu runtime (and the default it
				// sets) and less the drop-in's import is the shipped one.
				delete(runtimes, RuntimeName)
				if def {
					got["default_runtime_name"] = shippedDefault
				}
				if imports, ok := merged["imports"].([]any); ok {
					merged["imports"] = slices.DeleteFunc(imports, func(i any) bool { return i == testDropIn })
				}
				if !reflect.DeepEqual(merged, shipped) {
					t.Errorf("the merged config differs from containerd %s's beyond the vgpu runtime:\n%s", version,
						UnifiedDiff("shipped", "merged", mustTOML(t, shipped), mustTOML(t, merged), 3))
				}
			})
		}
	}
}

// mergeImported is the configuration containerd reads from main with one
// imported file: containerd 1.x (config version 2) takes each plugin's
// section of the imported file whole in place of main's, containerd 2.x
// merges the two, a table into a table, an array's new elements appended
// (services/server/config.mergeConfig of each).
func mergeImported(version int64, main, imported map[string]any) map[string]any {
	out := maps.Clone(main)
	for k, v := range imported {
		if k != "plugins" || version >= 3 {
			out[k] = mergeValue(out[k], v)
			continue
		}
		plugins, _ := out["plugins"].(map[string]any)
		plugins = maps.Clone(plugins)
		if plugins == nil {
			plugins = map[string]any{}
		}
		for name, section := range v.(map[string]any) {
			plugins[name] = section
		}
		out["plugins"] = plugins
	}
	return out
}

func mergeValue(to, from any) any {
	switch f := from.(type) {
	case map[string]any:
		t, ok := to.(map[string]any)
		if !ok {
			return f
		}
		out := maps.Clone(t)
		for k, v := range f {
			out[k] = mergeValue(out[k], v)
		}
		return out
	case []any:
		t, _ := to.([]any)
		out := slices.Clone(t)
		for _, e := range f {
			if !slices.ContainsFunc(out, func(x any) bool { return reflect.DeepEqual(x, e) }) {
				out = append(out, e)
			}
		}
		return out
	}
	return from
}

func mustTOML(t *testing.T, doc map[string]any) []byte {
	t.Helper()
	b, err := toml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
