// Package nodeapp is vgpu-node: the host daemon (internal/node/daemon) and
// what it serves beside it (Prometheus metrics, the kubelet device plugin,
// the DRA driver), built from a Config that cmd/vgpu-node fills from its
// flags. The vgpu CLI links none of it (its start stays that of a small
// program; cmd/vgpu's TestNoHeavyDependencies).
package nodeapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/dra"
	"github.com/vgpu-dev/vgpu/internal/metricsserver"
	"github.com/vgpu-dev/vgpu/internal/mpsdir"
	"github.com/vgpu-dev/vgpu/internal/node/checkpoint"
	"github.com/vgpu-dev/vgpu/internal/node/daemon"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/kevents"
	"github.com/vgpu-dev/vgpu/internal/node/mps"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/node/podres"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/status"
	"github.com/vgpu-dev/vgpu/internal/status/metrics"
)

// Config is one vgpu-node: the daemon's settings and the services it runs
// beside the daemon. Errors name the flag of cmd/vgpu-node that sets a field.
type Config struct {
	StateDir           string        // "": state_dir of the configuration
	Listen             string        // metrics address; "": none
	Interval           time.Duration // sampling period
	Grace              time.Duration
	MPSGrace           time.Duration // 0: enforce's default
	MemoryTolerance    string        // a size, e.g. 128Mi
	NVML               string        // libnvidia-ml.so.<version>; "": under the driver root
	CgroupRoot         string
	PodResourcesSocket string // "": do not ask the kubelet
	// Kubeconfig and NodeName: the API server to post each kill, freeze,
	// escalation and reclaim to as an Event on the container's pod
	// (internal/node/kevents); "": none, except serving Kubernetes from a
	// pod (the in-cluster config).
	Kubeconfig, NodeName string
	// Thaw only thaws what a daemon on StateDir froze and did not thaw
	// (killed, crashed), then returns: the systemd unit's ExecStopPost.
	Thaw         bool
	DevicePlugin *DevicePluginConfig // nil: no device plugin
	DRA          *DRAConfig          // nil: no DRA driver
}

// DevicePluginConfig is the kubelet device plugin's.
type DevicePluginConfig struct {
	PluginDir      string
	MemoryUnit     string // device memory per vgpu.io/memory unit, e.g. 1Gi
	HealthInterval time.Duration
}

// DRAConfig is the DRA driver's.
type DRAConfig struct {
	Kubeconfig   string // "": the pod's in-cluster config
	NodeName     string // "": the host name
	RegistrarDir string
	PluginDir    string
	CDIDir       string
}

// DefaultConfig holds the defaults of every field that has one.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:9400", Interval: daemon.DefaultInterval, Grace: enforce.DefaultConfig().Grace, MPSGrace: enforce.DefaultConfig().MPSGrace,
		MemoryTolerance: "128Mi", CgroupRoot: "/sys/fs/cgroup", PodResourcesSocket: podres.DefaultSocket}
}

// DefaultDevicePlugin and DefaultDRA are the services' defaults.
var (
	DefaultDevicePlugin = DevicePluginConfig{PluginDir: "/var/lib/kubelet/device-plugins", MemoryUnit: "1Gi", HealthInterval: 30 * time.Second}
	DefaultDRA          = DRAConfig{RegistrarDir: dra.DefaultRegistrarDir, PluginDir: dra.DefaultPluginDir, CDIDir: dra.DefaultCDIDir}
)

