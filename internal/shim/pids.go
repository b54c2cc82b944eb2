package shim

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/runtimelog"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// recordInitPID records the container's init in container.json on `start`:
// its pid, its start time and its cgroup (read now, before the container's
// own code runs: the init still waits in runc's exec fifo), so that
// `vgpu node` holds every process of that cgroup to the limits whatever the
// tenant does later. `create --pid-file F` was recorded in container.json,
// and by the time start comes runc has written F. Best
// effort: any failure is at most a warning, never fails the command, and a
// container that is not ours (no state directory) costs one failed open.
func recordInitPID(stateDir, id string, log *runtimelog.Logger) {
	defer func() {
		if r := recover(); r != nil {
			log.Warn(fmt.Sprintf("recording the init pid of %s: %v", id, r))
		}
	}()
	if stateDir == "" || state.ValidID(id) != nil {
		return
	}
	info, err := state.Read(stateDir, id)
	if err != nil || info.PIDFile == "" || len(info.PIDs) > 0 {
		return // not a vgpu container, or nothing to record
	}
	pid, err := readPIDFile(info.PIDFile)
	if err != nil {
		log.Warn(fmt.Sprintf("container %s: init pid not recorded: %v", id, err))
		return
	}
	st, err := procinfo.StatOf("", pid)
	if err != nil {
		log.Warn(fmt.Sprintf("container %s: init pid not recorded: %v", id, err))
		return
	}
	cg, err := procinfo.CgroupOf("", pid)
	if err != nil {
		log.Warn(fmt.Sprintf("container %s: cgroup not recorded: %v", id, err))
	}
	if err := state.SetInit(stateDir, id, pid, st.Start, cg.Path()); err != nil {
		log.Warn(fmt.Sprintf("container %s: init pid not recorded: %v", id, err))
	}
}

// watchInit records the init of a container made by `run` (no `start`
// comes) as soon as runc writes its pid file: between runc's create and
// start of the container, or within milliseconds of its start. stop ends
// the watch.
func watchInit(stateDir string, info *tenant.Record, log *runtimelog.Logger) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	id := info.ID
	go func() {
		defer close(finished)
		if info.PIDFile == "" {
			return
		}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if _, err := readPIDFile(info.PIDFile); err == nil {
				recordInitPID(stateDir, id, log)
				return
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// readPIDFile reads a runtime's pid file: a decimal pid, nothing else.
func readPIDFile(path string) (int, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: not a pid: %q", path, b)
	}
	return pid, nil
}
