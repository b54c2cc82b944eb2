package shim

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/inject"
)

func writeState(t *testing.T, stateDir, id string, info inject.ContainerInfo) {
	t.Helper()
	dir := filepath.Join(stateDir, id)
	os.MkdirAll(filepath.Join(dir, inject.StateShared), 0o755)
	q := &inject.Quota{DriverCuda: "/x/libcuda.so.1", DriverNvml: "/x/libnvidia-ml.so.1", SharedDir: inject.ContainerShared,
		Devices: []inject.QuotaDevice{{Index: 0, UUID: "GPU-5e3b6a2e-0000-4000-8000-000000000000"}}}
	qb, err := q.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, inject.StateQuota), qb, 0o644)
	b, _ := json.Marshal(info)
	os.WriteFile(filepath.Join(dir, inject.StateContainer), b, 0o644)
}

func TestRecordInitPID(t *testing.T) {
	state := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "init.pid")
	os.WriteFile(pidFile, []byte("4242"), 0o644)
	writeState(t, state, "c1", inject.ContainerInfo{ID: "c1", PIDFile: pidFile})
	var errb bytes.Buffer
	logPath := filepath.Join(t.TempDir(), "log")
	log := &Logger{Stderr: &errb, Path: logPath}
	recordInitPID(state, "c1", log)
	info, _, err := inject.ReadState(state, "c1")
	if err != nil || len(info.PIDs) != 1 || info.PIDs[0] != 4242 {
		t.Fatalf("pids %v (%v), want [4242]", info.PIDs, err)
	}
	// nothing to do, never a failure: not ours, no pid file, a bad pid file
	recordInitPID(state, "not-ours", log)
	writeState(t, state, "c2", inject.ContainerInfo{ID: "c2"})
	recordInitPID(state, "c2", log)
	if b, _ := os.ReadFile(logPath); len(b) != 0 || errb.Len() != 0 {
		t.Errorf("messages for containers with nothing to record: %s %s", b, errb.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.pid")
	os.WriteFile(bad, []byte("not a pid"), 0o644)
	writeState(t, state, "c3", inject.ContainerInfo{ID: "c3", PIDFile: bad})
	recordInitPID(state, "c3", log)
	logged, _ := os.ReadFile(logPath)
	if info, _, _ := inject.ReadState(state, "c3"); len(info.PIDs) != 0 || !bytes.Contains(logged, []byte("not a pid")) || errb.Len() != 0 {
		t.Errorf("bad pid file: pids %v, log %q, stderr %q", info.PIDs, logged, errb.String())
	}
	recordInitPID(state, "../escape", log)
}

func TestContainerName(t *testing.T) {
	for _, c := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{"io.kubernetes.cri.container-name": "app", "io.kubernetes.cri.sandbox-name": "pod-1"}, "pod-1/app"},
		{map[string]string{"io.kubernetes.container.name": "app"}, "app"},
		{map[string]string{"nerdctl/name": "web"}, "web"},
		{nil, ""},
	} {
		if got := containerName(c.ann); got != c.want {
			t.Errorf("%v: %q, want %q", c.ann, got, c.want)
		}
	}
}
