// Package vgpuexec runs one command under the vgpu library outside any
// container: `vgpu exec`. It writes a quota file and a shared accounting
// directory into a private temporary directory, preloads the two stand-ins
// (docs/design.md: LD_PRELOAD instead of /etc/ld.so.preload) and removes the
// directory when the command has exited.
package vgpuexec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/inject"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// Options are the flags of `vgpu exec`.
type Options struct {
	MemoryLimit  string // size for every selected device ("" = no limit)
	ComputeLimit int    // percent, 0 = none
	Devices      string // "" = all; comma-separated host indices or UUIDs
	DriverRoot   string // where the real driver is laid out ("/" on a host)
	LibDir       string // holds libvgpu-cuda.so and libvgpu-nvml.so ("" = next to the binary, else /usr/lib/vgpu)
	LogLevel     string // library log level ("" = its default)
	// ComputePeriod paces compute limits ("500ms"; "0" launch by launch; "" the library's default).
	ComputePeriod string
	// ComputePhase is where the command's stretch starts in each period, in
	// percent (0..99), so that several `vgpu exec` on one GPU take turns like
	// containers do (internal/inject, assignPhases); nil = none.
	ComputePhase *int
	Args         []string // the command
	Env          []string // its environment (nil = os.Environ())
	Stdin        io.Reader
	Stdout       io.Writer
	Stderr       io.Writer
	// Lister lists the host GPUs (nil: the driver's NVML through go-nvml).
	Lister inject.Lister
}

