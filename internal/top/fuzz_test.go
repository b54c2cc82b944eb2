package top

import (
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// Names come from tenants (the container's, the pod's): whatever they
// hold, a frame keeps one line per row and no escape code of theirs
// reaches the terminal.
func FuzzFrameNames(f *testing.F) {
	f.Add("train", "ml", "train-0", "main", "detail")
	f.Add("\x1b[2J\x1b[H", "a\nb", "\r", "\u202e", "x\x1b]0;owned\x07")
	f.Add(strings.Repeat("é", 300), "", " ", "\"", "\n")
	f.Fuzz(func(t *testing.T, name, ns, pod, ctr, detail string) {
		share, duty := 41.0, 0.4
		r := &status.Report{StateDir: "/s", Time: time.Unix(0, 0), HostEnforcement: status.HostEnforcement{On: true},
			Containers: []status.Container{{ID: "c1", Name: name, Pod: &events.Pod{Namespace: ns, Name: pod, Container: ctr},
				Devices:     []status.Device{{UUID: "GPU-1", MemoryLimit: 1 << 30, MemoryUsed: 2 << 30, ComputeLimit: 25, NodeShare: &share, ThrottleDuty: &duty}},
				Enforcement: []events.Event{{Kind: "thaw", Container: "c1", GPU: "GPU-1", Detail: detail}, {Kind: name, Container: "c1", Detail: detail}}}}}
		for _, styled := range []bool{false, true} {
			out := Frame(r, View{Loc: time.UTC, Styled: styled})
			plain := out
			if styled {
				plain = stripANSI(out)
			}
			if strings.Contains(plain, "\x1b") || strings.ContainsAny(plain, "\r\a") {
				t.Fatalf("a control character of a name reached the frame:\n%q", out)
			}
			want := strings.Count(Frame(&status.Report{StateDir: "/s", Time: time.Unix(0, 0), HostEnforcement: status.HostEnforcement{On: true},
				Containers: []status.Container{{ID: "c1", Name: "n", Pod: &events.Pod{Namespace: "a", Name: "b", Container: "c"},
					Devices:     r.Containers[0].Devices,
					Enforcement: []events.Event{{Kind: "thaw", Container: "c1", GPU: "GPU-1", Detail: "d"}, {Kind: "n", Container: "c1", Detail: "d"}}}}}, View{Loc: time.UTC}), "\n")
			if got := strings.Count(plain, "\n"); got != want {
				t.Fatalf("%d lines, want %d: a name broke a line:\n%s", got, want, plain)
			}
		}
	})
}
