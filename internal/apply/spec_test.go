package apply

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/spec"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

func testPlan() *plan.Plan {
	return &plan.Plan{
		ContainerID: "c1",
		Devices:     []tenant.Device{{Index: 0}},
		Nodes: []discover.DeviceNode{
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, FileMode: 0o666},
			{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0, FileMode: 0o666},
		},
		Mounts: []plan.Mount{
			{Source: "/host/lib/libnvidia-ml.so.580.1", Destination: "/usr/lib/vgpu/driver/libnvidia-ml.so.580.1", ReadOnly: true},
			{Source: "/state/c1/shared", Destination: tenant.ContainerShared, Dir: true},
		},
		Env: []string{"VGPU_A=1", "VGPU_B=x=y"},
	}
}

func parseSpec(t *testing.T, doc string) *spec.Spec {
	t.Helper()
	s, err := spec.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Spec gives the container every node with an rwm rule, the mounts with the
// plan's options, the env (a value may hold '='), and marks the spec.
func TestSpecEditsEverything(t *testing.T) {
	s := parseSpec(t, `{"process":{"env":["PATH=/bin","VGPU_A=old"]},"linux":{}}`)
	p := testPlan()
	p.Hooks = []plan.PlanHook{{Stage: "createRuntime", Hook: specs.Hook{Path: "/bin/vgpu-hook"}}}
	if err := Spec(p, s); err != nil {
		t.Fatal(err)
	}
	devs, err := s.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[1].Path != "/dev/nvidia0" || devs[1].Major != 195 || devs[1].Minor != 0 || *devs[1].FileMode != 0o666 {
		t.Errorf("devices %+v", devs)
	}
	rules, err := s.DeviceRules()
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || !rules[0].Allow || rules[0].Access != "rwm" || *rules[0].Major != 195 || *rules[0].Minor != 255 {
		t.Errorf("rules %+v", rules)
	}
	if err := CheckDeviceRules(p, rules); err != nil {
		t.Errorf("the rules Spec wrote do not allow the plan's nodes: %v", err)
	}
	env := s.Env()
	for _, want := range []string{"PATH=/bin", "VGPU_A=1", "VGPU_B=x=y"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %q lacks %q", env, want)
		}
	}
	if slices.Contains(env, "VGPU_A=old") {
		t.Errorf("env %q keeps the old VGPU_A", env)
	}
	ms, err := s.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Type != "bind" || !slices.Contains(ms[0].Options, "ro") || slices.Contains(ms[1].Options, "ro") {
		t.Errorf("mounts %+v", ms)
	}
	if got := s.Annotations()[spec.InjectedAnnotation]; got != "c1" {
		t.Errorf("injected annotation %q, want the container id", got)
	}
	if !bytes.Contains(s.Bytes(), []byte(`"/bin/vgpu-hook"`)) {
		t.Errorf("hook not in spec: %s", s.Bytes())
	}
}

// A node the spec already has with the host's numbers is not added twice,
// but still gets its rule; one with other numbers is refused, naming the
// path and both numbers, and the spec is left as it was.
func TestSpecExistingNodes(t *testing.T) {
	same := parseSpec(t, `{"linux":{"devices":[{"path":"/dev/nvidia0","type":"c","major":195,"minor":0}]}}`)
	if err := Spec(testPlan(), same); err != nil {
		t.Fatal(err)
	}
	devs, _ := same.Devices()
	n := 0
	for _, d := range devs {
		if d.Path == "/dev/nvidia0" {
			n++
		}
	}
	if n != 1 || len(devs) != 2 {
		t.Errorf("devices %+v: want /dev/nvidia0 once, and nvidiactl added", devs)
	}
	rules, _ := same.DeviceRules()
	if len(rules) != 2 {
		t.Errorf("rules %+v: want one per node, the existing one included", rules)
	}

	doc := `{"linux":{"devices":[{"path":"/dev/nvidia0","type":"c","major":195,"minor":7}]}}`
	other := parseSpec(t, doc)
	err := Spec(testPlan(), other)
	if err == nil || !strings.Contains(err.Error(), "/dev/nvidia0 as c 195:7, the host's is c 195:0") {
		t.Fatalf("err %v, want the path and both numbers", err)
	}
	if other.Modified() || string(other.Bytes()) != doc {
		t.Errorf("refused spec changed: %s", other.Bytes())
	}
}

