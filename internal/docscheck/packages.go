package docscheck

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The package map: docs/design.md names every Go package of the repository
// (the main module's: a directory with its own go.mod is another module)
// in its package tables, and no package that does not exist. A package
// added, moved or removed without its line in the map fails make
// docs-check, so the map a newcomer reads first stays whole.

// DesignPath is the page holding the package map.
const DesignPath = "docs/design.md"

// The two tables' headers: host packages named relative to internal/, the
// others relative to the repository root.
const (
	hostTableHeader  = "| package | concern |"
	otherTableHeader = "| other package | concern |"
)

// PackageProblem is a package the map lacks, or a name in the map that is
// no package.
type PackageProblem struct {
	Package string
	Line    int // in DesignPath; 0 for a package the map lacks
}

func (p PackageProblem) Error() string {
	if p.Line == 0 {
		return fmt.Sprintf("%s: the package map lacks %s: add a row naming it and its one concern (its package comment says it)", DesignPath, p.Package)
	}
	return fmt.Sprintf("%s:%d: the package map names %s, which is no Go package of the repository: correct or remove the row", DesignPath, p.Line, p.Package)
}

// GoPackages returns the directories under root that hold .go files,
// relative to root with slashes, sorted; build outputs, testdata and other
// modules are not the repository's packages.
func GoPackages(root string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "vendor", "build", "node_modules", "testdata":
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// MappedPackages returns the packages the map names, each with its line:
// the first cell of every row of the tables headed hostTableHeader (names
// relative to internal/) and otherTableHeader (relative to the root); a
// cell may name several, separated by commas.
func MappedPackages(root string) (map[string]int, error) {
	f, err := os.Open(filepath.Join(root, DesignPath))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int{}
	prefix := "" // inside a map table: what its names are relative to
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == hostTableHeader:
			prefix = "internal/"
			continue
		case line == otherTableHeader:
			prefix = "."
			continue
		case !strings.HasPrefix(line, "|"):
			prefix = ""
			continue
		case prefix == "" || strings.HasPrefix(line, "| ---"):
			continue
		}
		cell := strings.SplitN(strings.Trim(line, "|"), "|", 2)[0]
		for _, name := range strings.Split(cell, ",") {
			name = strings.Trim(strings.TrimSpace(name), "`")
			if name == "" {
				continue
			}
			if prefix != "." {
				name = prefix + name
			}
			out[name] = n
		}
	}
	return out, sc.Err()
}

// CheckPackageMap returns the packages the map lacks (sorted), then the
// names in the map that are no package (in line order).
func CheckPackageMap(root string) ([]PackageProblem, error) {
	pkgs, err := GoPackages(root)
	if err != nil {
		return nil, fmt.Errorf("docs-check: %w", err)
	}
	mapped, err := MappedPackages(root)
	if err != nil {
		return nil, fmt.Errorf("docs-check: %w", err)
	}
	var out []PackageProblem
	have := map[string]bool{}
	for _, p := range pkgs {
		have[p] = true
		if _, ok := mapped[p]; !ok {
			out = append(out, PackageProblem{Package: p})
		}
	}
	var extra []PackageProblem
	for name, line := range mapped {
		if !have[name] {
			extra = append(extra, PackageProblem{Package: name, Line: line})
		}
	}
	sort.Slice(extra, func(i, j int) bool {
		return extra[i].Line < extra[j].Line || extra[i].Line == extra[j].Line && extra[i].Package < extra[j].Package
	})
	return append(out, extra...), nil
}
