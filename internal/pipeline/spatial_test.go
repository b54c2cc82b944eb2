//go:build integration

package pipeline

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/mpsdir"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/quota"
)

const spatialUUID = "GPU-5e3b6a2e-0000-4000-8000-000000000001"

// What a container on a spatial GPU gets: the GPU's pipe directory
// read-only at /run/vgpu/mps, its shm directory as /dev/shm, the MPS client
// environment and a version 3 quota line; a container on the other GPU
// stays time sliced, with a version 2 file.
func TestPlanSpatial(t *testing.T) {
	cfg := fakeRoot(t)
	cfg.Spatial.GPUs = []string{"1"}
	h := hostOf(t, cfg)
	p, err := plan.New(mustReq(t, "VGPU_VISIBLE_DEVICES=1", "VGPU_MEMORY_LIMIT=2Gi", "VGPU_COMPUTE_LIMIT=50"), cfg, h, "c1")
	if err != nil {
		t.Fatal(err)
	}
	dir := cfg.MPSDir(spatialUUID)
	if !slices.Contains(p.Mounts, plan.Mount{Source: filepath.Join(dir, "pipe"), Destination: "/run/vgpu/mps", ReadOnly: true, Dir: true}) ||
		!slices.Contains(p.Mounts, plan.Mount{Source: filepath.Join(dir, "shm"), Destination: "/dev/shm", Dir: true}) {
		t.Errorf("mounts %+v", p.Mounts)
	}
	for _, e := range []string{"CUDA_MPS_PIPE_DIRECTORY=/run/vgpu/mps", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M"} {
		if !slices.Contains(p.Env, e) {
			t.Errorf("env %v lacks %s", p.Env, e)
		}
	}
	rec := p.Record()
	q, err := quota.Render(&rec).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(q), "\nvgpu-quota 3\n") || !strings.Contains(string(q), "\ndevice 0 "+spatialUUID+" memory=2147483648 compute=50 mode=spatial mps_pipe=/run/vgpu/mps\n") {
		t.Errorf("quota:\n%s", q)
	}
	p, err = plan.New(mustReq(t, "VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=50"), cfg, h, "c2")
	if err != nil {
		t.Fatal(err)
	}
	rec = p.Record()
	q, _ = quota.Render(&rec).Marshal()
	if !strings.Contains(string(q), "\nvgpu-quota 2\n") || strings.Contains(string(q), "mode=") || slices.ContainsFunc(p.Env, func(e string) bool { return strings.HasPrefix(e, "CUDA_MPS_") }) {
		t.Errorf("time-sliced GPU 0: env %v quota:\n%s", p.Env, q)
	}
	// a compute request alone is the share; the config's default request
	// does not apply on a spatial GPU
	p, err = plan.New(mustReq(t, "VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_REQUEST=30"), cfg, h, "c3")
	if err != nil || p.Devices[0].Compute != 30 || p.Devices[0].ComputeRequest != nil || !slices.Contains(p.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30") {
		t.Errorf("request alone: %+v %v", p, err)
	}
	cfg.Defaults.ComputeLimit, cfg.Defaults.ComputeRequest = 60, 20
	p, err = plan.New(mustReq(t, "VGPU_VISIBLE_DEVICES=1"), cfg, h, "c4")
	if err != nil || p.Devices[0].Compute != 60 || p.Devices[0].ComputeRequest != nil {
		t.Errorf("defaults: %+v %v", p, err)
	}
}

func TestPlanSpatialRefusals(t *testing.T) {
	cfg := fakeRoot(t)
	cfg.Spatial.GPUs = []string{spatialUUID}
	h := hostOf(t, cfg)
	for _, tc := range []struct {
		env []string
		err string
	}{
		{[]string{"VGPU_VISIBLE_DEVICES=all"}, "is spatial (MPS, config spatial.gpus) and the container asks for 2 GPUs: a container on a spatial GPU takes that GPU alone"},
		{[]string{"VGPU_VISIBLE_DEVICES=1", "VGPU_COMPUTE_LIMIT=60", "VGPU_COMPUTE_REQUEST=30"}, "compute request 30% with limit 60% on container device 0 (VGPU_COMPUTE_REQUEST"},
	} {
		_, err := plan.New(mustReq(t, tc.env...), cfg, h, "c1")
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: err %v, want %q", tc.env, err, tc.err)
		}
	}
}

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
