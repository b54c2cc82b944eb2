package status

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// vgpu status shows a device's priority when it is not normal, in text and
// JSON; a normal device shows none (its JSON has no priority key).
func TestStatusShowsPriority(t *testing.T) {
	dir := t.TempDir()
	r30 := 30
	q := quota.File{DriverCuda: "/x", DriverNvml: "/y", SharedDir: "/run/vgpu/shared", Devices: []tenant.Device{
		{Index: 0, GPU: tenant.GPU{UUID: "GPU-1"}, Compute: 100, ComputeRequest: &r30, Priority: tenant.High},
		{Index: 1, GPU: tenant.GPU{UUID: "GPU-2"}, Compute: 100, Priority: tenant.Low},
		{Index: 2, GPU: tenant.GPU{UUID: "GPU-3"}, Compute: 100}}}
	if _, err := state.Create(dir, state.FromQuota("prio", &q), nil); err != nil {
		t.Fatal(err)
	}
	r := Collect(Options{StateDir: dir, ProcRoot: t.TempDir()})
	d := find(t, r, "prio").Devices
	if d[0].Priority != "high" || d[1].Priority != "low" || d[2].Priority != "" {
		t.Fatalf("priorities %q %q %q, want high, low and none", d[0].Priority, d[1].Priority, d[2].Priority)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, re := range []string{`(?m)^ *0 .* 30%, priority high `, `(?m)^ *1 .* priority low `} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("text does not match %s:\n%s", re, text)
		}
	}
	if strings.Count(text, "priority") != 2 {
		t.Errorf("text names a priority for the normal device:\n%s", text)
	}
	js, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(js), `"priority":"high"`) != 1 || strings.Count(string(js), `"priority"`) != 2 {
		t.Errorf("JSON: %s", js)
	}
}
