package cudahook_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The layer table of README.md ("Layout and layers") is what the sources
// do: every file of src/ is in it once, and a file includes the header of
// a file (x.h of x.c) only on its own layer or below. Headers of no file
// (cuda_hooks.h, vgpu.h, ...) declare what every layer shares. Read from
// the sources, so it needs no build and runs in the unit tier.
func TestLayerTable(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	layerOf, names, err := parseLayerTable(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := filepath.Glob("src/*.c")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("sources: %v (%d)", err, len(srcs))
	}
	have := map[string]bool{}
	for _, src := range srcs {
		have[filepath.Base(src)] = true
	}
	for f := range layerOf {
		if !have[f] {
			t.Errorf("README.md's layer table names %s, which src/ does not have", f)
		}
	}
	for _, src := range srcs {
		f := filepath.Base(src)
		l, ok := layerOf[f]
		if !ok {
			t.Errorf("%s is in no layer of README.md's table: add it to the layer of its concern", f)
			continue
		}
		incs, err := includes(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range incs {
			c := strings.TrimSuffix(h, ".h") + ".c"
			if hl, ok := layerOf[c]; ok && hl > l {
				t.Errorf("%s (%s) includes %s of %s (%s), a higher layer: call down, or register (README.md)",
					f, names[l], h, c, names[hl])
			}
		}
	}
}

// parseLayerTable: the file -> layer (0 the lowest) of the table under
// "## Layout and layers", and the layers' names by number. A row with an
// empty first cell continues the layer above it; files are the names in
// backquotes ending in .c.
func parseLayerTable(readme string) (map[string]int, []string, error) {
	_, rest, ok := strings.Cut(readme, "\n## Layout and layers\n")
	if !ok {
		return nil, nil, fmt.Errorf("README.md has no section \"## Layout and layers\"")
	}
	file := regexp.MustCompile("`([a-z0-9_]+\\.c)`")
	var names []string
	var rows [][]string // files per layer, from the top
	sc := bufio.NewScanner(strings.NewReader(rest))
	in := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			if in {
				break
			}
			continue
		}
		in = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			return nil, nil, fmt.Errorf("layer table row %q: want | layer | files | concern |", line)
		}
		layer := strings.TrimSpace(cells[0])
		if layer == "layer" || strings.Trim(layer, "- ") == "" && strings.Contains(layer, "-") {
			continue // the header and the separator
		}
		if layer != "" {
			names = append(names, layer)
			rows = append(rows, nil)
		}
		if len(rows) == 0 {
			return nil, nil, fmt.Errorf("layer table row %q continues no layer", line)
		}
		for _, m := range file.FindAllStringSubmatch(cells[1], -1) {
			rows[len(rows)-1] = append(rows[len(rows)-1], m[1])
		}
	}
	if len(rows) < 2 {
		return nil, nil, fmt.Errorf("README.md's layer table has %d layers", len(rows))
	}
	layerOf := map[string]int{}
	byNumber := make([]string, len(names))
	for i, fs := range rows {
		n := len(rows) - 1 - i
		byNumber[n] = names[i]
		for _, f := range fs {
			if _, dup := layerOf[f]; dup {
				return nil, nil, fmt.Errorf("%s is in README.md's layer table twice", f)
			}
			layerOf[f] = n
		}
	}
	return layerOf, byNumber, nil
}

var includeLine = regexp.MustCompile(`^\s*#\s*include\s+"([^"]+)"`)

// includes are the headers src names with #include "...", sorted.
func includes(src string) ([]string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if m := includeLine.FindStringSubmatch(l); m != nil {
			out = append(out, m[1])
		}
	}
	sort.Strings(out)
	return out, nil
}
