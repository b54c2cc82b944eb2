package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/tenant"

	"github.com/pelletier/go-toml/v2"

	"github.com/vgpu-dev/vgpu/internal/request"
)

// DefaultPath is where the config lives.
const DefaultPath = "/etc/vgpu/config.toml"

// Config is the whole file.
type Config struct {
	// StateDir holds one directory per limited container.
	StateDir string `toml:"state_dir"`
	// Runtimes are the low-level runtimes the shim execs, first found on PATH wins
	// (an absolute path is used as is).
	Runtimes []string `toml:"runtimes"`
	// AcceptNvidiaVisibleDevicesEnvvar lets NVIDIA_VISIBLE_DEVICES in a
	// container's environment select GPUs, as NVIDIA's
	// accept-nvidia-visible-devices-envvar-when-unprivileged does. Off by
	// default: images bake NVIDIA_VISIBLE_DEVICES=all in.
	AcceptNvidiaVisibleDevicesEnvvar bool     `toml:"accept_nvidia_visible_devices_envvar"`
	Driver                           Driver   `toml:"driver"`
	Library                          Library  `toml:"library"`
	Log                              Log      `toml:"log"`
	Defaults                         Defaults `toml:"defaults"`
	// Kubernetes says how containers created through containerd's CRI get GPUs.
	Kubernetes Kubernetes `toml:"kubernetes"`
	// Spatial names the GPUs shared through NVIDIA MPS (docs/spatial.md).
	Spatial Spatial `toml:"spatial"`
	// MemoryBorrow is how a tenant borrows memory above its request
	// (docs/node.md "Memory borrowing"): MemoryBorrowDefault (or "") only
	// what no other tenant's request needs, never taken back;
	// MemoryBorrowFree any free memory, taken back by vgpu node when an
	// owner under its request needs it.
	MemoryBorrow string `toml:"memory_borrow"`
	// MemoryReclaim is how vgpu node takes borrowed memory back from a
	// borrower (docs/node.md "Suspension"): MemoryReclaimSuspend (or "")
	// suspends its processes to host memory through the driver's
	// checkpoint API where the driver has it, else kills them;
	// MemoryReclaimKill kills them.
	MemoryReclaim string `toml:"memory_reclaim"`
	// Suspend bounds the suspensions.
	Suspend Suspend `toml:"suspend"`
	// MPSStateDir, when set, is the state directory whose .mps/ holds the
	// MPS daemons' directories (vgpu exec plans in a private state
	// directory, its process a client of the host's daemon); not in the file.
	MPSStateDir string `toml:"-"`
}

// Spatial is the [spatial] table: which GPUs are shared spatially (each
// container a fixed share of the SMs, all running at once, through NVIDIA's
// MPS) instead of time sliced, the default.
type Spatial struct {
	// GPUs are the spatial GPUs, each a UUID ("GPU-…", as nvidia-smi -L
	// prints it) or a host index ("0"); every other GPU is time sliced.
	GPUs []string `toml:"gpus"`
	// MPSControl is NVIDIA's MPS control program: a file name searched in
	// driver.bin_dirs under driver.root, then on PATH; or an absolute path.
	MPSControl string `toml:"mps_control"`
}

// Suspend is the [suspend] table: what a suspension may use.
type Suspend struct {
	// HostMemory caps the host memory all suspended processes' copies may
	// hold together: a size ("64Gi"), or a percentage of MemAvailable when
	// vgpu node starts ("50%", the default).
	HostMemory string `toml:"host_memory"`
	// MaxTime is the longest a process stays suspended before it is killed
	// ("" or "0": no limit), a Go duration ("30m").
	MaxTime string `toml:"max_time"`
	// RestoreOrder: RestoreLongest (the default) restores the process
	// suspended longest first, the others waiting behind it;
	// RestoreFits restores any suspended process whose whole memory fits.
	RestoreOrder string `toml:"restore_order"`
}

// The values of memory_reclaim and suspend.restore_order.
const (
	MemoryReclaimSuspend = "suspend"
	MemoryReclaimKill    = "kill"
	RestoreLongest       = "longest"
	RestoreFits          = "fits"
	// DefaultSuspendHostMemory is suspend.host_memory's default.
	DefaultSuspendHostMemory = "50%"
)

// SuspendWanted says whether memory_reclaim asks for suspension (the node
// still kills where the driver has no checkpoint API).
func (c *Config) SuspendWanted() bool { return c.MemoryReclaim != MemoryReclaimKill }

