package shim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/apply"
	"github.com/vgpu-dev/vgpu/internal/cgroup"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// The driver's own memory limits (internal/driverlimit). vgpu-runtime has
// no cgo and cannot call NVML; it decides, and where the driver can hold a
// container's limits it adds vgpu-hook as the container's createRuntime
// hook, which runs once runc has made the container's cgroup and before
// anything of the container runs, and sets them there.

// HookName is vgpu-hook, installed beside vgpu-runtime.
const HookName = "vgpu-hook"

// limitsEdit is the spec edit plus, where the driver takes them, the hook
// that sets the driver's limits.
type limitsEdit struct {
	*apply.SpecEdit
	cfg *config.Config
	inv *Invocation
	log *Logger
}

func (t *limitsEdit) Check(p *plan.Plan) error {
	if h := driverLimitsHook(p, t.cfg, t.inv, t.log); h != nil {
		p.Hooks = append(p.Hooks, plan.PlanHook{Stage: "createRuntime", Hook: *h})
	}
	return t.SpecEdit.Check(p)
}

// driverLimitsHook is the createRuntime hook that sets p's memory limits in
// the driver, or nil (with one log line saying why) when the driver cannot
// hold them; p without a memory limit needs none.
func driverLimitsHook(p *plan.Plan, cfg *config.Config, inv *Invocation, log *Logger) *specs.Hook {
	limited := false
	for _, d := range p.Devices {
		limited = limited || d.Memory > 0
	}
	if !limited {
		return nil
	}
	nvml := ""
	for _, m := range p.Mounts {
		if strings.HasPrefix(filepath.Base(m.Destination), "libnvidia-ml.so.") {
			nvml = m.Source
		}
	}
	why := func(err error) *specs.Hook {
		log.Warn(fmt.Sprintf("container %s: the driver does not hold its memory limits (%v); the vgpu library and vgpu node do", p.ContainerID, err))
		return nil
	}
	if nvml == "" {
		return why(fmt.Errorf("no libnvidia-ml in the plan"))
	}
	if err := driverlimit.Eligible(cfg.StateDir, nvml); err != nil {
		return why(err)
	}
	self, err := os.Executable()
	if err != nil {
		return why(err)
	}
	hook := filepath.Join(filepath.Dir(self), HookName)
	args := []string{HookName, "driver-limits"}
	if inv.Global.Log != "" {
		args = append(args, "--log", inv.Global.Log)
	}
	if inv.Global.LogFormat != "" {
		args = append(args, "--log-format", inv.Global.LogFormat)
	}
	env, err := config.HookEnv(config.Path())
	if err != nil {
		return why(err)
	}
	timeout := 30
	return &specs.Hook{Path: hook, Args: args, Env: env, Timeout: &timeout}
}

// clearDriverLimits lifts the driver's limits of container id before runc
// deletes it, while its cgroup is there, when the driver holds them and the
// delete will go through (no process left, or --force). Best effort.
func clearDriverLimits(stateDir string, inv *Invocation, log *Logger) {
	info, err := state.Read(stateDir, inv.ID)
	if err != nil || info.DriverLimits == nil || !info.DriverLimits.Set {
		return
	}
	if !inv.Force {
		if pids, err := cgroup.Procs(info.DriverLimits.Cgroup); err != nil || len(pids) > 0 {
			return // still running (runc refuses the delete), or the cgroup is gone
		}
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	bundle := info.Bundle
	if bundle == "" {
		bundle = "/"
	}
	st, _ := json.Marshal(specs.State{Version: specs.Version, ID: inv.ID, Status: specs.StateStopped, Bundle: bundle})
	args := []string{"driver-limits-clear"}
	if inv.Global.Log != "" {
		args = append(args, "--log", inv.Global.Log)
	}
	if inv.Global.LogFormat != "" {
		args = append(args, "--log-format", inv.Global.LogFormat)
	}
	cmd := exec.Command(filepath.Join(filepath.Dir(self), HookName), args...)
	cmd.Stdin = bytes.NewReader(st)
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Warn(fmt.Sprintf("container %s: clearing the driver's memory limits: %v: %s", inv.ID, err, bytes.TrimSpace(out)))
	}
}
