package docscheck

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestCheckPackageMapBothWays(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module x\n")
	for _, p := range []string{"internal/a/a.go", "internal/b/c/c.go", "internal/d/d_test.go", "cmd/x/main.go", "test/e/e_test.go", "lib/l/l.go"} {
		write(p, "package p\n")
	}
	write("internal/a/testdata/t.go", "package t\n") // test data, no package
	write("build/gen/g.go", "package g\n")           // build output
	write("tools/go.mod", "module tools\n")          // another module
	write("tools/cmd/t/main.go", "package main\n")   // ... its packages are not ours
	write("docs/design.md", "# Design\n\n"+
		"| package | concern |\n| --- | --- |\n| a | one |\n| `b/c`, gone | two, then a name that is no package |\n\n"+
		"Prose | with a bar is no row.\n\n"+
		"| other package | concern |\n| --- | --- |\n| cmd/x | the command |\n| test/e | tests |\n| internal/a | listed twice is fine |\n\n"+
		"| piece | where |\n| --- | --- |\n| lib/l | another table's first cell is not the map |\n")
	got, err := CheckPackageMap(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []PackageProblem{{Package: "internal/d"}, {Package: "lib/l"}, {Package: "internal/gone", Line: 6}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// The repository's own map is whole: docs/design.md names every package.
func TestDesignPackageMapIsWhole(t *testing.T) {
	probs, err := CheckPackageMap(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Error(p)
	}
}
