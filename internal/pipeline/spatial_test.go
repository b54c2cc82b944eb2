//go:build integration

package pipeline

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/mpsdir"
	"github.com/vgpu-dev/vgpu/internal/quota"
)

const spatialUUID = "GPU-5e3b6a2e-0000-4000-8000-000000000001"

// fakeDaemon makes the GPU's control daemon look alive: a pid file naming
// this process in its pipe directory.
func fakeDaemon(t *testing.T, cfg *config.Config, uuid string) {
	t.Helper()
	d := mpsdir.Of(cfg, uuid)
	if err := d.Prepare(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Pipe, mpsdir.PIDFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Creation on a spatial GPU: refused while its control daemon is not
// running; refused for a second user id and for a tenant of the other mode.
func TestRunSpatialAdmission(t *testing.T) {
	cfg := fakeRoot(t)
	cfg.Spatial.GPUs = []string{"1"}
	h := hostOf(t, cfg)
	u1000, u1001 := uint32(1000), uint32(1001)
	run := func(c *config.Config, id string, uid *uint32, env ...string) (*Result, error) {
		return Run(Input{Config: c, Host: h, ContainerID: id, Request: mustReq(t, env...), UID: uid})
	}
	if _, err := run(cfg, "a", &u1000, "VGPU_VISIBLE_DEVICES=1"); err == nil || !strings.Contains(err.Error(), "its MPS control daemon is not running") {
		t.Fatalf("no daemon: %v", err)
	}
	if ents := stateEntries(cfg.StateDir); len(ents) != 0 {
		t.Errorf("a refusal left state: %v", ents)
	}
	fakeDaemon(t, cfg, spatialUUID)
	res, err := run(cfg, "a", &u1000, "VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=40")
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Record.Devices[0]; !d.Mode.IsSpatial() || d.MPSPipe != contract.MPSPipeDir || d.Phase != nil {
		t.Errorf("quota as written: %+v", d)
	}
	if _, err := run(cfg, "b", &u1000, "VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=40"); err != nil {
		t.Errorf("same user: %v", err)
	}
	if _, err := run(cfg, "c", &u1001, "VGPU_VISIBLE_DEVICES=1"); err == nil || !strings.Contains(err.Error(), "container a runs on it as user 1000") || !strings.Contains(err.Error(), "runs as user 1001") {
		t.Errorf("second user: %v", err)
	}
	// the GPU taken out of spatial.gpus while a and b live
	timeCfg := *cfg
	timeCfg.Spatial.GPUs = nil
	if _, err := run(&timeCfg, "d", &u1000, "VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=40"); err == nil || !strings.Contains(err.Error(), "is time sliced (not in config spatial.gpus) but container a runs on it spatially") {
		t.Errorf("time tenant beside spatial ones: %v", err)
	}
	// and the other way round: a time-sliced tenant of GPU 0 before GPU 0 became spatial
	if _, err := run(&timeCfg, "e", &u1000, "VGPU_VISIBLE_DEVICES=0"); err != nil {
		t.Fatal(err)
	}
	both := *cfg
	both.Spatial.GPUs = []string{"0", "1"}
	fakeDaemon(t, &both, "GPU-5e3b6a2e-0000-4000-8000-000000000000")
	if _, err := run(&both, "f", &u1000, "VGPU_VISIBLE_DEVICES=0"); err == nil || !strings.Contains(err.Error(), "but container e runs on it time sliced") {
		t.Errorf("spatial tenant beside a time-sliced one: %v", err)
	}
	if _, q, err := readQuota(cfg.StateDir, "a"); err != nil || q.FormatVersion != 3 {
		t.Errorf("a's quota file: %+v %v", q, err)
	}
}

func readQuota(stateDir, id string) (string, *quota.File, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, id, config.StateQuota))
	if err != nil {
		return "", nil, err
	}
	q, err := quota.Parse(b)
	return string(b), q, err
}