// SuspendHostMemory is suspend.host_memory against available bytes of
// host memory: the cap in bytes.
func (c *Config) SuspendHostMemory(available uint64) uint64 {
	n, pct, _ := parseHostMemory(c.Suspend.HostMemory)
	if pct > 0 {
		return uint64(float64(available) * pct / 100)
	}
	return n
}

// SuspendMaxTime is suspend.max_time (0: no limit).
func (c *Config) SuspendMaxTime() time.Duration {
	d, _ := parseMaxTime(c.Suspend.MaxTime)
	return d
}

func parseHostMemory(v string) (bytes uint64, pct float64, err error) {
	if v == "" {
		v = DefaultSuspendHostMemory
	}
	if p, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || !(f > 0 && f <= 100) {
			return 0, 0, fmt.Errorf("suspend.host_memory: %q: a percentage of the host's available memory is more than 0 and at most 100 (e.g. \"50%%\")", v)
		}
		return 0, f, nil
	}
	n, err := request.ParseSize(v)
	if err != nil || n == 0 {
		return 0, 0, fmt.Errorf("suspend.host_memory: %q: use a size (e.g. \"64Gi\") or a percentage of the host's available memory (e.g. \"50%%\"); to never suspend set memory_reclaim = \"kill\"", v)
	}
	return n, 0, nil
}

func parseMaxTime(v string) (time.Duration, error) {
	if v == "" || v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("suspend.max_time: %q: use a duration such as \"30m\", or \"0\" for no limit", v)
	}
	return d, nil
}

// The values of memory_borrow.
const (
	MemoryBorrowDefault = "default"
	MemoryBorrowFree    = "free"
)

// BorrowFree says whether memory_borrow is "free".
func (c *Config) BorrowFree() bool { return c.MemoryBorrow == MemoryBorrowFree }

// DefaultMPSControl is spatial.mps_control's default.
const DefaultMPSControl = "nvidia-cuda-mps-control"

// IsSpatial says whether the GPU of host index idx and UUID uuid is listed
// in spatial.gpus.
func (c *Config) IsSpatial(idx int, uuid string) bool {
	for _, g := range c.Spatial.GPUs {
		if g == uuid || g == strconv.Itoa(idx) {
			return true
		}
	}
	return false
}

// Kubernetes mode: a container that containerd's CRI created (it carries
// io.kubernetes.cri.container-type) gets only what the vgpu device plugin
// granted it (internal/grant); its vgpu.io/* annotations and its
// NVIDIA_VISIBLE_DEVICES / VGPU_* variables grant nothing, because a pod
// writes those itself.
type Kubernetes struct {
	// GrantsOnly turns Kubernetes mode on (the default). false restores the
	// annotation path for clusters without the device plugin, where any pod
	// can give itself any limit.
	GrantsOnly bool `toml:"grants_only"`
	// GrantDir is where the device plugin writes grants (root-only).
	GrantDir string `toml:"grant_dir"`
	// CoresLimit: the compute limit of a device-plugin container or a DRA
	// claim, whose vgpu.io/cores (cores capacity) is its request:
	// "request" (or ""): the limit is the request, a cap as before;
	// "none": limit 100, the idle GPU is the tenant's to use.
	CoresLimit string `toml:"cores_limit"`
	// MemoryLimit: the memory limit of a device-plugin container or a DRA
	// claim, whose vgpu.io/memory (memory capacity) is its request:
	// "request" (or ""): the limit is the request, as before; "none": the
	// limit a request-only tenant gets (defaults.memory_limit if set, else
	// the GPU's memory), so it may borrow above its request; a size
	// ("32Gi"): that limit, and never below the request.
	MemoryLimit string `toml:"memory_limit"`
	// Placement is how the device plugin and the DRA driver choose among a
	// node's GPUs: PlacementBinpack fills the fullest GPU that fits,
	// PlacementSpread the emptiest (docs/kubernetes-device-plugin.md).
	Placement string `toml:"placement"`
	// PriorityClasses gives a device-plugin container the priority of its
	// pod's PriorityClass (the pod's spec.priorityClassName, as the API
	// server holds it): class name -> high, normal or low. A class not
	// listed, or a pod whose class cannot be known, gets
	// defaults.priority. Never from the pod's own env or annotations.
	PriorityClasses map[string]string `toml:"priority_classes"`
}

