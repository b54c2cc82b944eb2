package shim

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/runtimelog"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

func writeState(t *testing.T, stateDir, id string, info tenant.Record) {
	t.Helper()
	dir := filepath.Join(stateDir, id)
	if err := os.MkdirAll(filepath.Join(dir, config.StateShared), 0o755); err != nil {
		t.Fatal(err)
	}
	q := &quota.File{DriverCuda: "/x/libcuda.so.1", DriverNvml: "/x/libnvidia-ml.so.1", SharedDir: "/run/vgpu/shared",
		Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000000"}, Compute: 100}}}
	qb, err := q.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.StateQuota), qb, 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(info)
	if err := os.WriteFile(filepath.Join(dir, config.StateInfo), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRecordInitPID(t *testing.T) {
	stateDir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "init.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	writeState(t, stateDir, "c1", tenant.Record{ID: "c1", PIDFile: pidFile})
	var errb bytes.Buffer
	logPath := filepath.Join(t.TempDir(), "log")
	log := &runtimelog.Logger{Stderr: &errb, Path: logPath}
	recordInitPID(stateDir, "c1", log)
	info, err := state.Read(stateDir, "c1")
	if err != nil || len(info.PIDs) != 1 || info.PIDs[0] != os.Getpid() {
		t.Fatalf("pids %v (%v), want [%d]", info.PIDs, err, os.Getpid())
	}
	// the init named for good (pid and start time) and its cgroup, which
	// the container's processes cannot leave
	st, _ := procinfo.StatOf("", os.Getpid())
	cg, _ := procinfo.CgroupOf("", os.Getpid())
	if info.InitStart != st.Start || info.InitStart == 0 || info.Cgroup != cg.Path() || info.Cgroup == "" {
		t.Errorf("recorded start %d cgroup %q, want %d %q", info.InitStart, info.Cgroup, st.Start, cg.Path())
	}
	// nothing to do, never a failure: not ours, no pid file, a bad pid file
	recordInitPID(stateDir, "not-ours", log)
	writeState(t, stateDir, "c2", tenant.Record{ID: "c2"})
	recordInitPID(stateDir, "c2", log)
	if b, _ := os.ReadFile(logPath); len(b) != 0 || errb.Len() != 0 {
		t.Errorf("messages for containers with nothing to record: %s %s", b, errb.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.pid")
	if err := os.WriteFile(bad, []byte("not a pid"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeState(t, stateDir, "c3", tenant.Record{ID: "c3", PIDFile: bad})
	recordInitPID(stateDir, "c3", log)
	logged, _ := os.ReadFile(logPath)
	if info, _ := state.Read(stateDir, "c3"); len(info.PIDs) != 0 || !bytes.Contains(logged, []byte("not a pid")) || errb.Len() != 0 {
		t.Errorf("bad pid file: pids %v, log %q, stderr %q", info.PIDs, logged, errb.String())
	}
	// an id that leaves the state directory records nothing where it points
	outside := filepath.Dir(stateDir)
	writeState(t, outside, "escape", tenant.Record{ID: "escape", PIDFile: pidFile})
	recordInitPID(stateDir, "../escape", log)
	if info, err := state.Read(outside, "escape"); err != nil || len(info.PIDs) != 0 || info.Cgroup != "" {
		t.Errorf("id ../escape: recorded %+v (%v) outside the state directory", info, err)
	}
}
