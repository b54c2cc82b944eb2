package shim

import (
	"fmt"

	"github.com/vgpu-dev/vgpu/internal/apply"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/pipeline"
	"github.com/vgpu-dev/vgpu/internal/runtimelog"
	"github.com/vgpu-dev/vgpu/internal/spec"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

func loadConfig(path string) (*config.Config, error) {
	return config.Load(path)
}

func settingsOf(c *config.Config) settings {
	st := settings{runtimes: c.Runtimes, stateDir: c.StateDir}
	if len(st.runtimes) == 0 {
		st.runtimes = DefaultRuntimes
	}
	if st.stateDir == "" {
		st.stateDir = config.DefaultStateDir
	}
	return st
}

// prepare edits the bundle of a create/run: nothing at all for a container
// that asks for no GPU (rec nil); otherwise the state directory and the
// spec, both or neither (pipeline.Run), and rec is the container's record
// as written. A create or run without --pid-file gets one in the
// container's state directory (the record's PIDFile), so that `start` (or
// run's watch) records its init and cgroup for vgpu node: runArgs passes
// it to the runtime.
func prepare(inv *Invocation, cfg *config.Config, log *runtimelog.Logger) (rec *tenant.Record, err error) {
	s, err := spec.LoadBundle(inv.Bundle)
	if err != nil {
		return nil, err
	}
	if done, err := pipeline.Edited(s, inv.ID); done || err != nil {
		return nil, err
	}
	req, err := pipeline.FromSpec(s, cfg)
	if err != nil || req == nil {
		if msg := nvidiaEnvIgnored(s.Env(), cfg); err == nil && msg != "" {
			log.Warn(fmt.Sprintf("container %s: %s", inv.ID, msg))
		}
		return nil, err
	}
	limits := driverLimitsHook(cfg, inv)
	res, err := pipeline.Run(pipeline.Input{
		Config: cfg, ContainerID: inv.ID, Request: req,
		Name: pipeline.EngineName(s, inv.ID), Bundle: s.Bundle(),
		PIDFile: inv.PIDFile, PIDFileInState: inv.PIDFile == "",
		Rootfs: s.RootfsPath(), UID: pipeline.HostUID(s),
		Target: &apply.SpecEdit{Spec: s, DriverLimits: limits},
	})
	if err != nil {
		return nil, err
	}
	if limits.Why != nil {
		log.Warn(fmt.Sprintf("container %s: the driver does not hold its memory limits (%v); the vgpu library and vgpu node do", inv.ID, limits.Why))
	}
	return res.Record, nil
}

// runArgs are the runtime's arguments: inv.Args, plus --pid-file when the
// record names a pid file the caller did not give (prepare).
func runArgs(inv *Invocation, rec *tenant.Record) []string {
	if rec == nil || rec.PIDFile == inv.PIDFile {
		return inv.Args
	}
	args := append([]string(nil), inv.Args[:inv.CommandAt+1]...)
	args = append(args, "--pid-file", rec.PIDFile)
	return append(args, inv.Args[inv.CommandAt+1:]...)
}