// The values of kubernetes.cores_limit.
const (
	CoresLimitRequest = "request"
	CoresLimitNone    = "none"
)

// The values of kubernetes.memory_limit besides a size.
const (
	MemoryLimitRequest = "request"
	MemoryLimitNone    = "none"
)

// MemoryLimitSize checks a kubernetes.memory_limit value (or a DeviceClass's
// memoryLimit): "", "request" and "none" are policies (size 0); else a size
// above 0 in bytes. The error names the value and what to use.
func MemoryLimitSize(v string) (uint64, error) {
	if v == "" || v == MemoryLimitRequest || v == MemoryLimitNone {
		return 0, nil
	}
	n, err := request.ParseSize(v)
	if err == nil && n == 0 {
		err = errors.New("0 bytes")
	}
	if err != nil {
		return 0, fmt.Errorf("%q: %v; use %q (the limit is the memory requested), %q (the GPU's memory, or defaults.memory_limit: the tenant borrows above its request) or a size such as 32Gi (that limit, at least the request)",
			v, err, MemoryLimitRequest, MemoryLimitNone)
	}
	return n, nil
}

// The placement policies of Kubernetes.Placement.
const (
	PlacementBinpack = "binpack"
	PlacementSpread  = "spread"
)

// Driver says where the host's NVIDIA driver is.
type Driver struct {
	// Root is the driver root: "/" for a host driver, or a directory laid out
	// like one (a driver container, the simulator).
	Root string `toml:"root"`
	// LibDirs are searched, in order, relative to Root.
	LibDirs []string `toml:"lib_dirs"`
	// Libraries are the base names (lib<name>.so.<driver version>) mounted
	// into the container when present. libcuda and libnvidia-ml are required.
	Libraries []string `toml:"libraries"`
	// BinDirs are searched relative to Root for Binaries.
	BinDirs  []string `toml:"bin_dirs"`
	Binaries []string `toml:"binaries"`
	// IPCPaths, relative to Root, are bind-mounted rw at the same path in the
	// container when they exist.
	IPCPaths []string `toml:"ipc_paths"`
	// DevRoot is where dev/nvidia* are found on the host ("/" for a real driver).
	DevRoot string `toml:"dev_root"`
}

// Library says where vgpu's in-container stand-ins are on the host.
type Library struct {
	Dir string `toml:"dir"` // holds libvgpu-cuda.so and libvgpu-nvml.so
	// LogLevel is written to the quota file (log-level): error, warn, info, debug.
	LogLevel string `toml:"log_level"`
	// ComputePeriod is written to the quota file (compute-period): how compute
	// limits are paced, e.g. "500ms"; "0" launch by launch; "" the library's
	// default (lib/cudahook/README.md, "Compute limits").
	ComputePeriod string `toml:"compute_period"`
}

// Log is for the host-side tools (shim, hook).
type Log struct {
	File  string `toml:"file"` // empty: stderr
	Level string `toml:"level"`
}

// Defaults apply when a request leaves something out.
type Defaults struct {
	// VisibleDevices is used when a limit is given without a device selection.
	// Empty: that is an error.
	VisibleDevices string `toml:"visible_devices"`
	// MemoryLimit per device when the request gives none ("" = no limit).
	MemoryLimit string `toml:"memory_limit"`
	// ComputeLimit percent per device when the request gives none (0 = none).
	ComputeLimit int `toml:"compute_limit"`
	// ComputeRequest percent per device when the request gives no compute
	// setting at all (0 = none: the request is the limit). At most the
	// default limit when that is set.
	ComputeRequest int `toml:"compute_request"`
	// MemoryRequest per device when the request gives none ("" = none).
	MemoryRequest string `toml:"memory_request"`
	// PaceAll: a device with no compute setting on a time-sliced GPU is
	// paced from its start at request 0 (surplus only), so that requests
	// and priorities given later on its GPU hold beside it. false: only
	// when it arrives beside requests or a priority (state.Admit); alone
	// it runs unpaced, with no launch cost, for good.
	PaceAll bool `toml:"pace_all"`
	// Priority per device when the request gives none: high, normal or
	// low ("" = normal).
	Priority string `toml:"priority"`
}

