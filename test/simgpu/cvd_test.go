//go:build integration

package simgpu_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// CUDA_VISIBLE_DEVICES as the real driver reads it: indices and GPU UUIDs
// (or unique prefixes) relative to the devices the process can reach, in the
// order given; the list stops at the first entry that names no reachable
// device; an empty value leaves no device (cuInit: CUDA_ERROR_NO_DEVICE).
// NVML does not read it.
func TestCudaVisibleDevices(t *testing.T) {
	const uuidD = "GPU-dddddddd-0000-4000-8000-000000000003"
	r := newRoot(t, simroot.Options{Devices: []simroot.Device{
		{Name: "NVIDIA A (simulated)"}, {Name: "NVIDIA B (simulated)"},
		{Name: "NVIDIA C (simulated)"}, {Name: "NVIDIA D (simulated)", UUID: uuidD},
	}})
	// as in a container given physical GPUs 1 and 3: the others' nodes are absent
	for _, i := range []int{0, 2} {
		if err := os.Remove(r.NodePath(i)); err != nil {
			t.Fatal(err)
		}
	}
	uuidB := simroot.DefaultUUID(1)
	for _, tc := range []struct {
		cvd  *string
		want string // device names in ordinal order; "" = no device
	}{
		{nil, "B D"},
		{cvd("0,1"), "B D"},
		{cvd("1,0"), "D B"},
		{cvd("1"), "D"},
		{cvd(uuidD + "," + uuidB), "D B"},
		{cvd(uuidD), "D"},
		{cvd("GPU-dddd,0"), "D B"},                // a unique prefix
		{cvd("0,2,1"), "B"},                       // 2 is not reachable here: the list stops
		{cvd("1," + simroot.DefaultUUID(2)), "D"}, // the UUID of an unreachable GPU stops it too
		{cvd("GPU-5e3b6a2e"), "B"},                // also A's and C's prefix, but they are not reachable
		{cvd("GPU-,0"), ""},                       // ambiguous prefix: the list stops before it
		{cvd(simroot.DefaultUUID(0)), ""},
		{cvd("-1"), ""},
		{cvd(""), ""},
	} {
		name := "unset"
		var env []string
		if tc.cvd != nil {
			name = strconv.Quote(*tc.cvd)
			env = []string{"CUDA_VISIBLE_DEVICES=" + *tc.cvd}
		}
		t.Run(name, func(t *testing.T) {
			outp := runChild(t, r, "enumerate", env...)
			if tc.want == "" {
				if got := field(t, outp, "INIT"); got != strconv.Itoa(errNoDevice) {
					t.Errorf("cuInit %s, want CUDA_ERROR_NO_DEVICE:\n%s", got, outp)
				}
				return
			}
			if got := field(t, outp, "INIT"); got != "0" {
				t.Fatalf("cuInit %s:\n%s", got, outp)
			}
			want := strings.Fields(tc.want)
			if got := field(t, outp, "COUNT"); got != strconv.Itoa(len(want)) {
				t.Fatalf("count %s, want %d:\n%s", got, len(want), outp)
			}
			uuids := map[string]string{"B": uuidB, "D": uuidD}
			for i, w := range want {
				if got, exp := field(t, outp, "DEV "+strconv.Itoa(i)), "NVIDIA "+w+" (simulated) "+uuids[w]; got != exp {
					t.Errorf("ordinal %d: %q, want %q", i, got, exp)
				}
			}
		})
	}
	// NVML ignores CUDA_VISIBLE_DEVICES: both reachable GPUs, in order
	outp := runChild(t, r, "go-nvml", "CUDA_VISIBLE_DEVICES=1")
	if field(t, outp, "COUNT") != "2" || !strings.Contains(field(t, outp, "DEV 0"), uuidB) || !strings.Contains(field(t, outp, "DEV 1"), uuidD) {
		t.Errorf("NVML under CUDA_VISIBLE_DEVICES=1: want B and D:\n%s", outp)
	}
}

func cvd(s string) *string { return &s }
