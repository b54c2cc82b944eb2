package dra

import (
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
)

const classNone = `{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "coresLimit": "none"}`

func TestParseClassConfig(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{classNone, ""},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "coresLimit": "request"}`, ""},
		{`{"apiVersion": "vgpu.io/v2", "kind": "ClassConfig", "coresLimit": "none"}`, `apiVersion "vgpu.io/v2"`},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "coresLimit": "none", "computeLimit": 100}`, `unknown field "computeLimit"`},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig"}`, `none of coresLimit, memoryLimit and priority`},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "priority": "high"}`, ""},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "coresLimit": "none", "priority": "low"}`, ""},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "priority": "urgent"}`, `priority "urgent": use "high", "normal" or "low"`},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "priority": 1}`, `want {`},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "memoryLimit": "none"}`, ""},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "coresLimit": "none", "memoryLimit": "32Gi"}`, ""},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "memoryLimit": "request"}`, ""},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "memoryLimit": "lots"}`, `memoryLimit "lots"`},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "memoryLimit": "0"}`, `memoryLimit "0"`},
		{`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "memoryLimit": 32}`, `want {`},
		{classNone + classNone, "more than one JSON object"},
		{``, "want {"},
	} {
		_, err := ParseClassConfig([]byte(tc.in))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}

// Opaque parameters are the API server's objects, written by whoever may
// write a DeviceClass: what parses is a known policy, and parsing never
// panics.
func FuzzParseClassConfig(f *testing.F) {
	for _, s := range []string{classNone, `{"apiVersion":"vgpu.io/v1","kind":"ClassConfig","coresLimit":"request"}`, `{}`, `[]`, `null`, `{"coresLimit":1}`, `{"apiVersion":"vgpu.io/v1","kind":"ClassConfig","memoryLimit":"8Gi"}`, `{"apiVersion":"vgpu.io/v1","kind":"ClassConfig","priority":"high"}`, `{"apiVersion":"vgpu.io/v1","kind":"ClassConfig","priority":"HIGH"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseClassConfig(b)
		if err != nil {
			return
		}
		_, merr := config.MemoryLimitSize(c.MemoryLimit)
		if c.CoresLimit != "" && c.CoresLimit != config.CoresLimitRequest && c.CoresLimit != config.CoresLimitNone ||
			merr != nil || c.CoresLimit == "" && c.MemoryLimit == "" && c.Priority == "" ||
			c.Priority != "" && c.Priority != "high" && c.Priority != "normal" && c.Priority != "low" {
			t.Fatalf("%q parsed to %+v", b, c)
		}
	})
}
