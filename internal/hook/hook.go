// Package hook is vgpu-hook: the OCI hook that gives a container what
// vgpu-runtime would have put in its spec, for engines that take hooks but no
// custom runtime (podman hooks.d, CDI).
//
// Stages (see docs/hook.md):
//   - createContainer: runs in the container's mount namespace before
//     pivot_root, the host's / still visible and the rootfs at the spec's
//     root.path. The hook writes the state dir, creates the device nodes and
//     bind-mounts the libraries, quota file, shared dir and ld.so.preload into
//     the rootfs. Mounts made there stay private to the container.
//   - poststop: removes the state dir.
//
// The device cgroup is the engine's: a hook cannot change the spec, and rules
// written into the cgroup by a hook vanish on `systemctl daemon-reload`. The
// hook therefore never writes cgroup rules; it checks the spec's rules and
// refuses to go on when they deny the nodes (grant them with podman --device or CDI).
package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/apply"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/pipeline"
	"github.com/vgpu-dev/vgpu/internal/spec"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// Main is vgpu-hook; args is argv[1:] (the stage), stdin the OCI state.
func Main(args []string, stdin io.Reader, stderr io.Writer) int {
	if os.Getenv("PATH") == "" {
		_ = os.Setenv("PATH", config.HookPATH) // fails only for an invalid name
	}
	if err := run(args, stdin); err != nil {
		fmt.Fprintln(stderr, "vgpu-hook: "+err.Error())
		return 1
	}
	return 0
}

// Usage is vgpu-hook's help text.
const Usage = `usage: vgpu-hook STAGE [--cdi]   (the OCI state on stdin, as runtimes call hooks)

vgpu-hook is the OCI hook form of vgpu-runtime, for engines that run hooks but
no custom runtime: podman hooks.d (vgpu setup podman) and CDI (vgpu cdi generate).

Stages:
  createContainer   give a container that asks for GPUs (VGPU_* environment or
                    vgpu.io/* annotations) its state directory, device nodes,
                    libraries, quota file and ld.so.preload; runs in the
                    container's mount namespace before pivot_root
  createRuntime     the same as createContainer, for hook configurations that
  prestart          use these (older) stages
  poststop          remove the container's state directory
  driver-limits     (vgpu-runtime's createRuntime hook) set the driver's own
                    memory limits on the container's cgroup, where the driver
                    has them (docs/driver-limits.md)
  driver-limits-clear  (vgpu-runtime, before delete) lift them again

vgpu-hook --version prints its version and commit and the driver's version.

--cdi   the hook runs from the vgpu.io/gpu CDI spec: the engine already added
        the device nodes and libraries; the container's GPUs are the GPU device
        nodes in its spec, its limits come from VGPU_MEMORY_LIMIT,
        VGPU_COMPUTE_LIMIT or the vgpu.io/* annotations; the hook adds the
        quota file, shared directory and ld.so.preload

Configuration: /etc/vgpu/config.toml, or the file named by $VGPU_CONFIG (set it
in the hook entry's env). The hook never writes device cgroup rules: the engine
must allow the nodes (podman --device …, or CDI).
`

func run(args []string, stdin io.Reader) error {
	cdiMode := len(args) == 2 && args[1] == config.HookCDIFlag
	limits := len(args) > 0 && (args[0] == DriverLimitsStage || args[0] == DriverLimitsClearStage)
	if len(args) != 1 && !cdiMode && !limits {
		return errors.New("usage: vgpu-hook createContainer|createRuntime|poststop [--cdi] (OCI state on stdin)")
	}
	var st specs.State
	if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&st); err != nil {
		return fmt.Errorf("reading the OCI state from stdin: %w", err)
	}
	if st.Bundle == "" || st.ID == "" {
		return errors.New("OCI state without id or bundle")
	}
	switch args[0] {
	case "createContainer", "createRuntime", "prestart":
		if cdiMode {
			return createCDI(&st)
		}
		return create(&st)
	case "poststop":
		return poststop(&st)
	case DriverLimitsStage:
		return driverLimits(&st, args[1:])
	case DriverLimitsClearStage:
		return driverLimitsClear(&st, args[1:])
	default:
		return fmt.Errorf("unknown stage %q", args[0])
	}
}

// load reads what both createContainer modes start from: the spec, the
// configuration and the spec's device rules. done: vgpu-runtime already
// edited this spec, nothing is left to do.
func load(st *specs.State) (s *spec.Spec, cfg *config.Config, rules []specs.LinuxDeviceCgroup, done bool, err error) {
	if s, err = spec.LoadBundle(st.Bundle); err != nil {
		return
	}
	if cfg, err = config.Load(config.Path()); err != nil {
		return
	}
	if done, err = pipeline.Edited(s, st.ID); done || err != nil {
		return
	}
	rules, err = s.DeviceRules()
	return
}

func create(st *specs.State) error {
	s, cfg, rules, done, err := load(st)
	if err != nil || done {
		return err
	}
	if hasCDIHook(s) {
		return nil // the hook from the CDI spec does it (createCDI)
	}
	req, err := pipeline.FromSpec(s, cfg)
	if err != nil || req == nil {
		return err
	}
	// Discovery opens the control nodes from inside the container's device cgroup.
	if err := apply.CheckControlRules(cfg, rules); err != nil {
		return fmt.Errorf("container %s: %w", st.ID, err)
	}
	_, err = pipeline.Run(pipeline.Input{
		Config: cfg, ContainerID: st.ID, Request: req,
		Name: pipeline.EngineName(s, st.ID), Bundle: s.Bundle(), Rootfs: s.RootfsPath(), UID: pipeline.HostUID(s),
		Target: &apply.RootfsEdit{Rootfs: s.RootfsPath(), Rules: rules},
	})
	if err == nil {
		recordInit(cfg.StateDir, st.ID, os.Stderr)
		ownLimits(cfg, st.ID, os.Stderr)
	}
	return err
}

func poststop(st *specs.State) error {
	// Only our own state: the id is one path element.
	if st.ID == "." || st.ID == ".." || filepath.Base(st.ID) != st.ID {
		return fmt.Errorf("bad container id %q", st.ID)
	}
	// Best effort like vgpu-runtime's delete: a broken configuration must not
	// leave the state behind.
	dir := config.StateDirOf("")
	// state.Remove unmounts the capped tmpfs on shared/ first (the
	// createContainer hook mounted it in this, the runtime's, mount namespace).
	return state.Remove(dir, st.ID)
}
