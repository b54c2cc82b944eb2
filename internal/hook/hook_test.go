package hook

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func i64(v int64) *int64 { return &v }

func TestDeniedDevices(t *testing.T) {
	devs := []specs.LinuxDevice{{Path: "/dev/nvidia0", Type: "c", Major: 60, Minor: 0}, {Path: "/dev/nvidiactl", Type: "c", Major: 60, Minor: 255}}
	podmanDefault := []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}, {Allow: true, Type: "c", Major: i64(1), Minor: i64(3), Access: "rwm"}}
	if d := DeniedDevices(podmanDefault, devs); len(d) != 2 {
		t.Errorf("default rules: %v", d)
	}
	withOne := append(podmanDefault, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: i64(60), Minor: i64(0), Access: "rwm"})
	if d := DeniedDevices(withOne, devs); len(d) != 1 || d[0].Minor != 255 {
		t.Errorf("one allowed: %v", d)
	}
	all := append(withOne, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: i64(60), Access: "rw"})
	if d := DeniedDevices(all, devs); len(d) != 0 {
		t.Errorf("major allowed: %v", d)
	}
	readOnly := append(podmanDefault, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: i64(60), Access: "r"})
	if d := DeniedDevices(readOnly, devs); len(d) != 2 {
		t.Errorf("read-only counts as denied: %v", d)
	}
}

func TestBadInput(t *testing.T) {
	if Main([]string{"createContainer"}, strings.NewReader("not json"), &strings.Builder{}) == 0 {
		t.Error("bad state accepted")
	}
	if Main(nil, strings.NewReader("{}"), &strings.Builder{}) == 0 {
		t.Error("no stage accepted")
	}
}
