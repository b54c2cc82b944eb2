// Package vgpuexec runs one command under the vgpu library outside any
// container: `vgpu exec`. It reads the configuration like the other host
// tools, and takes the command once through the same pipeline as a
// container (internal/pipeline): its record, quota file and shared
// accounting directory are an entry of the host's state directory, admitted
// and given slots beside the containers there (internal/slots), so that it
// takes turns with them on its GPUs. Where that directory cannot be written
// (vgpu exec as a user), the entry goes into a private temporary state
// directory instead, with no one to take turns with. It preloads the two
// stand-ins (docs/design.md: LD_PRELOAD instead of /etc/ld.so.preload) and
// removes the entry when the command has exited.
package vgpuexec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-dev/vgpu/internal/cgroup"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/pipeline"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"golang.org/x/sys/unix"
)

// Options are the flags of `vgpu exec`.
type Options struct {
	MemoryLimit  string // size, or per device 0=4Gi,1=8Gi ("" = the configured default, else none)
	ComputeLimit int    // percent, 0 = the configured default, else none
	// Requests beside the limits, as the flags give them ("" = the
	// configured default, else none).
	ComputeRequest string
	MemoryRequest  string
	// Priority: high, normal or low, or per device 0=high,1=low ("" = the
	// configured default, else normal).
	Priority string
	Devices  string // "" = all; comma-separated host indices or UUIDs
	// ConfigPath is the configuration to read ("" = config.Path(): $VGPU_CONFIG
	// or /etc/vgpu/config.toml; a missing default file means the defaults).
	ConfigPath string
	DriverRoot string // where the real driver is laid out ("" = driver.root of the configuration); made absolute
	LibDir     string // holds libvgpu-cuda.so and libvgpu-nvml.so ("" = next to the binary, else library.dir)
	LogLevel   string // library log level ("" = library.log_level)
	// ComputePeriod paces compute limits ("500ms"; "0" launch by launch; "" library.compute_period).
	ComputePeriod string
	// ComputePhase is where the command's stretch starts in each period, in
	// percent (0..99), so that several `vgpu exec` on one GPU take turns like
	// containers do (internal/slots); nil = one assigned next to the
	// containers and other `vgpu exec` in the host's state directory.
	ComputePhase *int
	Args         []string // the command
	Env          []string // its environment (nil = os.Environ())
	Stdin        io.Reader
	Stdout       io.Writer
	Stderr       io.Writer
	// Lister lists the host GPUs (nil: the driver's NVML through go-nvml).
	Lister discover.Lister
}

// Plan is what Run sets up, exposed for tests.
type Plan struct {
	// StateDir holds the command's entry ID: the host's state directory
	// (state_dir), or a private temporary one when that cannot be written
	// (Private says why).
	StateDir, ID string
	Private      error
	QuotaPath    string         // the quota file the library reads (VGPU_QUOTA_FILE)
	Record       *tenant.Record // the entry's record as written
	Env          []string
}

// Remove removes the command's entry (and a private state directory). What
// it could not remove holds nothing once this process has exited (the
// record names it, with its start time, as the entry's init) but stays on
// disk until removed by hand: the error names it.
func (p *Plan) Remove() error {
	err := state.Remove(p.StateDir, p.ID)
	if p.Private != nil {
		err = errors.Join(err, os.RemoveAll(p.StateDir))
	}
	if err != nil {
		return fmt.Errorf("removing its entry %s (remove it by hand): %w", filepath.Join(p.StateDir, p.ID), err)
	}
	return nil
}

// Run prepares the quota, runs the command and cleans up. It returns the
// command's exit status (128+signal when killed by a signal).
func Run(o Options) (int, error) {
	if len(o.Args) == 0 {
		return 0, errors.New("no command given (vgpu exec [flags] -- cmd args…)")
	}
	p, err := Prepare(o)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err := p.Remove(); err != nil {
			// the command's exit status stands: its run is not undone
			stderr := o.Stderr
			if stderr == nil {
				stderr = os.Stderr
			}
			fmt.Fprintf(stderr, "vgpu exec: %v\n", err)
		}
	}()
	if p.Private != nil && o.Stderr != nil && arbitrated(p.Record) {
		fmt.Fprintf(o.Stderr, "vgpu exec: warning: %v; the command's compute limit holds, but it does not take turns with the containers on its GPUs\n", p.Private)
	}
	if clear := driverLimits(p, o.Stderr); clear != nil {
		defer clear()
	}
	cmd := exec.Command(o.Args[0], o.Args[1:]...)
	cmd.Env = p.Env
	// The command dies with vgpu exec: its entry, which vgpu exec removes
	// and vgpu node removes once vgpu exec is gone, is what attributes it
	// to its limits on the host and holds its requests. The signal follows
	// the thread that started the command, so that thread is kept until
	// the command ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sig: // the command decides what a signal means; we outlive it to clean up
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