// Default returns the built-in configuration.
func Default() *Config {
	return &Config{
		StateDir: DefaultStateDir,
		Runtimes: []string{"runc", "crun"},
		Driver: Driver{
			Root:      "/",
			LibDirs:   []string{"usr/lib/x86_64-linux-gnu", "usr/lib64", "lib64", "usr/lib", "lib/x86_64-linux-gnu", "usr/local/nvidia/lib64"},
			Libraries: []string{"libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler", "libnvidia-nvvm", "libcudadebugger", "libnvidia-gpucomp", "libnvidia-allocator", "libnvidia-cfg"},
			BinDirs:   []string{"usr/bin", "usr/local/nvidia/bin", "bin"},
			Binaries:  []string{"nvidia-smi", "nvidia-debugdump"},
			IPCPaths:  []string{"run/nvidia-persistenced/socket"},
			DevRoot:   "/",
		},
		Library:       Library{Dir: "/usr/lib/vgpu", LogLevel: "warn"},
		Log:           Log{Level: "info"},
		MemoryBorrow:  MemoryBorrowDefault,
		MemoryReclaim: MemoryReclaimSuspend,
		Suspend:       Suspend{HostMemory: DefaultSuspendHostMemory, RestoreOrder: RestoreLongest},
		Kubernetes:    Kubernetes{GrantsOnly: true, GrantDir: "/run/vgpu/grants", CoresLimit: CoresLimitRequest, MemoryLimit: MemoryLimitRequest, Placement: PlacementBinpack},
		Spatial:       Spatial{GPUs: []string{}, MPSControl: DefaultMPSControl},
	}
}

// Load reads path; a missing file gives Default().
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Default(), nil
	}
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes a config strictly over the defaults: a key given replaces the
// default (lists included); unknown keys are errors.
func Parse(data []byte) (*Config, error) {
	c := Default()
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			var msgs []string
			for _, e := range sm.Errors {
				row, col := e.Position()
				msgs = append(msgs, fmt.Sprintf("line %d, column %d: unknown key %q", row, col, strings.Join(e.Key(), ".")))
			}
			return nil, errors.New(strings.Join(msgs, "; "))
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("line %d, column %d: %s", row, col, de.Error())
		}
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

var levels = map[string]bool{"error": true, "warn": true, "info": true, "debug": true}

func relPath(key, p string) error {
	if p == "" || filepath.IsAbs(p) {
		return fmt.Errorf("%s: %q must be a path relative to driver.root", key, p)
	}
	for _, part := range strings.Split(filepath.ToSlash(p), "/") {
		if part == ".." {
			return fmt.Errorf("%s: %q must not contain a .. element", key, p)
		}
	}
	return nil
}

func absPath(key, p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%s: %q must be an absolute path", key, p)
	}
	if strings.ContainsAny(p, " \t\n") {
		return fmt.Errorf("%s: %q must not contain white space", key, p)
	}
	return nil
}

func baseName(key, n string) error {
	if n == "" || strings.ContainsAny(n, "/ \t\n") || n == "." || n == ".." {
		return fmt.Errorf("%s: %q must be a plain file name", key, n)
	}
	return nil
}

