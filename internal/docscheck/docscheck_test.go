package docscheck

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// repo lays out a repository root with the given files.
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, text := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const results = "| claim | figure |\n| --- | --- |\n| kill | **0.646 s** after crossing |\n| start | +3.9 ms, floor +2.9 ms; 1.04× |\n| build | 640 s; 23 min 15 s |\n"

// The case the table exists for: a page quotes a figure that disagrees with
// the table (0.65 s where the measurement is 0.646 s).
func TestCheckFailsOnAFigureTheTableLacks(t *testing.T) {
	root := repo(t, map[string]string{
		ResultsPath:    results,
		"README.md":    "# vgpu\n\nA bypass was killed\n0.65 s after crossing its limit.\n",
		"docs/node.md": "Killed 0.646 s after crossing ([results](results.md)).\n",
	})
	probs, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []Problem{{File: "README.md", Line: 4, Figure: Figure{"0.65", "s"}}}
	if !reflect.DeepEqual(probs, want) {
		t.Fatalf("problems = %+v, want %+v", probs, want)
	}
	msg := probs[0].Error()
	for _, s := range []string{"README.md:4", `"0.65 s"`, ResultsPath, "add its row"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}
}

func TestCheckPassesWhenEveryFigureIsHeld(t *testing.T) {
	root := repo(t, map[string]string{
		ResultsPath: results,
		"README.md": "Pass-through +3.9 ms (the floor 2.9 ms), p99 1.04× native; a cold build 640 s.\n",
		// The archive is history: its figures are not checked.
		"docs/archive/gpu-runs.md": "killed 0.679 s after crossing\n",
	})
	probs, err := Check(root)
	if err != nil || len(probs) != 0 {
		t.Fatalf("Check = %+v, %v; want no problems", probs, err)
	}
}

func TestCheckNeedsTheResultsTable(t *testing.T) {
	root := repo(t, map[string]string{"README.md": "hello\n"})
	if _, err := Check(root); err == nil || !strings.Contains(err.Error(), ResultsPath) {
		t.Fatalf("Check without %s: err = %v", ResultsPath, err)
	}
}

func TestMeasured(t *testing.T) {
	for _, c := range []struct {
		text string
		want []string // the measured figures found
	}{
		// Decimals, ratios, measurement-only units, seconds >= 100.
		{"0.646 s, 24.9 %, 1.04×, 19.1 GiB, 3.5 points, 12.7 ms", []string{"0.646 s", "24.9 %", "1.04 ×", "19.1 GiB", "3.5 points", "12.7 ms"}},
		{"45 min wall clock, 1950 MHz at 700 W, 640 s, 2127 s", []string{"45 min", "1950 MHz", "700 W", "640 s", "2127 s"}},
		{"+3.9 ms and −2.5 ms, 30 µs vs 0.5 us", []string{"3.9 ms", "2.5 ms", "0.5 µs"}},
		// Contract values: whole numbers with other units.
		{"limit + 128 MiB + 2 % for 500 ms, every 10 s, 25 %, 99 s", nil},
		// Not figures: versions, words, code, links, comments.
		{"runc v1.2.6 s, go1.26 s, 5 seconds, 3.5 mins", nil},
		{"run `sleep 0.5 s` or ``a ` 1.5 s``", nil},
		{"see [2.5 GiB](results.md#1.5-s) <!-- 9.9 ms -->", []string{"2.5 GiB"}},
		{"```\nkilled 0.679 s after\n```\nand 7.5 %\n", []string{"7.5 %"}},
		{"~~~~\n1.5 s\n~~~\n2.5 s\n~~~~\n3.5 s", []string{"3.5 s"}},
		// An unclosed backtick is text; a span does not cross a paragraph.
		{"a ` 1.5 s\n\nb ` 2.5 s", []string{"1.5 s", "2.5 s"}},
		{"x `y\nz 1.5 s` w", nil},
	} {
		var got []string
		for _, f := range Figures(c.text, true) {
			if f.Measured() {
				got = append(got, f.String())
			}
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: measured %q, want %q", c.text, got, c.want)
		}
	}
}

func TestLinesStayTrue(t *testing.T) {
	text := "one\n```\ntwo 1.5 s\n```\n`three\n4.5 s` four\nfive 6.5 s\n"
	f := Figures(text, true)
	if len(f) != 1 || f[0].Line != 7 {
		t.Fatalf("figures %+v, want 6.5 s on line 7", f)
	}
}

func FuzzFigures(f *testing.F) {
	f.Add("a 0.646 s b `c 1.5 s` ```\n2 s\n``` [x](y 3.5 s) <!-- 1.2 W")
	f.Fuzz(func(t *testing.T, text string) {
		p := Prose(text)
		if strings.Count(p, "\n") != strings.Count(text, "\n") {
			t.Fatalf("Prose changed the line count of %q", text)
		}
		for _, fig := range Figures(text, true) {
			if fig.Line < 1 || fig.Line > strings.Count(text, "\n")+1 {
				t.Fatalf("line %d out of range in %q", fig.Line, text)
			}
		}
	})
}
