//go:build integration

package cudahook_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The files of the CUDA stand-in call each other in layers, without a circle
// and never up a layer of README.md's table: read from the built objects
// (nm), so a call added anywhere is seen.
func TestNoCallCircleBetweenFiles(t *testing.T) {
	objs, err := filepath.Glob(filepath.Join(buildDir(t), "cudahook", "obj", "cuda", "*.o"))
	if err != nil || len(objs) < 10 {
		t.Fatalf("objects of the CUDA stand-in: %v (%d found; make c-build)", err, len(objs))
	}
	defined := map[string]string{}
	used := map[string][]string{}
	for _, o := range objs {
		file := strings.TrimSuffix(filepath.Base(o), ".o")
		if !hasSource(file) {
			continue // left in the build directory by a file since removed
		}
		out, err := exec.Command("nm", o).Output()
		if err != nil {
			t.Fatalf("nm %s: %v", o, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && strings.ContainsAny(f[1], "TDBR"):
				defined[f[2]] = file
			case len(f) == 2 && f[0] == "U":
				used[file] = append(used[file], f[1])
			}
		}
	}
	calls := map[string]map[string]bool{}
	for file, syms := range used {
		for _, s := range syms {
			if d, ok := defined[s]; ok && d != file {
				if calls[file] == nil {
					calls[file] = map[string]bool{}
				}
				calls[file][d] = true
			}
		}
	}
	// and no call (or use of a variable) goes to a higher layer of
	// README.md's table: what the includes promise, seen in the objects
	if readme, err := os.ReadFile("README.md"); err != nil {
		t.Fatal(err)
	} else if layerOf, names, err := parseLayerTable(string(readme)); err != nil {
		t.Fatal(err)
	} else {
		for f, to := range calls {
			for g := range to {
				lf, okf := layerOf[f+".c"]
				lg, okg := layerOf[g+".c"]
				if okf && okg && lg > lf {
					t.Errorf("%s.c (%s) calls up into %s.c (%s): call down, or register (README.md)", f, names[lf], g, names[lg])
				}
			}
		}
	}
	state := map[string]int{} // 1 on the path, 2 done
	var path []string
	var visit func(f string)
	visit = func(f string) {
		state[f] = 1
		path = append(path, f)
		var next []string
		for g := range calls[f] {
			next = append(next, g)
		}
		sort.Strings(next)
		for _, g := range next {
			switch state[g] {
			case 1:
				i := 0
				for path[i] != g {
					i++
				}
				t.Errorf("a circle of calls: %s -> %s", strings.Join(path[i:], " -> "), g)
			case 0:
				visit(g)
			}
		}
		path = path[:len(path)-1]
		state[f] = 2
	}
	var files []string
	for f := range calls {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if state[f] == 0 {
			visit(f)
		}
	}
}

// hasSource: the object's source is still in src/ (.c, or .S for the assembly).
func hasSource(file string) bool {
	for _, ext := range []string{".c", ".S"} {
		if _, err := os.Stat(filepath.Join("src", file+ext)); err == nil {
			return true
		}
	}
	return false
}
