package state

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/slots"
	"github.com/vgpu-dev/vgpu/internal/state/statetest"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// A container created by the previous release stays readable, keeps its
// slot, takes its init pid and is removed by this one.
func TestReadPreviousRelease(t *testing.T) {
	dir := statetest.PreviousRelease(t, "testdata/release-0.1.0")
	info, err := Read(dir, "old-release")
	if err != nil {
		t.Fatal(err)
	}
	q := quota.Render(info)
	if info.Version != 0 || info.Name != "web" || len(info.Devices) != 2 || info.Devices[0].Compute != 30 || info.Devices[1].Compute != 100 || info.Devices[0].Memory != 1<<30 {
		t.Errorf("container.json of 0.1.0 read as %+v", info)
	}
	if len(q.Devices) != 2 || q.Devices[0].Phase == nil || *q.Devices[0].Phase != 0 || q.Devices[1].Compute != 100 {
		t.Errorf("quota of 0.1.0 read as %+v", q)
	}
	// Its slot is taken for containers this release creates next to it.
	if got := Taken(dir, contract.DefaultPeriodMS)[q.Devices[0].GPU.UUID]; len(got) != 1 || got[0] != (slots.Slot{Start: 0, Width: 30}) {
		t.Errorf("slots of the old container: %v", got)
	}
	q2 := quota.File{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s", Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: q.Devices[0].GPU.UUID}, Compute: 50}}}
	written, err := Create(dir, FromQuota("new", &q2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ph := written.Devices[0].Phase; ph == nil || *ph != 30 {
		t.Errorf("a new 50 %% container next to the old 30 %% one got phase %v, want 30", ph)
	}
	// start records the pid without changing the file's version.
	if err := SetPIDs(dir, "old-release", []int{os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	if info, err := Read(dir, "old-release"); err != nil || info.Version != 0 || info.PIDs[0] != os.Getpid() {
		t.Errorf("after SetPIDs: %+v %v", info, err)
	}
	if err := Remove(dir, "old-release"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "old-release")); !os.IsNotExist(err) {
		t.Errorf("old container not removed: %v", err)
	}
}

func TestParseInfoNewer(t *testing.T) {
	if _, err := parseInfo([]byte(`{"version": 99, "id": "x"}`)); err == nil {
		t.Error("a container.json from a newer release was accepted")
	}
}

// The release before compute requests (quota format 1, container.json 1,
// region layout 3, no grant file): read, its slot of width 30 taken, its
// limit read as its request, and a request admitted beside it counts it.
func TestReadReleaseBeforeRequests(t *testing.T) {
	dir := statetest.PreviousRelease(t, "testdata/release-7429073")
	info, err := Read(dir, "prev-release")
	if err != nil {
		t.Fatal(err)
	}
	q := quota.Render(info)
	if info.Version != 1 || info.Name != "web" || q.Devices[0].Request() != 30 || q.Devices[0].ComputeRequest != nil || q.Devices[1].Paced() {
		t.Errorf("read as %+v, %+v", info, q)
	}
	if got := Taken(dir, contract.DefaultPeriodMS)[q.Devices[0].GPU.UUID]; len(got) != 1 || got[0] != (slots.Slot{Start: 0, Width: 30}) {
		t.Errorf("slots of the old container: %v", got)
	}
	r := 70
	q2 := quota.File{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s", Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: q.Devices[0].GPU.UUID}, Compute: 100, ComputeRequest: &r}}}
	written, err := Create(dir, FromQuota("new", &q2), nil)
	if err != nil {
		t.Fatalf("a request of 70 beside the old limit-only 30: %v", err)
	}
	if ph := written.Devices[0].Phase; ph == nil || *ph != 30 {
		t.Errorf("phase %v, want 30", ph)
	}
	r = 1
	q2.Devices[0].ComputeRequest = &r
	if _, err := Create(dir, FromQuota("third", &q2), nil); err != nil {
		t.Errorf("the old container's limit is not an explicit request: %v", err)
	}
}

// The release that made container.json the whole record (version 2): read
// from container.json alone, its quota file is what the record renders
// byte for byte, it keeps its version when the init is recorded, and
// its slot (width from its grant file) is taken while that init lives.
func TestReadRecordVersion2(t *testing.T) {
	dir := statetest.PreviousRelease(t, "testdata/record-2")
	info, err := Read(dir, "cur-release")
	if err != nil {
		t.Fatal(err)
	}
	d := info.Devices
	if info.Version != 2 || info.Name != "web" || info.Cgroup != "/system.slice/cur-release" || len(d) != 2 ||
		d[0].GPU.Name != "NVIDIA H200 (simulated)" || d[0].Memory != 1<<30 || d[0].MemoryRequest != 512<<20 ||
		d[0].Request() != 20 || d[0].Phase == nil || *d[0].Phase != 0 || d[1].Paced() || info.PeriodMS() != 100 {
		t.Errorf("read as %+v", info)
	}
	want, _ := os.ReadFile(filepath.Join(dir, "cur-release", config.StateQuota))
	if got, err := quota.Render(info).Marshal(); err != nil || string(got) != string(want) {
		t.Errorf("quota rendered from the record:\n%s(%v)\nwant the file written with it:\n%s", got, err, want)
	}
	// The quota file is not read: the record alone is the container.
	os.Remove(filepath.Join(dir, "cur-release", config.StateQuota))
	if _, err := Read(dir, "cur-release"); err != nil {
		t.Errorf("without its quota file: %v", err)
	}
	// Its recorded init (pid 1, start time 1) is not this host's pid 1: it
	// died, so the container holds no slot (the ledger's liveness rule).
	if got := Taken(dir, 100)[d[0].GPU.UUID]; len(got) != 0 {
		t.Errorf("slots of a container whose init died: %v", got)
	}
	st, err := procinfo.StatOf("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := SetInit(dir, "cur-release", os.Getpid(), st.Start, "/x"); err != nil {
		t.Fatal(err)
	}
	if info, err := Read(dir, "cur-release"); err != nil || info.Version != 2 || info.PIDs[0] != os.Getpid() || info.Cgroup != "/system.slice/cur-release" {
		t.Errorf("after SetInit: %+v %v", info, err)
	}
	if got := Taken(dir, 100)[d[0].GPU.UUID]; len(got) != 1 || got[0] != (slots.Slot{Start: 0, Width: 20}) {
		t.Errorf("slots of the container: %v", got)
	}
	if err := Remove(dir, "cur-release"); err != nil {
		t.Fatal(err)
	}
}