// Run runs the daemon and the services c names until ctx ends or one of
// them stops.
func Run(ctx context.Context, c Config) error {
	if c.Thaw {
		thawed, err := daemon.ThawRecorded(config.StateDirOf(c.StateDir), c.CgroupRoot)
		fmt.Fprintf(os.Stderr, "vgpu-node: thawed %d cgroup(s) it had left frozen %v\n", len(thawed), thawed)
		return err
	}
	pol := enforce.DefaultConfig()
	pol.Grace = c.Grace
	if c.MPSGrace > 0 {
		pol.MPSGrace = c.MPSGrace
	}
	tol, err := request.ParseSize(c.MemoryTolerance)
	if err != nil {
		return fmt.Errorf("--memory-tolerance %q: %v (e.g. 128Mi)", c.MemoryTolerance, err)
	}
	pol.MemoryTolerance = tol
	if c.Interval <= 0 || c.Interval > 10*time.Second {
		return fmt.Errorf("--interval %v: want more than 0 and at most 10s", c.Interval)
	}
	cfg, err := config.Load(config.Path())
	if err != nil {
		return err
	}
	var plugin *deviceplugin.Plugin
	if c.DevicePlugin != nil {
		if plugin, err = newDevicePlugin(*c.DevicePlugin, cfg, c.Kubeconfig, c.NodeName); err != nil {
			return err
		}
	}
	nvmlPath := c.NVML
	host, hostErr := discover.DriverFiles(cfg)
	if nvmlPath == "" {
		h, err := host, hostErr
		if err != nil {
			return err
		}
		for _, l := range h.Libraries {
			if l.Name == "libnvidia-ml.so."+h.DriverVersion {
				nvmlPath = l.Path
			}
		}
		if nvmlPath == "" {
			return fmt.Errorf("no libnvidia-ml.so.%s under the driver root %s (set --nvml)", h.DriverVersion, cfg.Driver.Root)
		}
	}
	stateDir := config.StateDirOf(c.StateDir)
	var driver *dra.Driver
	if c.DRA != nil {
		if driver, err = newDRADriver(*c.DRA, cfg, stateDir); err != nil {
			return err
		}
	}
	src, err := nvmlfeed.Open(nvmlPath)
	if err != nil {
		return err
	}
	leaveDriver := false // a round hangs in it: nvmlShutdown could hang too
	defer func() {
		if !leaveDriver {
			src.Close()
		}
	}()
	o := daemon.Options{StateDir: stateDir, CgroupRoot: c.CgroupRoot,
		Interval: c.Interval, Policy: pol, Source: src, Log: os.Stderr, NVMLPath: nvmlPath,
		BorrowFree: cfg.BorrowFree()}
	o.Suspend, o.NoSuspend = suspendOptions(ctx, cfg, host, hostErr)
	if o.NoSuspend != "" {
		fmt.Fprintf(os.Stderr, "vgpu-node: memory_reclaim = \"suspend\" but borrowed memory is taken back by kills: %s\n", o.NoSuspend)
	}
	reg := prometheus.NewRegistry()
	o.Registry = reg
	var live atomic.Pointer[daemon.Daemon]
	if c.Listen != "" {
		reg.MustRegister(&metrics.Collector{Options: status.Options{StateDir: o.StateDir}})
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { healthz(w, live.Load()) })
		srv, err := metricsserver.Listen(c.Listen, mux, metricsserver.Options{ErrorLog: os.Stderr})
		if err != nil {
			return err
		}
		defer srv.Close()
		o.MetricsURL = "http://" + srv.Addr().String() + "/metrics"
		fmt.Fprintf(os.Stderr, "vgpu-node: metrics on %s\n", o.MetricsURL)
	}
	poster, err := kevents.Start(kevents.Config{Kubeconfig: c.Kubeconfig, Serving: c.DevicePlugin != nil || c.DRA != nil,
		NodeName: c.NodeName, StateDir: stateDir})
	if err != nil {
		return err
	}
	var d *daemon.Daemon
	sups, err := mpsSupervisors(cfg, stateDir, src, func(kind, gpu, detail string) { d.Record(kind, gpu, detail) })
	if err != nil {
		return err
	}
	if len(sups) > 0 {
		o.MPS = map[string]daemon.MPSDaemon{}
		for u, s := range sups {
			o.MPS[u] = s
		}
	}
	o.OnRound = watchdog()
	d, err = daemon.New(o)
	if err != nil {
		return err
	}
	live.Store(d)
	if len(sups) > 0 {
		// started after d exists (their events go to it); stopped (quit)
		// after the daemon's loop ends, waited for
		mctx, mcancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, s := range sups {
			wg.Add(1)
			go func() { defer wg.Done(); s.Run(mctx) }()
		}
		defer func() { mcancel(); wg.Wait() }()
	}
	if poster != nil {
		d.Notify(poster.Notify)
		defer poster.Stop()
	}
	if c.PodResourcesSocket != "" {
		// Only containers that carry device-plugin grants make it ask
		// the kubelet: on a host without Kubernetes it stays silent.
		n, err := podres.New(podres.Options{StateDir: o.StateDir, GrantDir: cfg.Kubernetes.GrantDir,
			Owners: podres.Kubelet{Socket: c.PodResourcesSocket}, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
		if err != nil {
			return err
		}
		go n.Run(ctx, time.Second)
	}
	var services []func(context.Context) error
	if plugin != nil {
		services = append(services, plugin.Run)
	}
	if driver != nil {
		services = append(services, driver.Run)
	}
	runDaemon := func(ctx context.Context) error {
		err := d.Run(ctx)
		leaveDriver = errors.Is(err, daemon.ErrRoundStuck)
		return err
	}
	if len(services) == 0 {
		return runDaemon(ctx)
	}
	// Any one stopping stops all: the kubelet restarts the pod, rather than
	// a node that enforces but allocates nothing (or allocates with no
	// daemon holding containers to it).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(services))
	for _, run := range services {
		go func() { errs <- run(ctx); cancel() }()
	}
	derr := runDaemon(ctx)
	cancel()
	all := []error{derr}
	for range services {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// healthz answers the liveness probe: 200 while the daemon finishes its
// rounds, 503 once the last one is older than daemon.Healthy allows (a
// round that hangs) or before the daemon exists.
func healthz(w http.ResponseWriter, d *daemon.Daemon) {
	if d == nil {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	last := d.LastRound()
	if !d.Healthy(time.Now()) {
		http.Error(w, fmt.Sprintf("no enforcement round finished since %s", last.UTC().Format(time.RFC3339)), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "ok: last round %s\n", last.UTC().Format(time.RFC3339Nano))
}

// watchdog feeds the service manager (systemd, Type=notify): READY=1 after
// the first round, WATCHDOG=1 after each; a round that hangs stops the
// feed and WatchdogSec= restarts the service. Nothing without
// NOTIFY_SOCKET.
func watchdog() func() {
	ready := false
	return func() {
		if !ready {
			ready = true
			_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyReady)
		}
		_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog)
	}
}

// mpsSupervisors returns a control daemon supervisor per spatial GPU
// (config spatial.gpus, by UUID or host index), none when there is none.
func mpsSupervisors(cfg *config.Config, stateDir string, src nvmlfeed.Source, record func(kind, gpu, detail string)) (map[string]*mps.Supervisor, error) {
	if len(cfg.Spatial.GPUs) == 0 {
		return nil, nil
	}
	bin, err := mps.Find(cfg)
	if err != nil {
		return nil, err
	}
	l, ok := src.(nvmlfeed.GPULister)
	if !ok {
		return nil, errors.New("spatial.gpus: the NVML source lists no GPUs")
	}
	gpus, err := l.GPUs()
	if err != nil {
		return nil, fmt.Errorf("spatial.gpus: listing the GPUs: %w", err)
	}
	c := *cfg
	c.StateDir = stateDir
	starter := ""
	if os.Geteuid() == 0 {
		// the daemon's /dev/shm is the GPU's shm directory (mps.ExecInShm)
		if starter, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	out := map[string]*mps.Supervisor{}
	for _, want := range cfg.Spatial.GPUs {
		found := false
		for _, g := range gpus {
			if !c.IsSpatial(g.Index, g.UUID) || (want != g.UUID && want != fmt.Sprint(g.Index)) {
				continue
			}
			found = true
			uuid := g.UUID
			out[uuid] = mps.New(mps.Options{UUID: uuid, Binary: bin, Dirs: mpsdir.Of(&c, uuid), Starter: starter,
				Event: func(kind, detail string) { record(kind, uuid, detail) }})
		}
		if !found {
			return nil, fmt.Errorf("spatial.gpus: %q: no such GPU on this host (%d GPU(s); name one by its UUID or host index)", want, len(gpus))
		}
	}
	return out, nil
}

// RunDevicePlugin serves the kubelet device plugin alone, with the vgpu
// configuration at configPath, until ctx ends.
func RunDevicePlugin(ctx context.Context, configPath string, c DevicePluginConfig) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return err
	}
	p, err := newDevicePlugin(c, cfg, "", "")
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

// ServeMetrics serves the metrics of stateDir ("": the configured one) on
// listen until ctx ends, without the daemon.
func ServeMetrics(ctx context.Context, listen, stateDir string) error {
	if err := status.CheckStateDir(stateDir); err != nil {
		return err
	}
	o := status.Options{StateDir: config.StateDirOf(stateDir)}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(o))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "vgpu-node metrics: see /metrics")
	})
	srv, err := metricsserver.Listen(listen, mux, metricsserver.Options{ErrorLog: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "vgpu-node metrics: serving %s on http://%s/metrics\n", o.StateDir, srv.Addr())
	<-ctx.Done()
	return srv.Close()
}