// Validate checks values that decode but make no sense.
func (c *Config) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(absPath("state_dir", c.StateDir))
	add(absPath("kubernetes.grant_dir", c.Kubernetes.GrantDir))
	if p := c.Kubernetes.Placement; p != PlacementBinpack && p != PlacementSpread {
		add(fmt.Errorf("kubernetes.placement: %q: use %q (fill the fullest GPU that fits) or %q (the emptiest)", p, PlacementBinpack, PlacementSpread))
	}
	if b := c.MemoryBorrow; b != "" && b != MemoryBorrowDefault && b != MemoryBorrowFree {
		add(fmt.Errorf("memory_borrow: %q: use %q (borrow only what no request needs, never taken back) or %q (any free memory, taken back by vgpu node when an owner needs it)", b, MemoryBorrowDefault, MemoryBorrowFree))
	}
	if r := c.MemoryReclaim; r != "" && r != MemoryReclaimSuspend && r != MemoryReclaimKill {
		add(fmt.Errorf("memory_reclaim: %q: use %q (suspend a borrower to host memory, kill where the driver cannot) or %q (kill it)", r, MemoryReclaimSuspend, MemoryReclaimKill))
	}
	if _, _, err := parseHostMemory(c.Suspend.HostMemory); err != nil {
		add(err)
	}
	if _, err := parseMaxTime(c.Suspend.MaxTime); err != nil {
		add(err)
	}
	if o := c.Suspend.RestoreOrder; o != "" && o != RestoreLongest && o != RestoreFits {
		add(fmt.Errorf("suspend.restore_order: %q: use %q (the process suspended longest first, the others wait behind it) or %q (any whose memory fits)", o, RestoreLongest, RestoreFits))
	}
	add(absPath("driver.root", c.Driver.Root))
	add(absPath("driver.dev_root", c.Driver.DevRoot))
	add(absPath("library.dir", c.Library.Dir))
	if len(c.Runtimes) == 0 {
		add(errors.New("runtimes: must name at least one runtime (e.g. runc)"))
	}
	for _, r := range c.Runtimes {
		if r == "" || strings.ContainsAny(r, " \t\n") {
			add(fmt.Errorf("runtimes: %q is not a runtime name or path", r))
		}
	}
	if len(c.Driver.LibDirs) == 0 {
		add(errors.New("driver.lib_dirs: must not be empty"))
	}
	for _, d := range c.Driver.LibDirs {
		add(relPath("driver.lib_dirs", d))
	}
	for _, d := range c.Driver.BinDirs {
		add(relPath("driver.bin_dirs", d))
	}
	for _, d := range c.Driver.IPCPaths {
		add(relPath("driver.ipc_paths", d))
	}
	has := map[string]bool{}
	for _, l := range c.Driver.Libraries {
		add(baseName("driver.libraries", l))
		has[l] = true
	}
	for _, need := range []string{"libcuda", "libnvidia-ml"} {
		if !has[need] {
			add(fmt.Errorf("driver.libraries: must include %s", need))
		}
	}
	for _, b := range c.Driver.Binaries {
		add(baseName("driver.binaries", b))
	}
	if _, err := ParseComputePeriod(c.Library.ComputePeriod); err != nil {
		add(fmt.Errorf("library.compute_period: %w", err))
	}
	if !levels[c.Library.LogLevel] {
		add(fmt.Errorf("library.log_level: %q: use error, warn, info or debug", c.Library.LogLevel))
	}
	if !levels[c.Log.Level] {
		add(fmt.Errorf("log.level: %q: use error, warn, info or debug", c.Log.Level))
	}
	if c.Log.File != "" {
		add(absPath("log.file", c.Log.File))
	}
	if c.Defaults.MemoryLimit != "" {
		if _, err := request.ParseSize(c.Defaults.MemoryLimit); err != nil {
			add(fmt.Errorf("defaults.memory_limit: %q: %v; use bytes or a number with Ki, Mi, Gi, Ti, K, M, G, T (e.g. 4Gi)", c.Defaults.MemoryLimit, err))
		}
	}
	if v := c.Defaults.Priority; v != "" {
		if _, err := tenant.ParsePriority(v); err != nil {
			add(fmt.Errorf("defaults.priority: %q: use high, normal or low", v))
		}
	}
	for _, class := range slices.Sorted(maps.Keys(c.Kubernetes.PriorityClasses)) {
		if v := c.Kubernetes.PriorityClasses[class]; !validPriority(v) {
			add(fmt.Errorf("kubernetes.priority_classes: %q = %q: use high, normal or low", class, v))
		}
	}
	if c.Defaults.ComputeLimit < 0 || c.Defaults.ComputeLimit > 100 {
		add(fmt.Errorf("defaults.compute_limit: %d: use 1-100, or 0 for none", c.Defaults.ComputeLimit))
	}
	if v := c.Kubernetes.CoresLimit; v != "" && v != CoresLimitRequest && v != CoresLimitNone {
		add(fmt.Errorf("kubernetes.cores_limit: %q: use %q (the limit is the cores requested) or %q (no limit)", v, CoresLimitRequest, CoresLimitNone))
	}
	if _, err := MemoryLimitSize(c.Kubernetes.MemoryLimit); err != nil {
		add(fmt.Errorf("kubernetes.memory_limit: %w", err))
	}
	if r, l := c.Defaults.ComputeRequest, c.Defaults.ComputeLimit; r < 0 || r > 100 {
		add(fmt.Errorf("defaults.compute_request: %d: use 1-100, or 0 for none", r))
	} else if l > 0 && r > l {
		add(fmt.Errorf("defaults.compute_request %d is above defaults.compute_limit %d: a request is at most its limit", r, l))
	}
	if c.Defaults.MemoryRequest != "" {
		r, err := request.ParseSize(c.Defaults.MemoryRequest)
		if err != nil {
			add(fmt.Errorf("defaults.memory_request: %q: %v; use bytes or a number with Ki, Mi, Gi, Ti, K, M, G, T (e.g. 4Gi)", c.Defaults.MemoryRequest, err))
		} else if l := c.MemoryDefault(); l > 0 && r > l {
			add(fmt.Errorf("defaults.memory_request %q is above defaults.memory_limit %q: a request is at most its limit", c.Defaults.MemoryRequest, c.Defaults.MemoryLimit))
		}
	}
	add(validateSpatial(&c.Spatial))
	if v := c.Defaults.VisibleDevices; v != "" {
		if _, err := request.Parse([]string{request.EnvVisibleDevices + "=" + v}, nil); err != nil {
			add(fmt.Errorf("defaults.visible_devices: %v", err))
		}
	}
	return errors.Join(errs...)
}

