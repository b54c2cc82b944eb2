package hook

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/cgroup"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/runtimelog"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The stages vgpu-runtime gives vgpu-hook for the driver's own memory
// limits (internal/driverlimit): DriverLimitsStage runs as the container's
// createRuntime hook (in the runtime's namespaces, the container's cgroup
// made, nothing of the container run yet); DriverLimitsClearStage is run by
// vgpu-runtime before it deletes the container.
const (
	DriverLimitsStage      = "driver-limits"
	DriverLimitsClearStage = "driver-limits-clear"
)

// driverLimits sets the container's limits on the cgroup of st.Pid and
// records what holds them in container.json. Nothing is refused: a failure
// is one line in the runtime's log (args: --log FILE --log-format F), and the
// library and vgpu node hold the limits as before.
func driverLimits(st *specs.State, args []string) error {
	log := logger(args)
	cfg, err := config.Load(config.Path())
	if err != nil {
		return err
	}
	info, err := state.Read(cfg.StateDir, st.ID)
	if err != nil {
		return nil // not a vgpu container (or gone): nothing to do
	}
	ls := driverlimit.Limits(info)
	if len(ls) == 0 {
		return nil
	}
	rec := &tenant.DriverLimits{}
	if err := setLimits(cfg, st.Pid, ls, rec); err != nil {
		rec.Why = err.Error()
		log.Warn(fmt.Sprintf("container %s: the driver does not hold its memory limits (%v); the vgpu library and vgpu node do", st.ID, err))
	}
	return state.SetDriverLimits(cfg.StateDir, st.ID, rec)
}

// setLimits sets ls on the cgroup of pid (0: this process's own, the
// createContainer hook's, which is the container's).
func setLimits(cfg *config.Config, pid int, ls []driverlimit.Limit, rec *tenant.DriverLimits) error {
	h, err := discover.DriverFiles(cfg)
	if err != nil {
		return err
	}
	nvml := h.Library("libnvidia-ml").Path
	if err := driverlimit.Eligible(cfg.StateDir, nvml); err != nil {
		return err
	}
	var cg string
	if pid > 0 {
		cg, err = cgroup.Of(pid)
	} else {
		cg, err = cgroup.Self()
	}
	if err != nil {
		return err
	}
	rec.Cgroup = cg
	if err := driverlimit.Set(nvml, cg, ls); err != nil {
		return err
	}
	rec.Set = true
	return nil
}

// ownLimits is the createContainer hook's (podman hooks.d, CDI) way: it
// runs in the container's cgroup, so that is the one it sets the limits on.
// Where the driver cannot hold them: one line on stderr (the engine's hook
// log) and the reason in container.json. Never an error: nothing is refused.
func ownLimits(cfg *config.Config, id string, stderr io.Writer) {
	info, err := state.Read(cfg.StateDir, id)
	if err != nil {
		return
	}
	ls := driverlimit.Limits(info)
	if len(ls) == 0 {
		return
	}
	rec := &tenant.DriverLimits{}
	if err := setLimits(cfg, 0, ls, rec); err != nil {
		rec.Why = err.Error()
		fmt.Fprintf(stderr, "vgpu-hook: container %s: the driver does not hold its memory limits (%v); the vgpu library and vgpu node do\n", id, err)
	}
	_ = state.SetDriverLimits(cfg.StateDir, id, rec)
}

// driverLimitsClear lifts the container's limits while its cgroup is still
// there (vgpu-runtime runs it before runc delete).
func driverLimitsClear(st *specs.State, args []string) error {
	log := logger(args)
	cfg, err := config.Load(config.Path())
	if err != nil {
		return err
	}
	info, err := state.Read(cfg.StateDir, st.ID)
	if err != nil || info.DriverLimits == nil || !info.DriverLimits.Set {
		return nil
	}
	err = ClearLimits(cfg, info)
	if err != nil {
		log.Warn(fmt.Sprintf("container %s: %v", st.ID, err))
	}
	return state.SetDriverLimits(cfg.StateDir, st.ID, &tenant.DriverLimits{Cgroup: info.DriverLimits.Cgroup, Why: "cleared"})
}

// ClearLimits lifts the driver limits recorded in info, if its cgroup is
// still there (its removal takes the limits with it).
func ClearLimits(cfg *config.Config, info *tenant.Record) error {
	cg := info.DriverLimits.Cgroup
	if _, err := os.Stat(cg); err != nil {
		return nil
	}
	h, err := discover.DriverFiles(cfg)
	if err != nil {
		return err
	}
	var uuids []string
	for _, l := range driverlimit.Limits(info) {
		uuids = append(uuids, l.UUID)
	}
	return driverlimit.Clear(h.Library("libnvidia-ml").Path, cg, uuids)
}

// logger writes to the runtime's log as vgpu-runtime would (args after the
// stage: --log FILE [--log-format json|text]).
func logger(args []string) *runtimelog.Logger {
	l := &runtimelog.Logger{}
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--log":
			l.Path = filepath.Clean(args[i+1])
		case "--log-format":
			l.Format = args[i+1]
		}
	}
	return l
}