// Prepare checks the flags, reads the configuration, then takes the command
// through the pipeline (request -> plan -> state), and computes the
// environment. The caller removes the entry (p.Remove).
func Prepare(o Options) (*Plan, error) {
	// The flags first: a bad flag is reported as such, whatever the host has.
	comp := ""
	if o.ComputeLimit != 0 {
		comp = strconv.Itoa(o.ComputeLimit)
	}
	req, err := request.FromFlags(request.Flags{Devices: o.Devices, Memory: o.MemoryLimit, Compute: comp,
		ComputeRequest: o.ComputeRequest, MemoryRequest: o.MemoryRequest, Priority: o.Priority})
	if err != nil {
		return nil, err
	}
	if ph := o.ComputePhase; ph != nil && (*ph < 0 || *ph > contract.MaxPhase) {
		return nil, fmt.Errorf("--compute-phase %d: percent of the period, 0..%d", *ph, contract.MaxPhase)
	}
	req.ComputePhase = o.ComputePhase
	if o.ComputePeriod != "" {
		if _, err := config.ParseComputePeriod(o.ComputePeriod); err != nil {
			return nil, fmt.Errorf("--compute-period: %w", err)
		}
	}
	if o.LogLevel != "" && !slices.Contains([]string{"error", "warn", "info", "debug"}, o.LogLevel) {
		return nil, fmt.Errorf("--log-level %q: use error, warn, info or debug", o.LogLevel)
	}
	cfgPath := o.ConfigPath
	if cfgPath == "" {
		cfgPath = config.Path()
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	if o.DriverRoot != "" {
		root, err := filepath.Abs(o.DriverRoot)
		if err != nil {
			return nil, fmt.Errorf("--driver-root %q: %w", o.DriverRoot, err)
		}
		if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("--driver-root %q: %s is not a directory", o.DriverRoot, root)
		}
		cfg.Driver.Root, cfg.Driver.DevRoot = root, root
	}
	if o.LogLevel != "" {
		cfg.Library.LogLevel = o.LogLevel
	}
	if o.ComputePeriod != "" {
		cfg.Library.ComputePeriod = o.ComputePeriod
	}
	libDir, err := findLibDir(o.LibDir, cfg.Library.Dir, cfgPath)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(contract.QuotaPath); err == nil {
		return nil, fmt.Errorf("%s exists: the library reads it before VGPU_QUOTA_FILE, so vgpu exec cannot set limits here (inside a vgpu container?)", contract.QuotaPath)
	}
	var host *discover.Host
	if o.Lister != nil {
		host, err = discover.DiscoverWith(cfg, o.Lister)
	} else {
		host, err = discover.Discover(cfg) // the driver's own NVML (go-nvml, needs cgo)
	}
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	p := &Plan{StateDir: cfg.StateDir, ID: fmt.Sprintf("exec-%d-%d", os.Getpid(), time.Now().UnixNano())}
	cfg.MPSStateDir = cfg.StateDir // a spatial GPU's daemon is the host's, whichever state directory the exec registers in
	if why := writable(p.StateDir); why != nil {
		if p.StateDir, err = os.MkdirTemp("", "vgpu-exec-"); err != nil {
			return nil, err
		}
		p.Private = fmt.Errorf("registering in state_dir %s: %w", cfg.StateDir, why)
		cfg.StateDir = p.StateDir
	}
	ok := false
	defer func() {
		if !ok && p.Private != nil {
			os.RemoveAll(p.StateDir)
		}
	}()
	cfg.Library.Dir = libDir // the stand-ins LD_PRELOAD names: the driver check compares those
	// Named by pid and start time, so that the entry stops counting once
	// the process is gone even if it never removed it, and a reused pid
	// never keeps its slots. No cgroup: the command runs in its caller's
	// (a login session's), which is not the command's to be attributed by.
	var start uint64
	if st, err := procinfo.StatOf("", os.Getpid()); err == nil {
		start = st.Start
	}
	res, err := pipeline.Run(pipeline.Input{
		Config: cfg, ContainerID: p.ID, Request: req, Host: host, Name: "vgpu exec",
		PIDs: []int{os.Getpid()}, InitStart: start, OnHost: true,
	})
	if err != nil {
		return nil, errors.Unwrap(err) // not a container: drop "container exec-…: "
	}
	p.Record = res.Record
	p.QuotaPath = tenant.Places{Dir: res.Plan.StateDir}.Quota()
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	preload := filepath.Join(libDir, plan.LibCuda) + ":" + filepath.Join(libDir, plan.LibNvml)
	if old := getenv(env, "LD_PRELOAD"); old != "" {
		preload += ":" + old
	}
	env = setenv(env, "VGPU_QUOTA_FILE", p.QuotaPath)
	env = setenv(env, "LD_PRELOAD", preload)
	for _, e := range res.Plan.Env {
		if k, v, _ := strings.Cut(e, "="); strings.HasPrefix(k, "CUDA_MPS_") {
			env = setenv(env, k, v) // a spatial GPU's client settings (tenant.Device.Env)
		}
	}
	if o.Devices != "" && getenv(env, "CUDA_VISIBLE_DEVICES") == "" {
		// the library refuses memory on devices the quota does not list; show only those
		var uuids []string
		for _, d := range p.Record.Devices {
			uuids = append(uuids, d.GPU.UUID)
		}
		env = setenv(env, "CUDA_VISIBLE_DEVICES", strings.Join(uuids, ","))
	}
	p.Env = env
	ok = true
	return p, nil
}