func validateSpatial(s *Spatial) error {
	var errs []error
	seen := map[string]bool{}
	for _, g := range s.GPUs {
		switch {
		case seen[g]:
			errs = append(errs, fmt.Errorf("spatial.gpus: %q listed twice", g))
		case strings.HasPrefix(g, "MIG-"):
			errs = append(errs, fmt.Errorf("spatial.gpus: %q is a MIG instance: name a whole GPU (GPU-…), MPS on MIG is not supported", g))
		case strings.HasPrefix(g, "GPU-"):
			if len(g) <= 4 || len(g) >= contract.UUIDMax || strings.ContainsFunc(g, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
				errs = append(errs, fmt.Errorf("spatial.gpus: %q is not a GPU UUID (GPU-… as nvidia-smi -L prints it)", g))
			}
		default:
			if n, err := strconv.Atoi(g); err != nil || n < 0 || n > 255 || strconv.Itoa(n) != g {
				errs = append(errs, fmt.Errorf("spatial.gpus: %q: name a GPU by its UUID (GPU-…) or its host index (0, 1, …)", g))
			}
		}
		seen[g] = true
	}
	if m := s.MPSControl; filepath.IsAbs(m) {
		errs = append(errs, absPath("spatial.mps_control", m))
	} else {
		errs = append(errs, baseName("spatial.mps_control", m))
	}
	return errors.Join(errs...)
}

// MemoryRequestDefault returns defaults.memory_request in bytes (0 = none).
func (c *Config) MemoryRequestDefault() uint64 {
	n, _ := request.ParseSize(c.Defaults.MemoryRequest)
	return n
}

// MemoryDefault returns defaults.memory_limit in bytes (0 = none).
func (c *Config) MemoryDefault() uint64 {
	n, _ := request.ParseSize(c.Defaults.MemoryLimit)
	return n
}

// RequestDefaults is what request.ParseWithDefaults needs from the config.
func (c *Config) RequestDefaults() request.Defaults {
	return request.Defaults{VisibleDevices: c.Defaults.VisibleDevices, AcceptNvidiaVisibleDevices: c.AcceptNvidiaVisibleDevicesEnvvar}
}

// DriverPath joins rel to the driver root.
func (c *Config) DriverPath(rel string) string { return filepath.Join(c.Driver.Root, rel) }

// DevPath returns the host path of /dev/<name>.
func (c *Config) DevPath(name string) string { return filepath.Join(c.Driver.DevRoot, "dev", name) }

// PathEnv names another configuration file (tests, non-standard installs).
const PathEnv = "VGPU_CONFIG"

// Path is the configuration file every host tool reads: $VGPU_CONFIG, else DefaultPath.
func Path() string {
	if p := os.Getenv(PathEnv); p != "" {
		return p
	}
	return DefaultPath
}

// DefaultStateDir is state_dir when the configuration names none or cannot
// be read (delete of an existing container with a broken config file).
const DefaultStateDir = "/run/vgpu/containers"

