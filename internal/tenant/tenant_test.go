package tenant

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/procinfo"
)

// The mode is written as container.json has had it since the spatial mode
// came: the boolean "spatial", left out when time sliced, so that every
// earlier record reads and a record of this release reads in the last.
func TestModeOnDisk(t *testing.T) {
	for _, c := range []struct {
		mode Mode
		json string
	}{{TimeSliced, `{"index":0,"gpu":{"index":0,"uuid":"GPU-1","name":"","minor":0,"memoryBytes":0}}`},
		{Spatial, `{"index":0,"gpu":{"index":0,"uuid":"GPU-1","name":"","minor":0,"memoryBytes":0},"spatial":true,"mpsPipe":"/p"}`}} {
		d := Device{GPU: GPU{UUID: "GPU-1"}, Mode: c.mode}
		if c.mode == Spatial {
			d.MPSPipe = "/p"
		}
		b, err := json.Marshal(d)
		if err != nil || string(b) != c.json {
			t.Errorf("%v written as %s (%v), want %s", c.mode, b, err, c.json)
		}
		var back Device
		if err := json.Unmarshal(b, &back); err != nil || back.Mode != c.mode {
			t.Errorf("%s read as %v (%v)", b, back.Mode, err)
		}
	}
	var d Device
	if err := json.Unmarshal([]byte(`{"spatial":"yes"}`), &d); err == nil || !strings.Contains(err.Error(), "spatial") {
		t.Errorf(`"spatial":"yes" read without an error naming the field: %v`, err)
	}
}

// A spatial device is not paced, whatever its limit, and asks for the MPS
// client environment; a time-sliced one below 100 % is paced and asks
// for none.
func TestModeRules(t *testing.T) {
	r := 30
	timed := Device{Index: 0, Compute: 100, ComputeRequest: &r, Memory: 3 << 20}
	spatial := Device{Index: 1, Compute: 40, Memory: 3 << 20, Mode: Spatial, MPSPipe: "/run/vgpu/mps"}
	if !timed.Paced() || timed.Request() != 30 || timed.Env() != nil {
		t.Errorf("time sliced, request 30: paced %v request %d env %v", timed.Paced(), timed.Request(), timed.Env())
	}
	want := []string{"CUDA_MPS_PIPE_DIRECTORY=/run/vgpu/mps", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=3M"}
	if spatial.Paced() || strings.Join(spatial.Env(), " ") != strings.Join(want, " ") {
		t.Errorf("spatial at 40 %%: paced %v env %v, want not paced and %v", spatial.Paced(), spatial.Env(), want)
	}
	if (Device{Compute: 100}).Paced() {
		t.Error("no limit, no request: paced")
	}
}

// The ledger counts a tenant from its record on, started or not, and
// leaves one out once its recorded init died: a pid that is gone, or one
// that names another process than the start time recorded.
func TestLedgerLiveness(t *testing.T) {
	proc := t.TempDir()
	self, err := procinfo.StatOf("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(proc, "100"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "100", "stat"), stat, 0o644); err != nil {
		t.Fatal(err)
	}
	dev := []Device{{GPU: GPU{UUID: "GPU-1"}, Compute: 50}}
	recs := []*Record{
		{ID: "created", Devices: dev}, // not started: holds
		{ID: "claim", Devices: dev},   // a DRA claim: holds
		{ID: "running", Devices: dev, PIDs: []int{100}, InitStart: self.Start},    // holds
		{ID: "running-v0", Devices: dev, PIDs: []int{100}},                        // no start recorded: by pid
		{ID: "exited", Devices: dev, PIDs: []int{200}},                            // pid gone
		{ID: "reused", Devices: dev, PIDs: []int{100}, InitStart: self.Start + 1}, // pid names another process
		{ID: "pidfile", Devices: dev, PIDFile: filepath.Join(proc, "gone.pid")},   // run --detach, its init gone
	}
	if err := os.WriteFile(filepath.Join(proc, "gone.pid"), []byte(strconv.Itoa(300)), 0o644); err != nil {
		t.Fatal(err)
	}
	l := NewLedger(recs, proc)
	var got []string
	for _, h := range l.On("GPU-1") {
		got = append(got, h.Record.ID)
	}
	if want := "created claim running running-v0"; strings.Join(got, " ") != want {
		t.Errorf("holders of GPU-1: %v, want %s", got, want)
	}
	if len(l.On("GPU-2")) != 0 || len(l.GPUs()) != 1 {
		t.Errorf("GPUs held: %v", l.GPUs())
	}
}

// A tenant's places follow from the state directory and the id alone.
func TestPlaces(t *testing.T) {
	p := PlacesOf("/run/vgpu/containers", "c1")
	for got, want := range map[string]string{
		p.Record(): "/run/vgpu/containers/c1/container.json", p.Quota(): "/run/vgpu/containers/c1/quota",
		p.Region(): "/run/vgpu/containers/c1/shared/vgpu.region", p.ShareFile(): "/run/vgpu/containers/c1/host/grant",
	} {
		if got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
}

// A priority reads back as written, a record without one is normal, and a
// word it does not know is refused.
func TestPriorityRoundTrip(t *testing.T) {
	for _, p := range []Priority{High, Normal, Low} {
		b, err := json.Marshal(Device{Priority: p})
		if err != nil {
			t.Fatal(err)
		}
		var d Device
		if err := json.Unmarshal(b, &d); err != nil || d.Priority != p {
			t.Errorf("%s: %s read back as %s (%v)", p, b, d.Priority, err)
		}
	}
	var d Device
	if err := json.Unmarshal([]byte(`{"index":0}`), &d); err != nil || d.Priority != Normal {
		t.Errorf("no priority: %s, %v", d.Priority, err)
	}
	if _, err := ParsePriority("urgent"); err == nil {
		t.Error("urgent accepted")
	}
	if !High.Above(Normal) || !Normal.Above(Low) || Low.Above(Normal) || Normal.Above(Normal) {
		t.Error("order")
	}
}
