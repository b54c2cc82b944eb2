// Package docscheck keeps measured figures in one place: README.md and
// docs/*.md may state a measured figure only if docs/results.md holds it, so
// a figure is measured, dated and given its command once, and a page that
// quotes an old figure fails `make docs-check` instead of going stale.
//
// A measured figure is a number followed by a unit, in prose: outside fenced
// code blocks, inline code spans, HTML comments and link targets, where
//   - the number has a decimal fraction (0.646 s, 24.9 %, 1.04×, 19.1 GiB), or
//   - the unit is one that only measurements carry (min, h, MHz, GHz, W,
//     TFLOP/s), or
//   - the unit is seconds and the number is 100 or more (640 s).
//
// Units: % ms µs us ns s min h KiB MiB GiB TiB kB KB MB GB TB MHz GHz W ×
// points TFLOP/s, with or without a space before them. Whole numbers with
// other units (500 ms, 128 MiB, 10 s, 25 %) are contract values (limits,
// periods, defaults) and are not checked. docs/results.md holds a figure
// when the same number and unit occur anywhere in it; a leading sign is
// ignored (+3.9 ms is held by 3.9 ms). Pages in docs/ subdirectories (the
// archive) are history and are not read.
package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ResultsPath is the one results table, relative to the repository root.
const ResultsPath = "docs/results.md"

// figureRE finds a number and a unit; Figures then drops those whose number
// follows a letter, digit, dot or underscore (v1.2.6, go1.26, x86_64) or
// whose unit runs on into a word (5 seconds, 3 mins).
var figureRE = regexp.MustCompile(`([+\-−]?)(\d+(?:\.\d+)?)[ \x{00A0}\x{2009}\x{202F}]?` +
	`(TFLOP/s|points|KiB|MiB|GiB|TiB|MHz|GHz|min|ms|µs|us|ns|kB|KB|MB|GB|TB|%|×|s|h|W)`)

func wordChar(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// Figure is a number and its unit as written, the sign dropped and the unit
// spelled one way.
type Figure struct {
	Number string
	Unit   string
}

func (f Figure) String() string { return f.Number + " " + f.Unit }

// measuredOnly: units no contract value carries.
var measuredOnly = map[string]bool{"min": true, "h": true, "MHz": true, "GHz": true, "W": true, "TFLOP/s": true}

// Measured says whether f is a measured figure by the package's rule.
func (f Figure) Measured() bool {
	if strings.Contains(f.Number, ".") || measuredOnly[f.Unit] {
		return true
	}
	if f.Unit == "s" {
		n, err := strconv.Atoi(f.Number)
		return err == nil && n >= 100
	}
	return false
}

func canonUnit(u string) string {
	switch u {
	case "us":
		return "µs"
	case "KB":
		return "kB"
	}
	return u
}

// Found is a figure and the line it is on (1-based).
type Found struct {
	Figure
	Line int
}

// Figures returns every number-and-unit in text, in order, measured or not.
// With prose set, code blocks, code spans, HTML comments and link targets
// are left out.
func Figures(text string, prose bool) []Found {
	if prose {
		text = Prose(text)
	}
	var out []Found
	for _, m := range figureRE.FindAllStringSubmatchIndex(text, -1) {
		if before, _ := utf8.DecodeLastRuneInString(text[:m[0]]); m[0] > 0 && (wordChar(before) || before == '.' || before == '_') {
			continue
		}
		if after, _ := utf8.DecodeRuneInString(text[m[1]:]); m[1] < len(text) && wordChar(after) {
			continue
		}
		num := text[m[4]:m[5]]
		unit := canonUnit(text[m[6]:m[7]])
		out = append(out, Found{Figure{num, unit}, 1 + strings.Count(text[:m[4]], "\n")})
	}
	return out
}

var (
	fenceRE   = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	commentRE = regexp.MustCompile(`(?s)<!--.*?-->`)
	// A link's target: ](...) with no spaces inside, and bare URLs.
	linkRE = regexp.MustCompile(`\]\([^)\s]*\)|https?://\S+`)
)

// Prose returns text with everything that is not prose (fenced code blocks,
// inline code spans, HTML comments, link targets) blanked out, newlines kept
// so that line numbers stay true.
func Prose(text string) string {
	b := []byte(text)
	blank := func(i, j int) {
		for k := i; k < j; k++ {
			if b[k] != '\n' {
				b[k] = ' '
			}
		}
	}
	// Fenced code blocks: from a fence to the closing fence of the same
	// character and at least the same length, or to the end.
	off := 0
	var fence string
	start := 0
	for _, line := range strings.SplitAfter(text, "\n") {
		if fence == "" {
			if m := fenceRE.FindStringSubmatch(line); m != nil {
				fence, start = m[1], off
			}
		} else if m := fenceRE.FindStringSubmatch(line); m != nil && m[1][0] == fence[0] &&
			len(m[1]) >= len(fence) && strings.TrimSpace(line[strings.Index(line, m[1])+len(m[1]):]) == "" {
			blank(start, off+len(line))
			fence = ""
		}
		off += len(line)
	}
	if fence != "" {
		blank(start, len(b))
	}
	for _, m := range commentRE.FindAllIndex(b, -1) {
		blank(m[0], m[1])
	}
	blankCodeSpans(b, blank)
	for _, m := range linkRE.FindAllIndex(b, -1) {
		blank(m[0], m[1])
	}
	return string(b)
}

// blankCodeSpans blanks inline code: a run of backticks up to the next run of
// the same length, within one paragraph (a span does not cross a blank line).
// An unmatched run is literal text.
func blankCodeSpans(b []byte, blank func(i, j int)) {
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(b) && b[j] == '`' {
			j++
		}
		n := j - i
		end := -1
		for k := j; k < len(b); {
			if b[k] == '\n' && k+1 < len(b) && strings.TrimSpace(lineAt(b, k+1)) == "" {
				break
			}
			if b[k] != '`' {
				k++
				continue
			}
			e := k
			for e < len(b) && b[e] == '`' {
				e++
			}
			if e-k == n {
				end = e
				break
			}
			k = e
		}
		if end < 0 {
			i = j
			continue
		}
		blank(i, end)
		i = end
	}
}

func lineAt(b []byte, i int) string {
	j := i
	for j < len(b) && b[j] != '\n' {
		j++
	}
	return string(b[i:j])
}

// Problem is a measured figure a page states that the results table lacks.
type Problem struct {
	File string
	Line int
	Figure
}

func (p Problem) Error() string {
	return fmt.Sprintf("%s:%d: %q is a measured figure that %s does not hold: add its row there (claim, figure, date, command) and link the row instead of quoting it, or write it as code if it is example output",
		p.File, p.Line, p.Figure.String(), ResultsPath)
}

// Check reads README.md and docs/*.md under root and returns the measured
// figures they state that docs/results.md does not hold, in file order. An
// error is returned only when the files cannot be read.
func Check(root string) ([]Problem, error) {
	res, err := os.ReadFile(filepath.Join(root, ResultsPath))
	if err != nil {
		return nil, fmt.Errorf("docs-check: the results table: %w", err)
	}
	held := map[Figure]bool{}
	for _, f := range Figures(string(res), false) {
		held[f.Figure] = true
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(pages)
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	var probs []Problem
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		if filepath.ToSlash(rel) == ResultsPath {
			continue
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("docs-check: %w", err)
		}
		for _, f := range Figures(string(text), true) {
			if f.Measured() && !held[f.Figure] {
				probs = append(probs, Problem{filepath.ToSlash(rel), f.Line, f.Figure})
			}
		}
	}
	return probs, nil
}
