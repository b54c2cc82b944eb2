package setup

import (
	udiff "github.com/aymanbagabas/go-udiff"
)

// UnifiedDiff returns the unified diff (diff -u) of a and b with ctx lines
// of context, "" when they are equal; a last line without a newline is
// marked as diff marks it.
func UnifiedDiff(fromName, toName string, a, b []byte, ctx int) string {
	out, err := udiff.ToUnified(fromName, toName, string(a), udiff.Lines(string(a), string(b)), ctx)
	if err != nil {
		panic("setup: diff: " + err.Error()) // the edits come from the same texts
	}
	return out
}
