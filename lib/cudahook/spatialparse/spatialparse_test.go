package spatialparse

import (
	"strconv"
	"strings"
	"testing"
)

// plain is the rule in Go: 1..100 written plainly (digits, no leading zero).
func plain(v string) (int, bool) {
	if v == "" || v[0] == '0' || len(v) > 3 {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, _ := strconv.Atoi(v)
	return n, n >= 1 && n <= 100
}

// A tenant's percentage, whatever it is, never yields more than its share,
// and what the library puts in is always accepted by its own check; a pipe
// directory other than the quota's never is.
func FuzzTenantEnv(f *testing.F) {
	for _, s := range []string{"", "0", "50", "100", "020", "20.5", " 20", "-1", "1000", "20x", "1e2", "\x00"} {
		f.Add(50, s, "/run/vgpu/mps")
	}
	f.Add(1, "1", "/run/vgpu/mps/")
	f.Add(100, "100", "")
	f.Fuzz(func(t *testing.T, share int, cur, pipe string) {
		if share < 1 || share > 100 || strings.ContainsRune(cur+pipe, 0) {
			return // the host writes 1..100; an environment holds no NUL
		}
		got := Pct(share, &cur)
		want := share
		if n, ok := plain(cur); ok && n <= share {
			want = n
		}
		if got != want || got < 1 || got > share {
			t.Fatalf("Pct(%d, %q) = %d, want %d", share, cur, got, want)
		}
		put := strconv.Itoa(got)
		q := "/run/vgpu/mps"
		if !EnvOK(share, &q, &put) {
			t.Fatalf("EnvOK refuses what Pct put: %q at share %d", put, share)
		}
		if ok := EnvOK(share, &pipe, &put); ok != (pipe == q) {
			t.Fatalf("EnvOK(pipe %q) = %v", pipe, ok)
		}
		if n, ok := plain(cur); EnvOK(share, &q, &cur) != (ok && n <= share) {
			t.Fatalf("EnvOK(pct %q) at share %d", cur, share)
		}
		if EnvOK(share, nil, &put) || EnvOK(share, &q, nil) {
			t.Fatal("unset variables accepted")
		}
	})
}
