package shim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/apply"
	"github.com/vgpu-dev/vgpu/internal/cgroup"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/runtimelog"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// The driver's own memory limits (internal/driverlimit): where the driver
// can hold a container's limits, apply.SpecEdit adds vgpu-hook as the
// container's createRuntime hook (apply.DriverLimitsHook), which sets them.

// HookName is vgpu-hook, installed beside vgpu-runtime.
const HookName = "vgpu-hook"

// driverLimitsHook is the createRuntime hook that sets a container's memory
// limits in the driver, for apply.SpecEdit to add where the driver can hold
// them.
func driverLimitsHook(cfg *config.Config, inv *Invocation) *apply.DriverLimitsHook {
	h := &apply.DriverLimitsHook{StateDir: cfg.StateDir}
	self, err := os.Executable()
	if err != nil {
		h.Err = err
		return h
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
		h.Err = err
		return h
	}
	timeout := 30
	h.Hook = &specs.Hook{Path: hook, Args: args, Env: env, Timeout: &timeout}
	return h
}

// clearDriverLimits lifts the driver's limits of container id before runc
// deletes it, while its cgroup is there, when the driver holds them and the
// delete will go through (no process left, or --force). Best effort.
func clearDriverLimits(stateDir string, inv *Invocation, log *runtimelog.Logger) {
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