// suspendOptions are the daemon's suspension settings under
// memory_reclaim = "suspend": nil with why when the driver's library has
// no checkpoint API (a helper asks it, as every suspension will); nil and
// "" under memory_reclaim = "kill".
func suspendOptions(ctx context.Context, cfg *config.Config, host *discover.Host, hostErr error) (*daemon.SuspendOptions, string) {
	if !cfg.SuspendWanted() {
		return nil, ""
	}
	if hostErr != nil {
		return nil, "the driver's files: " + hostErr.Error()
	}
	lib := ""
	for _, l := range host.Libraries {
		if l.Name == "libcuda.so."+host.DriverVersion {
			lib = l.Path
		}
	}
	if lib == "" {
		return nil, fmt.Sprintf("no libcuda.so.%s under the driver root %s", host.DriverVersion, cfg.Driver.Root)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err.Error()
	}
	r := checkpoint.Runner{Exe: exe, Lib: lib, LockTimeout: 10 * time.Second}
	// the daemon's own pid has no CUDA: the driver answers, or has no API
	if _, err := r.Run(ctx, checkpoint.Query, os.Getpid(), 30*time.Second); err != nil {
		return nil, err.Error()
	}
	avail, err := memAvailable()
	if err != nil {
		return nil, err.Error()
	}
	return &daemon.SuspendOptions{Runner: r, HostMemory: cfg.SuspendHostMemory(avail), MaxTime: cfg.SuspendMaxTime(),
		InOrder: cfg.Suspend.RestoreOrder != config.RestoreFits, LockTimeout: r.LockTimeout}, ""
}

// memAvailable is MemAvailable of /proc/meminfo in bytes.
func memAvailable() (uint64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %q: %v", l, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable")
}
