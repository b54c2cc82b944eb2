package docscheck

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCheckTestsNamesOnlyDeclaredTests(t *testing.T) {
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
	write("README.md", "Shown by `TestThere` and `FuzzThere`.\n")
	write("docs/security.md", "a\nHolds (`TestGone`, internal/x; `TestThere`).\n`TestHelper` is a word, `Testing` is not a test.\n")
	write("internal/x/x_test.go", "package x\n\nfunc TestThere(t *testing.T) {}\nfunc FuzzThere(f *testing.F) {}\nfunc helper() {}\n")
	write("build/y_test.go", "package y\n\nfunc TestGone(t *testing.T) {}\n") // build outputs do not count
	got, err := CheckTests(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []MissingTest{{"docs/security.md", 2, "TestGone"}, {"docs/security.md", 3, "TestHelper"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("problem %d: %v, want %v", i, got[i], want[i])
		}
	}
}
