package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// HelperEnv, set in its environment, makes the daemon's binary a helper:
// its main calls HelperMain with its arguments and exits with its status.
const HelperEnv = "VGPU_CHECKPOINT_HELPER"

// HelperMain is a helper's main: --lib PATH [--lock-timeout D] OP PID. It
// prints the Result as JSON on out. Status 0 when a Result was printed
// (whatever it says), 2 for a bad command line, 3 when the driver cannot
// be loaded or has no checkpoint API.
func HelperMain(args []string, out, errw io.Writer) int {
	fs := flag.NewFlagSet("checkpoint helper", flag.ContinueOnError)
	fs.SetOutput(errw)
	lib := fs.String("lib", "", "the driver's libcuda.so.1")
	lockTimeout := fs.Duration("lock-timeout", 10*time.Second, "how long a lock waits for work in flight")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 2 || *lib == "" {
		fmt.Fprintln(errw, "checkpoint helper: want --lib PATH [--lock-timeout D] suspend|resume|state PID")
		return 2
	}
	pid, err := strconv.Atoi(fs.Arg(1))
	if err != nil || pid <= 0 {
		fmt.Fprintf(errw, "checkpoint helper: pid %q: want a positive number\n", fs.Arg(1))
		return 2
	}
	d, err := openDriver(*lib)
	if err != nil {
		fmt.Fprintf(errw, "checkpoint helper: %v\n", err)
		return 3
	}
	r := apply(d, Op(fs.Arg(0)), pid, *lockTimeout, time.Now)
	if err := json.NewEncoder(out).Encode(r); err != nil {
		fmt.Fprintf(errw, "checkpoint helper: %v\n", err)
		return 1
	}
	return 0
}

// Runner runs operations in helper processes.
type Runner struct {
	Exe         string        // the daemon's binary (os.Executable)
	Lib         string        // the driver's libcuda.so.1
	LockTimeout time.Duration // how long a lock waits for work in flight
}

// ErrHelperDeadline: the helper did not finish in time and was killed; the
// process's state is unknown until queried again.
var ErrHelperDeadline = errors.New("checkpoint helper did not finish in time")

// Run does op on pid in a helper, killed with its process group when
// deadline passes or ctx ends.
func (r Runner) Run(ctx context.Context, op Op, pid int, deadline time.Duration) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	lockTimeout := r.LockTimeout
	if lockTimeout <= 0 {
		lockTimeout = 10 * time.Second
	}
	cmd := exec.CommandContext(ctx, r.Exe, "--lib", r.Lib, "--lock-timeout", lockTimeout.String(), string(op), strconv.Itoa(pid))
	cmd.Env = append(os.Environ(), HelperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return Result{Op: op, PID: pid, State: StateUnknown}, fmt.Errorf("%w (%v): %s pid %d", ErrHelperDeadline, deadline, op, pid)
	}
	if err != nil {
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 3 {
			return Result{}, fmt.Errorf("%w: %s", ErrNoAPI, bytes.TrimSpace(stderr.Bytes()))
		}
		return Result{}, fmt.Errorf("checkpoint helper %s pid %d: %v: %s", op, pid, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var res Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return Result{}, fmt.Errorf("checkpoint helper %s pid %d: its answer %q: %v", op, pid, stdout.String(), err)
	}
	return res, nil
}
