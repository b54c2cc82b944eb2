package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/dra"
	"github.com/vgpu-dev/vgpu/internal/metricsserver"
	"github.com/vgpu-dev/vgpu/internal/node/daemon"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/node/podres"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// nodeCommand is `vgpu node`, the host daemon (docs/node.md).
func nodeCommand() *cli.Command {
	def := enforce.DefaultConfig()
	return &cli.Command{
		Name:  "node",
		Usage: "hold every limited container on this host to its limits from the driver's own figures (host daemon)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "state-dir", Usage: "vgpu state directory (default: state_dir of the configuration, else " + config.DefaultStateDir + ")"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:9400", Usage: "serve Prometheus metrics (vgpu metrics' and the daemon's) on host:port/metrics; empty: none"},
			&cli.DurationFlag{Name: "interval", Value: daemon.DefaultInterval, Usage: "sampling period"},
			&cli.DurationFlag{Name: "grace", Value: def.Grace, Usage: "how long a container may stay above its memory limit + tolerance before its largest process is killed"},
			&cli.StringFlag{Name: "memory-tolerance", Value: "128Mi", Usage: "memory above a limit that is never acted on (plus 2% of the limit)"},
			&cli.StringFlag{Name: "nvml", Usage: "the driver's libnvidia-ml.so.<version> (default: found under the configuration's driver root)"},
			&cli.StringFlag{Name: "cgroup-root", Value: "/sys/fs/cgroup", Usage: "where the cgroup filesystem is mounted"},
			&cli.StringFlag{Name: "pod-resources-socket", Value: podres.DefaultSocket, Usage: "the kubelet's PodResources API socket (<kubelet --root-dir>/pod-resources/kubelet.sock): names the pod, namespace and container of device-plugin containers in vgpu status and the metrics; empty: do not ask"},
			&cli.BoolFlag{Name: "thaw", Usage: "only thaw what a vgpu node on this state directory froze and did not thaw (killed, crashed), then exit: the systemd unit's ExecStopPost"},
			&cli.BoolFlag{Name: "device-plugin", Usage: "also serve the Kubernetes device plugin (vgpu.io/memory, vgpu.io/cores; flags below, docs/kubernetes.md)"},
		}, append(devicePluginFlags(), draFlags()...)...),
		Action: func(c *cli.Context) error {
			fail := func(err error) error { return cli.Exit("vgpu node: "+err.Error(), 1) }
			if c.Bool("thaw") {
				thawed, err := daemon.ThawRecorded(resolveStateDir(c.String("state-dir")), c.String("cgroup-root"))
				fmt.Fprintf(os.Stderr, "vgpu node: thawed %d cgroup(s) it had left frozen %v\n", len(thawed), thawed)
				if err != nil {
					return fail(err)
				}
				return nil
			}
			pol := def
			pol.Grace = c.Duration("grace")
			tol, err := request.ParseSize(c.String("memory-tolerance"))
			if err != nil {
				return fail(fmt.Errorf("--memory-tolerance %q: %v (e.g. 128Mi)", c.String("memory-tolerance"), err))
			}
			pol.MemoryTolerance = tol
			if c.Duration("interval") <= 0 || c.Duration("interval") > 10*time.Second {
				return fail(fmt.Errorf("--interval %v: want more than 0 and at most 10s", c.Duration("interval")))
			}
			cfg, err := config.Load(config.Path())
			if err != nil {
				return fail(err)
			}
			var plugin *deviceplugin.Plugin
			if c.Bool("device-plugin") {
				if plugin, err = newDevicePlugin(c, cfg); err != nil {
					return fail(err)
				}
			}
			nvmlPath := c.String("nvml")
			if nvmlPath == "" {
				h, err := discover.DriverFiles(cfg)
				if err != nil {
					return fail(err)
				}
				for _, l := range h.Libraries {
					if l.Name == "libnvidia-ml.so."+h.DriverVersion {
						nvmlPath = l.Path
					}
				}
				if nvmlPath == "" {
					return fail(fmt.Errorf("no libnvidia-ml.so.%s under the driver root %s (set --nvml)", h.DriverVersion, cfg.Driver.Root))
				}
			}
			stateDir := resolveStateDir(c.String("state-dir"))
			var driver *dra.Driver
			if c.Bool("dra") {
				if driver, err = newDRADriver(c, cfg, stateDir); err != nil {
					return fail(err)
				}
			}
			src, err := nvmlfeed.Open(nvmlPath)
			if err != nil {
				return fail(err)
			}
			defer src.Close()
			o := daemon.Options{StateDir: stateDir, CgroupRoot: c.String("cgroup-root"),
				Interval: c.Duration("interval"), Policy: pol, Source: src, Log: os.Stderr, NVMLPath: nvmlPath}
			reg := prometheus.NewRegistry()
			o.Registry = reg
			poster, err := newEventPoster(c, stateDir)
			if err != nil {
				return fail(err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if addr := c.String("listen"); addr != "" {
				reg.MustRegister(&status.Collector{Options: status.Options{StateDir: o.StateDir}})
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
				srv, err := metricsserver.Listen(addr, mux, metricsserver.Options{ErrorLog: os.Stderr})
				if err != nil {
					return fail(err)
				}
				o.MetricsURL = "http://" + srv.Addr().String() + "/metrics"
				defer srv.Close()
				fmt.Fprintf(os.Stderr, "vgpu node: metrics on %s\n", o.MetricsURL)
			}
			d, err := daemon.New(o)
			if err != nil {
				return fail(err)
			}
			if poster != nil {
				d.Notify(poster.Notify)
				defer poster.Stop()
			}
			if sock := c.String("pod-resources-socket"); sock != "" {
				// Only containers that carry device-plugin grants make it ask
				// the kubelet: on a host without Kubernetes it stays silent.
				n, err := podres.New(podres.Options{StateDir: o.StateDir, GrantDir: cfg.Kubernetes.GrantDir,
					Owners: podres.Kubelet{Socket: sock}, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
				if err != nil {
					return fail(err)
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
			if len(services) == 0 {
				return d.Run(ctx)
			}
			// Any one stopping stops all: the kubelet restarts the pod,
			// rather than a node that enforces but allocates nothing (or
			// allocates with no daemon holding containers to it).
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			errs := make(chan error, len(services))
			for _, run := range services {
				go func() { errs <- run(ctx); cancel() }()
			}
			derr := d.Run(ctx)
			cancel()
			all := []error{derr}
			for range services {
				all = append(all, <-errs)
			}
			if err := errors.Join(all...); err != nil {
				return fail(err)
			}
			return nil
		},
	}
}