// Files of one container's state directory, <state_dir>/<id>/ (named once,
// by internal/tenant: its Places), and the lock of state_dir itself
// (docs/design.md "State directory").
const (
	StateQuota   = tenant.QuotaName   // the quota file, mounted at contract.QuotaPath
	StatePreload = tenant.PreloadName // mounted at /etc/ld.so.preload
	StateShared  = tenant.SharedName  // the shared accounting region's directory
	StateHost    = tenant.HostName    // written by the host only (hostpids, the share file), mounted read-only
	StateInfo    = tenant.RecordName  // the record (internal/state)
	StateInitPID = "init.pid"         // runc run's pid file when the caller gave none (vgpu node finds the cgroup from it)
	StateLock    = ".lock"            // in state_dir: serializes creation and slot assignment
	StateNode    = ".node"            // in state_dir: vgpu node's heartbeat and events (internal/events)
	StateGPUs    = ".gpus"            // in state_dir: vgpu-runtime's record of the GPU list (internal/discover, cache.go)
	StateMPS     = ".mps"             // in state_dir: one directory per spatial GPU's MPS control daemon (internal/mpsdir)
)

// The directories of one spatial GPU's MPS control daemon,
// <state_dir>/.mps/<uuid>/ (root only, 0700): pipe/ (CUDA_MPS_PIPE_DIRECTORY,
// 0755, mounted read-only into the GPU's containers), log/
// (CUDA_MPS_LOG_DIRECTORY, 0700, the host's only) and shm/ (the daemon's and
// its servers' /dev/shm, shared with the GPU's containers: MPS clients and
// their server meet in POSIX shared memory).
const (
	MPSPipe = "pipe"
	MPSLog  = "log"
	MPSShm  = "shm"
)

// MPSDir is <state_dir>/.mps/<uuid>.
func (c *Config) MPSDir(uuid string) string {
	root := c.StateDir
	if c.MPSStateDir != "" {
		root = c.MPSStateDir
	}
	return filepath.Join(root, StateMPS, uuid)
}

// ContainerStateDir is <state_dir>/<id>.
func (c *Config) ContainerStateDir(id string) string { return filepath.Join(c.StateDir, id) }

// ParseComputePeriod reads a pacing period such as "500ms", "1s" or "0" for
// the quota file's compute-period: nil for "", else whole milliseconds in
// 0..2s.
func ParseComputePeriod(s string) (*int, error) {
	if s == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("compute period %q: want a duration such as 500ms, 1s or 0", s)
	}
	if d < 0 || d > contract.PeriodMaxMS*time.Millisecond || d%time.Millisecond != 0 {
		return nil, fmt.Errorf("compute period %q: want whole milliseconds from 0 to %dms", s, contract.PeriodMaxMS)
	}
	ms := int(d / time.Millisecond)
	return &ms, nil
}

// How engines start vgpu-hook (podman hooks.d entries, the CDI spec's hooks).
const (
	// HookPATH is the hook's PATH: runc starts hooks with only the
	// environment the entry lists.
	HookPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// HookCDIFlag follows the stage when the hook runs from the vgpu.io/gpu
	// CDI spec.
	HookCDIFlag = "--cdi"
)

// HookEnv is the environment of a vgpu-hook entry: PATH, and VGPU_CONFIG
// when the configuration is not at DefaultPath.
func HookEnv(configPath string) ([]string, error) {
	env := []string{"PATH=" + HookPATH}
	if configPath != "" && configPath != DefaultPath {
		if !filepath.IsAbs(configPath) {
			return nil, fmt.Errorf("config path %q is not absolute", configPath)
		}
		env = append(env, PathEnv+"="+configPath)
	}
	return env, nil
}

// ValidID checks that a container id is usable as the name of its state
// directory: letters, digits, _ . - (at most 254, not starting with . _ -).
// A counted regexp repetition would cost every runtime start half a
// millisecond.
func ValidID(id string) error {
	ok := len(id) > 0 && len(id) <= 254
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("container id %q: want letters, digits, _ . - (at most 254, not starting with . _ -)", id)
	}
	return nil
}

func validPriority(v string) bool {
	_, err := tenant.ParsePriority(v)
	return err == nil
}

// DefaultPriority is defaults.priority (normal when unset; Validate
// refuses a bad one).
func (c *Config) DefaultPriority() tenant.Priority {
	p, _ := tenant.ParsePriority(c.Defaults.Priority)
	return p
}

// ClassPriority is the priority kubernetes.priority_classes gives the
// PriorityClass class; ok is false when the table does not list it.
func (c *Config) ClassPriority(class string) (p tenant.Priority, ok bool) {
	v, listed := c.Kubernetes.PriorityClasses[class]
	if !listed {
		return tenant.Normal, false
	}
	p, err := tenant.ParsePriority(v)
	return p, err == nil
}
