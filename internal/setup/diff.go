package setup

import (
	"bytes"
	"fmt"
	"strings"
)

// UnifiedDiff returns the unified diff (diff -u) of a and b with ctx lines
// of context, "" when they are equal. Lines are compared exactly; a last line
// without a newline is marked as diff marks it.
func UnifiedDiff(fromName, toName string, a, b []byte, ctx int) string {
	if bytes.Equal(a, b) {
		return ""
	}
	x, y := splitLines(a), splitLines(b)
	ops := diffLines(x, y)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", fromName, toName)
	// Group the ops into hunks: runs of changes with ctx equal lines around.
	type op struct {
		kind byte // ' ', '-', '+'
		line string
		ai   int // index in x (for ' ' and '-'); for '+', lines of x before it
		bi   int
	}
	var all []op
	i, j := 0, 0
	for _, k := range ops {
		switch k {
		case ' ':
			all = append(all, op{' ', x[i], i, j})
			i++
			j++
		case '-':
			all = append(all, op{'-', x[i], i, j})
			i++
		case '+':
			all = append(all, op{'+', y[j], i, j})
			j++
		}
	}
	n := len(all)
	for start := 0; start < n; {
		// Find the next change.
		c := start
		for c < n && all[c].kind == ' ' {
			c++
		}
		if c == n {
			break
		}
		lo := c - ctx
		if lo < start {
			lo = start
		}
		if lo < 0 {
			lo = 0
		}
		// Extend while the gap between changes is at most 2*ctx.
		hi := c
		for {
			e := hi
			for e < n && all[e].kind != ' ' {
				e++
			}
			g := e
			for g < n && all[g].kind == ' ' {
				g++
			}
			if g < n && g-e <= 2*ctx {
				hi = g
				continue
			}
			hi = e + ctx
			if hi > n {
				hi = n
			}
			break
		}
		var aStart, aLen, bStart, bLen int
		aStart, bStart = all[lo].ai, all[lo].bi
		for _, o := range all[lo:hi] {
			if o.kind != '+' {
				aLen++
			}
			if o.kind != '-' {
				bLen++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		for _, o := range all[lo:hi] {
			out.WriteByte(o.kind)
			out.WriteString(o.line)
			if !strings.HasSuffix(o.line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		start = hi
	}
	return out.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits after each newline; the last line may lack one.
func splitLines(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, string(b))
			break
		}
		out = append(out, string(b[:i+1]))
		b = b[i+1:]
	}
	return out
}

// diffLines returns an edit script (' ' keep, '-' delete from x, '+' insert
// from y) of minimal length, by longest common subsequence. Common prefix and
// suffix are taken out first; configuration files are small.
func diffLines(x, y []string) []byte {
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	mx, my := x[pre:len(x)-suf], y[pre:len(y)-suf]
	var ops []byte
	for k := 0; k < pre; k++ {
		ops = append(ops, ' ')
	}
	if len(mx)*len(my) > 16<<20 {
		// Too large for the table: replace the middle wholesale.
		for range mx {
			ops = append(ops, '-')
		}
		for range my {
			ops = append(ops, '+')
		}
	} else {
		// lcs[i][j] = LCS length of mx[i:], my[j:].
		w := len(my) + 1
		lcs := make([]int32, (len(mx)+1)*w)
		for i := len(mx) - 1; i >= 0; i-- {
			for j := len(my) - 1; j >= 0; j-- {
				if mx[i] == my[j] {
					lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
				} else if a, b := lcs[(i+1)*w+j], lcs[i*w+j+1]; a >= b {
					lcs[i*w+j] = a
				} else {
					lcs[i*w+j] = b
				}
			}
		}
		i, j := 0, 0
		for i < len(mx) || j < len(my) {
			switch {
			case i < len(mx) && j < len(my) && mx[i] == my[j]:
				ops = append(ops, ' ')
				i++
				j++
			case j < len(my) && (i == len(mx) || lcs[i*w+j+1] >= lcs[(i+1)*w+j]):
				if i < len(mx) && lcs[i*w+j+1] == lcs[(i+1)*w+j] {
					// Prefer deleting first so that '-' lines come before '+'.
					ops = append(ops, '-')
					i++
					continue
				}
				ops = append(ops, '+')
				j++
			default:
				ops = append(ops, '-')
				i++
			}
		}
	}
	for k := 0; k < suf; k++ {
		ops = append(ops, ' ')
	}
	return ops
}