// A spec vgpu already edited is refused (twice injected would mount twice).
func TestSpecRefusesInjected(t *testing.T) {
	s := parseSpec(t, `{"annotations":{"`+spec.InjectedAnnotation+`":"c0"}}`)
	err := Spec(testPlan(), s)
	if err == nil || !strings.Contains(err.Error(), spec.InjectedAnnotation) || !strings.Contains(err.Error(), `"c0"`) {
		t.Fatalf("err %v, want the annotation and its value", err)
	}
	if s.Modified() {
		t.Error("refused spec changed")
	}
}

func TestCut(t *testing.T) {
	for _, c := range []struct{ in, k, v string }{{"A=1", "A", "1"}, {"A=x=y", "A", "x=y"}, {"A=", "A", ""}, {"A", "A", ""}} {
		if k, v, _ := cut(c.in); k != c.k || v != c.v {
			t.Errorf("cut(%q) = %q, %q; want %q, %q", c.in, k, v, c.k, c.v)
		}
	}
}

// SpecMounts carries every plan mount, as a bind with the plan's options.
func TestSpecMounts(t *testing.T) {
	p := testPlan()
	ms := SpecMounts(p)
	if len(ms) != len(p.Mounts) {
		t.Fatalf("%d mounts, want %d", len(ms), len(p.Mounts))
	}
	for i, m := range ms {
		if m.Source != p.Mounts[i].Source || m.Destination != p.Mounts[i].Destination || m.Type != "bind" ||
			!slices.Equal(m.Options, p.Mounts[i].Options()) {
			t.Errorf("mount %d: %+v from %+v", i, m, p.Mounts[i])
		}
	}
}

// The device rule check: last match wins, an omitted access means rwm, and
// a node missing from the rules is named with the flag that grants it.
func TestCheckDeviceRules(t *testing.T) {
	p := testPlan()
	i := func(v int64) *int64 { return &v }
	allowAll := specs.LinuxDeviceCgroup{Allow: true, Type: "a"}
	denyAll := specs.LinuxDeviceCgroup{Allow: false, Access: "rwm"}
	gpu := specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: i(195), Minor: i(0), Access: "rwm"}
	ctl := specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: i(195), Minor: i(255)}
	ctlRead := specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: i(195), Minor: i(255), Access: "r"}
	for _, c := range []struct {
		name    string
		rules   []specs.LinuxDeviceCgroup
		missing []string
	}{
		{"allow all", []specs.LinuxDeviceCgroup{allowAll}, nil},
		{"deny after allow", []specs.LinuxDeviceCgroup{allowAll, denyAll}, []string{"/dev/nvidiactl", "/dev/nvidia0"}},
		{"deny then both", []specs.LinuxDeviceCgroup{denyAll, gpu, ctl}, nil},
		{"gpu only", []specs.LinuxDeviceCgroup{denyAll, gpu}, []string{"/dev/nvidiactl"}},
		{"ctl read only", []specs.LinuxDeviceCgroup{denyAll, gpu, ctlRead}, []string{"/dev/nvidiactl"}},
		{"none", nil, []string{"/dev/nvidiactl", "/dev/nvidia0"}},
	} {
		err := CheckDeviceRules(p, c.rules)
		if (err == nil) != (c.missing == nil) {
			t.Errorf("%s: err %v, want missing %v", c.name, err, c.missing)
			continue
		}
		for _, m := range c.missing {
			if !strings.Contains(err.Error(), "--device "+m) {
				t.Errorf("%s: %v does not name --device %s", c.name, err, m)
			}
		}
		if err != nil && len(c.missing) == 1 && strings.Contains(err.Error(), "--device /dev/nvidia0") && c.missing[0] != "/dev/nvidia0" {
			t.Errorf("%s: %v names an allowed node", c.name, err)
		}
	}
}

// RootfsEdit refuses before touching the rootfs when the rules deny the
// nodes or More fails, and says why.
func TestRootfsEditRefuses(t *testing.T) {
	dir := t.TempDir()
	err := (&RootfsEdit{Rootfs: dir}).Apply(testPlan())
	if err == nil || !strings.Contains(err.Error(), "--device /dev/nvidia0") {
		t.Errorf("denied nodes: err %v", err)
	}
	more := errors.New("host mount differs")
	err = (&RootfsEdit{Rootfs: dir, Rules: []specs.LinuxDeviceCgroup{{Allow: true}}, More: func(*plan.Plan) error { return more }}).Apply(testPlan())
	if !errors.Is(err, more) {
		t.Errorf("More's error: got %v", err)
	}
}

// The shared tmpfs is capped in bytes and inodes and sticky.
func TestSharedFSData(t *testing.T) {
	if got, want := sharedFSData(), "size=4194304,nr_inodes=64,mode=1777"; got != want {
		t.Errorf("tmpfs data %q, want %q", got, want)
	}
}
