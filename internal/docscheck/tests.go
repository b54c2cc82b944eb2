package docscheck

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A doc that names a test as its proof names one that exists: every inline
// code span of README.md and docs/*.md (results.md included) that is a test,
// fuzz or benchmark function's name alone (`TestX`, `FuzzY`) must be a func
// declared in some _test.go file of the repository. A renamed or removed
// test then fails make docs-check instead of leaving a claim with no proof.

var (
	testSpanRE = regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Z0-9_][A-Za-z0-9_]*)`")
	testFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Z0-9_][A-Za-z0-9_]*)\(`)
)

// MissingTest is a test a page names that no _test.go file declares.
type MissingTest struct {
	File string
	Line int
	Name string
}

func (m MissingTest) Error() string {
	return fmt.Sprintf("%s:%d: names the test %s, which no _test.go file declares: name the test that shows the claim, or change the sentence", m.File, m.Line, m.Name)
}

// TestFuncs returns the test, fuzz and benchmark functions declared in the
// _test.go files under root (vendor, .git and build directories skipped).
func TestFuncs(root string) (map[string]bool, error) {
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "vendor", "build", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range testFuncRE.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	return names, err
}

// CheckTests returns the tests README.md and docs/*.md name that do not
// exist, in file order.
func CheckTests(root string) ([]MissingTest, error) {
	have, err := TestFuncs(root)
	if err != nil {
		return nil, fmt.Errorf("docs-check: %w", err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(pages)
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	var out []MissingTest
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		text, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("docs-check: %w", err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			for _, m := range testSpanRE.FindAllStringSubmatch(line, -1) {
				if !have[m[1]] {
					out = append(out, MissingTest{filepath.ToSlash(rel), i + 1, m[1]})
				}
			}
		}
	}
	return out, nil
}
