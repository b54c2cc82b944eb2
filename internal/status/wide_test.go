package status

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// A docker container (64-character id) with a memory limit on one GPU and
// a compute limit on another: every line fits 120 columns; --wide shows the
// whole id and UUIDs.
func TestStatusFits120Columns(t *testing.T) {
	f := newFixture(t)
	id := "3f4e5d6c7b8a93f4e5d6c7b8a93f4e5d6c7b8a93f4e5d6c7b8a93f4e5d6c7b8a"
	f.container(id, &tenant.Record{ID: id, Name: "web", Created: time.Now().Add(-time.Hour).UTC()}, quotaOf(2*gib, 4*gib))
	text := func(wide bool) string {
		r := Collect(Options{StateDir: f.state, ProcRoot: f.proc})
		r.Wide = wide
		var b bytes.Buffer
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	s := text(false)
	for _, line := range strings.Split(s, "\n") {
		if n := utf8.RuneCountInString(line); n > 120 {
			t.Errorf("%d columns: %q", n, line)
		}
	}
	if !strings.Contains(s, "CONTAINER 3f4e5d6c7b8a  name web") || !strings.Contains(s, "GPU-5e3b6a2e…") {
		t.Errorf("short ids:\n%s", s)
	}
	if w := text(true); !strings.Contains(w, "CONTAINER "+id) || !strings.Contains(w, "GPU-5e3b6a2e-0000-4000-8000-000000000001") {
		t.Errorf("--wide:\n%s", w)
	}
}