// writable says whether vgpu exec can register in the state directory dir
// (nil), as root can, or why not.
func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return &os.PathError{Op: "access", Path: dir, Err: err}
	}
	return nil
}

// arbitrated says whether rec has anything to take turns or be admitted
// with: a paced device or a compute request.
func arbitrated(rec *tenant.Record) bool {
	for _, d := range rec.Devices {
		if d.Paced() || d.ComputeRequest != nil {
			return true
		}
	}
	return false
}

func findLibDir(dir, configured, cfgPath string) (string, error) {
	var cands []string
	if dir != "" {
		cands = []string{dir}
	} else {
		if exe, err := os.Executable(); err == nil {
			cands = append(cands, filepath.Join(filepath.Dir(exe), "..", "lib"))
		}
		cands = append(cands, configured)
	}
	for _, d := range cands {
		if isFile(filepath.Join(d, plan.LibCuda)) && isFile(filepath.Join(d, plan.LibNvml)) {
			return filepath.Abs(d)
		}
	}
	return "", fmt.Errorf("%s and %s not found in %s (use --lib-dir, or set library.dir in %s)", plan.LibCuda, plan.LibNvml, strings.Join(cands, ", "), cfgPath)
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func getenv(env []string, k string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], k+"="); ok {
			return v
		}
	}
	return ""
}

func setenv(env []string, k, v string) []string {
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if !strings.HasPrefix(e, k+"=") {
			out = append(out, e)
		}
	}
	return append(out, k+"="+v)
}

// execLimits are the driver limits of the command's devices that have a
// memory limit: hard = the limit, soft = the memory request where one below
// it is given (driverlimit.Soft, as for containers), and their UUIDs.
func execLimits(r *tenant.Record) (ls []driverlimit.Limit, uuids []string) {
	for _, d := range r.Devices {
		if d.Memory > 0 {
			ls = append(ls, driverlimit.Limit{UUID: d.GPU.UUID, Soft: driverlimit.Soft(d), Hard: d.Memory})
			uuids = append(uuids, d.GPU.UUID)
		}
	}
	return ls, uuids
}

// driverLimits sets the command's memory limits in the driver (internal/
// driverlimit) when the driver has the call, vgpu exec runs as root and in
// a cgroup of its own (which the command then shares, and nothing else):
// the returned func clears them. Otherwise the library holds the limits as
// before, and where the driver has the call, one line says why it does not.
func driverLimits(p *Plan, stderr io.Writer) (clear func()) {
	ls, uuids := execLimits(p.Record)
	nvml := ""
	if p.Record.Library != nil {
		nvml = p.Record.Library.DriverNvml
	}
	if len(ls) == 0 || nvml == "" {
		return nil
	}
	say := func(format string, a ...any) {
		if stderr != nil {
			fmt.Fprintf(stderr, "vgpu exec: "+format+"\n", a...)
		}
	}
	if has, err := driverlimit.HasSymbol(p.StateDir, nvml); err != nil || !has {
		return nil // the driver has no such limits: nothing to say
	}
	err := driverlimit.Eligible(p.StateDir, nvml)
	cg := ""
	if err == nil {
		if cg, err = cgroup.Of(os.Getpid()); err == nil {
			var pids []int
			if pids, err = cgroup.Procs(cg); err == nil && (len(pids) != 1 || pids[0] != os.Getpid()) {
				err = fmt.Errorf("it is not alone in its cgroup %s (run it in one of its own: systemd-run --scope vgpu exec …)", cg)
			}
		}
	}
	if err == nil {
		err = driverlimit.Set(nvml, cg, ls)
	}
	if err != nil {
		say("the driver does not hold the memory limit: %v; the vgpu library does", err)
		return nil
	}
	say("the driver holds the memory limit on cgroup %s", cg)
	return func() {
		if err := driverlimit.Clear(nvml, cg, uuids); err != nil {
			say("clearing the driver's memory limit: %v", err)
		}
	}
}