// Plan is what Run sets up, exposed for tests.
type Plan struct {
	Dir   string // private temporary directory (0700)
	Quota *inject.Quota
	Env   []string
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
	defer os.RemoveAll(p.Dir)
	cmd := exec.Command(o.Args[0], o.Args[1:]...)
	cmd.Env = p.Env
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

// Prepare writes the quota file and shared directory and computes the
// environment. The caller removes p.Dir.
func Prepare(o Options) (*Plan, error) {
	root := o.DriverRoot
	if root == "" {
		root = "/"
	}
	cfg := config.Default()
	cfg.Driver.Root = root
	cfg.Driver.DevRoot = root
	files, err := inject.DriverFiles(cfg)
	if err != nil {
		return nil, err
	}
	cudaLib, nvmlLib := libPath(files, "libcuda"), libPath(files, "libnvidia-ml")
	libDir, err := findLibDir(o.LibDir)
	if err != nil {
		return nil, err
	}
	var mem uint64
	if o.MemoryLimit != "" {
		if mem, err = spec.ParseSize(o.MemoryLimit); err != nil {
			return nil, fmt.Errorf("--memory-limit %q: %v", o.MemoryLimit, err)
		}
	}
	if o.ComputeLimit < 0 || o.ComputeLimit > 100 {
		return nil, fmt.Errorf("--compute-limit %d: percent 1..100", o.ComputeLimit)
	}
	period, err := config.ParseComputePeriod(o.ComputePeriod)
	if err != nil {
		return nil, fmt.Errorf("--compute-period: %w", err)
	}
	if ph := o.ComputePhase; ph != nil && (*ph < 0 || *ph > inject.MaxPhase) {
		return nil, fmt.Errorf("--compute-phase %d: percent of the period, 0..%d", *ph, inject.MaxPhase)
	}
	uuids, err := selectDevices(o, cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "vgpu-exec-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		return nil, err
	}
	q := &inject.Quota{DriverCuda: cudaLib, DriverNvml: nvmlLib, SharedDir: shared, LogLevel: o.LogLevel, ComputePeriodMS: period}
	for i, u := range uuids {
		d := inject.QuotaDevice{Index: i, UUID: u, Memory: mem, Compute: o.ComputeLimit}
		if o.ComputeLimit > 0 && o.ComputeLimit < 100 {
			d.Phase = o.ComputePhase
		}
		q.Devices = append(q.Devices, d)
	}
	data, err := q.Marshal()
	if err != nil {
		return nil, err
	}
	qpath := filepath.Join(dir, "quota")
	if err := os.WriteFile(qpath, data, 0o600); err != nil {
		return nil, err
	}
	if _, err := os.Stat(QuotaPath); err == nil {
		return nil, fmt.Errorf("%s exists: the library reads it before VGPU_QUOTA_FILE, so vgpu exec cannot set limits here (inside a vgpu container?)", QuotaPath)
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	preload := filepath.Join(libDir, "libvgpu-cuda.so") + ":" + filepath.Join(libDir, "libvgpu-nvml.so")
	if old := getenv(env, "LD_PRELOAD"); old != "" {
		preload += ":" + old
	}
	env = setenv(env, "VGPU_QUOTA_FILE", qpath)
	env = setenv(env, "LD_PRELOAD", preload)
	if o.Devices != "" && getenv(env, "CUDA_VISIBLE_DEVICES") == "" {
		// the library refuses memory on devices the quota does not list; show only those
		env = setenv(env, "CUDA_VISIBLE_DEVICES", strings.Join(uuids, ","))
	}
	ok = true
	return &Plan{Dir: dir, Quota: q, Env: env}, nil
}

// QuotaPath is where the library looks first (docs/design.md).
const QuotaPath = "/run/vgpu/quota"

func libPath(h *inject.Host, base string) string {
	for _, l := range h.Libraries {
		if l.Name == base+".so."+h.DriverVersion {
			return l.Path
		}
	}
	return ""
}

func findLibDir(dir string) (string, error) {
	var cands []string
	if dir != "" {
		cands = []string{dir}
	} else {
		if exe, err := os.Executable(); err == nil {
			cands = append(cands, filepath.Join(filepath.Dir(exe), "..", "lib"))
		}
		cands = append(cands, "/usr/lib/vgpu")
	}
	for _, d := range cands {
		if isFile(filepath.Join(d, "libvgpu-cuda.so")) && isFile(filepath.Join(d, "libvgpu-nvml.so")) {
			return filepath.Abs(d)
		}
	}
	return "", fmt.Errorf("libvgpu-cuda.so and libvgpu-nvml.so not found in %s (use --lib-dir)", strings.Join(cands, ", "))
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// selectDevices returns the UUIDs of the selected GPUs, in the order given.
func selectDevices(o Options, cfg *config.Config) ([]string, error) {
	var want []string
	if o.Devices != "" {
		want = strings.Split(o.Devices, ",")
	}
	allUUIDs := len(want) > 0
	for _, w := range want {
		if !strings.HasPrefix(w, "GPU-") && !strings.HasPrefix(w, "MIG-") {
			allUUIDs = false
		}
	}
	if allUUIDs { // no need to ask the driver
		return dedup(want)
	}
	var h *inject.Host
	var err error
	if o.Lister != nil {
		h, err = inject.DiscoverWith(cfg, o.Lister)
	} else {
		h, err = inject.Discover(cfg) // the driver's own NVML (go-nvml, needs cgo)
	}
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w (or name them by UUID with --devices)", err)
	}
	gpus := h.GPUs
	if len(want) == 0 {
		var all []string
		for _, g := range gpus {
			all = append(all, g.UUID)
		}
		if len(all) == 0 {
			return nil, errors.New("the driver reports no GPU")
		}
		return all, nil
	}
	var out []string
	for _, w := range want {
		found := ""
		for _, g := range gpus {
			if w == g.UUID || w == strconv.Itoa(g.Index) {
				found = g.UUID
			}
		}
		if found == "" {
			return nil, fmt.Errorf("--devices: no GPU %q (%d GPUs on this host)", w, len(gpus))
		}
		out = append(out, found)
	}
	return dedup(out)
}

func dedup(uuids []string) ([]string, error) {
	seen := map[string]bool{}
	for _, u := range uuids {
		if seen[u] {
			return nil, fmt.Errorf("--devices: %s given twice", u)
		}
		seen[u] = true
	}
	return uuids, nil
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
