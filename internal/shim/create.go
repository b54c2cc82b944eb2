package shim

import (
	"path/filepath"

	"github.com/vgpu-dev/vgpu/internal/apply"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/pipeline"
	"github.com/vgpu-dev/vgpu/internal/spec"
	"github.com/vgpu-dev/vgpu/internal/state"
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
// that asks for no GPU; otherwise the state directory and the spec, both or
// neither (pipeline.Run). undo removes the state again (when the exec of
// runc fails).
func prepare(inv *Invocation, cfg *config.Config, log *Logger) (undo func(), err error) {
	nothing := func() {}
	s, err := spec.LoadBundle(inv.Bundle)
	if err != nil {
		return nil, err
	}
	if done, err := pipeline.Edited(s, inv.ID); done || err != nil {
		return nothing, err
	}
	req, err := pipeline.FromSpec(s, cfg)
	if err != nil || req == nil {
		return nothing, err
	}
	_, err = pipeline.Run(pipeline.Input{
		Config: cfg, ContainerID: inv.ID, Request: req,
		Name: pipeline.ContainerName(s.Annotations()), Bundle: s.Bundle(),
		PIDFile: pidFileOf(inv, cfg.StateDir), // the init pid is recorded from it at start (pids.go)
		Rootfs:  s.RootfsPath(),
		UID:     pipeline.HostUID(s),
		Target:  &limitsEdit{SpecEdit: &apply.SpecEdit{Spec: s}, cfg: cfg, inv: inv, log: log},
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = state.Remove(cfg.StateDir, inv.ID) }, nil
}

// pidFileOf is where the container's init pid will be: the caller's
// --pid-file, or for a `run` without one (runc run in the foreground, as
// scripts do) a file in the container's state directory that the shim makes
// runc write (runArgs), so that vgpu node can find the container's cgroup.
func pidFileOf(inv *Invocation, stateDir string) string {
	if inv.PIDFile == "" && inv.Command == "run" && state.ValidID(inv.ID) == nil {
		return filepath.Join(stateDir, inv.ID, config.StateInitPID)
	}
	return inv.PIDFile
}

// runArgs are the runtime's arguments: inv.Args, plus --pid-file when the
// shim chose the pid file of a limited container (pidFileOf).
func runArgs(inv *Invocation, stateDir string) []string {
	p := pidFileOf(inv, stateDir)
	if p == inv.PIDFile || !hasState(stateDir, inv.ID) {
		return inv.Args
	}
	args := append([]string(nil), inv.Args[:inv.CommandAt+1]...)
	args = append(args, "--pid-file", p)
	return append(args, inv.Args[inv.CommandAt+1:]...)
}
