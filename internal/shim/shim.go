package shim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/runtimelog"

	"github.com/vgpu-dev/vgpu/internal/freezer"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// ConfigPath returns the configuration file to read (config.Path).
func ConfigPath() string { return config.Path() }

// settings is what every command needs from the configuration.
type settings struct {
	runtimes []string
	stateDir string
}

// Main is vgpu-runtime: args is argv[1:]. It returns the exit status, or does
// not return at all when it execs the low-level runtime.
func Main(args []string, stderr io.Writer) int {
	log := &runtimelog.Logger{Stderr: stderr}
	inv, err := Parse(args)
	log.Path, log.Format = inv.Global.Log, inv.Global.LogFormat
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	switch inv.Command {
	case "create", "run":
		cfg, err := loadConfig(ConfigPath())
		if err != nil {
			log.Error(err.Error())
			return 1
		}
		st := settingsOf(cfg)
		rt, err := FindRuntime(st.runtimes)
		if err != nil {
			log.Error(err.Error())
			return 1
		}
		rec, err := prepare(inv, cfg, log)
		if err != nil {
			log.Error(err.Error())
			return 1
		}
		args := runArgs(inv, rec)
		if inv.Command == "run" && rec != nil {
			// No `start` comes to record the init and its cgroup: watched
			// for here, from the moment runc writes the pid file.
			stop := watchInit(st.stateDir, rec, log)
			code := forkRuntime(rt, args, allSignals...)
			stop()
			if !inv.Detach && !inv.Keep {
				// runc run deletes the container itself when it exits: no
				// `delete` will come, so our state goes with it here. A
				// container without state (no GPU) has nothing to clean up:
				// exec, as for create.
				removeState(st.stateDir, inv.ID, log)
			} else if code == 0 {
				recordInitPID(st.stateDir, inv.ID, log) // if the watch missed it
			}
			return code
		}
		err = execRuntime(rt, args)
		if rec != nil { // only reached when exec failed
			removeState(st.stateDir, inv.ID, log)
		}
		log.Error(err.Error())
		return 1
	case "delete":
		st := bestEffortSettings(log)
		rt, err := FindRuntime(st.runtimes)
		if err != nil {
			log.Error(err.Error())
			removeIfUnknown(st, "", inv, log)
			return 1
		}
		if !hasState(st.stateDir, inv.ID) {
			if state.HasLeftovers(st.stateDir, inv.ID) {
				// a create killed before its state was in place
				removeState(st.stateDir, inv.ID, log)
			}
			// Not ours (no GPU asked for): nothing to clean up, no child to wait for.
			err = execRuntime(rt, inv.Args)
			log.Error(err.Error())
			return 1
		}
		thawInside(st.stateDir, inv.ID, log)
		clearDriverLimits(st.stateDir, inv, log)
		code := forkRuntime(rt, inv.Args, stopSignals...)
		if code == 0 {
			removeState(st.stateDir, inv.ID, log)
		} else {
			removeIfUnknown(st, rt, inv, log)
		}
		return code
	default:
		st := bestEffortSettings(log)
		rt, err := FindRuntime(st.runtimes)
		if err != nil {
			log.Error(err.Error())
			return 1
		}
		if inv.Command == "start" {
			recordInitPID(st.stateDir, inv.ID, log) // best effort, for vgpu status
		}
		err = execRuntime(rt, inv.Args)
		log.Error(err.Error())
		return 1
	}
}

// thawInside thaws every cgroup a tenant froze below its container's own
// (possible with its own user and cgroup namespace): on a v1 freezer a
// frozen task never dies of SIGKILL, so the runtime's delete would fail on
// a cgroup that cannot be emptied, and the container would stay until an
// administrator thawed it. The container's own cgroup is the runtime's
// (pause) and left alone.
func thawInside(stateDir, id string, log *runtimelog.Logger) {
	info, err := state.Read(stateDir, id)
	if err != nil || info.Cgroup == "" {
		return
	}
	if thawed, err := freezer.New("").ThawBelow(info.Cgroup); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn(fmt.Sprintf("container %s: thawing the cgroups frozen inside it: %v", id, err))
	} else if len(thawed) > 0 {
		log.Warn(fmt.Sprintf("container %s: thawed cgroups frozen inside it before the delete: %v", id, thawed))
	}
}

// bestEffortSettings reads the configuration for commands that must work even
// when it is broken (delete, state, kill, list …): runc and crun and the
// default state directory stand in for what cannot be read.
func bestEffortSettings(log *runtimelog.Logger) settings {
	cfg, err := loadConfig(ConfigPath())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Warn("ignoring the configuration for this command: " + err.Error())
		}
		return settings{runtimes: DefaultRuntimes, stateDir: config.DefaultStateDir}
	}
	return settingsOf(cfg)
}

// removeIfUnknown removes our state of a container that delete failed for, if
// the runtime does not know the container (any more): nothing will use it.
func removeIfUnknown(st settings, rt string, inv *Invocation, log *runtimelog.Logger) {
	if inv.ID == "" {
		return
	}
	if rt != "" {
		args := append(append([]string(nil), inv.Args[:inv.CommandAt]...), "state", inv.ID)
		cmd := exec.Command(rt, args...)
		if cmd.Run() == nil {
			return // it still exists (running, say): keep its state
		}
	}
	removeState(st.stateDir, inv.ID, log)
}

// hasState says whether <stateDir>/<id> exists (or cannot be checked). An id
// that state.ValidID refuses never had a state directory.
func hasState(stateDir, id string) bool {
	if state.ValidID(id) != nil || stateDir == "" {
		return false
	}
	_, err := os.Lstat(filepath.Join(stateDir, id))
	return !errors.Is(err, os.ErrNotExist)
}

// removeState removes <stateDir>/<id> (state.Remove), best effort: a
// failure is logged, never fails the command.
func removeState(stateDir, id string, log *runtimelog.Logger) {
	if state.ValidID(id) != nil || stateDir == "" {
		return
	}
	if err := state.Remove(stateDir, id); err != nil {
		log.Warn(fmt.Sprintf("removing state %s: %v", filepath.Join(stateDir, id), err))
	}
}

// execRuntime replaces this process by the runtime, with the original argv.
func execRuntime(rt string, args []string) error {
	err := syscall.Exec(rt, append([]string{rt}, args...), os.Environ())
	return fmt.Errorf("exec %s: %w", rt, err)
}

// Which signals forkRuntime forwards to the runtime. A foreground run gets
// them all, as runc run passes them all on to the container. A delete gets
// the ones that stop a process: the shim outlives them and keeps or removes
// the state by what became of the container; a signal meant for a
// container does not reach a runc delete. The Go runtime hands every
// signal it is asked to catch to its signal thread one at a time: asking
// for all of them costs a delete about 4 ms on the development VM, for
// these four about 1 ms.
var (
	allSignals  []os.Signal // signal.Notify with none: all
	stopSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM}
)

// forkRuntime runs the runtime as a child with our stdio, forwarding sigs
// (none given: all signals), and returns its exit status (128+signal when
// killed).
func forkRuntime(rt string, args []string, sigs ...os.Signal) int {
	cmd := exec.Command(rt, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	caught := make(chan os.Signal, 16)
	signal.Notify(caught, sigs...)
	defer signal.Stop(caught)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "vgpu-runtime: %v\n", err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-caught:
				if s != syscall.SIGCHLD && s != syscall.SIGURG {
					_ = cmd.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}
