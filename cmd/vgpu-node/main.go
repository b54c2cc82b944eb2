// Command vgpu-node is the host daemon (docs/node.md): it holds every limited
// container of the host to its limits from the driver's own figures, serves
// the Prometheus metrics and, in a cluster, the kubelet device plugin or the
// DRA driver. Its flags fill a nodeapp.Config; internal/nodeapp does the rest.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/cliutil"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/node/checkpoint"
	"github.com/vgpu-dev/vgpu/internal/node/mps"
	"github.com/vgpu-dev/vgpu/internal/nodeapp"
	"github.com/vgpu-dev/vgpu/internal/version"
)

const exitStatusHelp = `Exit status: 0 stopped by SIGTERM or SIGINT; 1 failed; 2 the command line is
wrong (unknown command or flag, bad value).`

func main() {
	if os.Getenv(mps.ShmExecEnv) != "" {
		// vgpu-node starting an MPS control daemon (internal/node/mps)
		err := mps.ExecInShm(os.Args[1:])
		fmt.Fprintf(os.Stderr, "vgpu-node: MPS control daemon: %v\n", err)
		os.Exit(1)
	}
	if os.Getenv(checkpoint.HelperEnv) != "" {
		// vgpu-node calling the driver's checkpoint API on a tenant's
		// process, in a helper it can kill (internal/node/checkpoint)
		os.Exit(checkpoint.HelperMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprint(c.App.Writer, versionLines()) }
	def := nodeapp.DefaultConfig()
	app := &cli.App{
		Name:    "vgpu-node",
		Usage:   "hold every limited container on this host to its limits from the driver's own figures (host daemon)",
		Version: version.Version,
		Description: `Without a command, runs the daemon (docs/node.md); with --device-plugin or
--dra it also serves Kubernetes (docs/kubernetes.md). vgpu node [flags] runs
this program, for units and DaemonSets written for it.

` + exitStatusHelp,
		Flags: append([]cli.Flag{
			stateDirFlag(),
			&cli.StringFlag{Name: "listen", Value: def.Listen, Usage: "serve Prometheus metrics (those of vgpu-node metrics and the daemon's) on host:port/metrics; empty: none"},
			&cli.DurationFlag{Name: "interval", Value: def.Interval, Usage: "sampling period"},
			&cli.DurationFlag{Name: "grace", Value: def.Grace, Usage: "how long a container may stay above its memory limit + tolerance before its largest process is killed"},
			&cli.DurationFlag{Name: "mps-grace", Value: def.MPSGrace, Usage: "how long a container's process on a spatial GPU may hold the GPU without being an MPS client (NVML's MPS process list or the MPS server's client list) before it is killed (at least --grace)"},
			&cli.StringFlag{Name: "memory-tolerance", Value: def.MemoryTolerance, Usage: "memory above a limit that is never acted on (plus 2% of the limit)"},
			&cli.StringFlag{Name: "nvml", Usage: "the driver's libnvidia-ml.so.<version> (default: found under the configuration's driver root)"},
			&cli.StringFlag{Name: "cgroup-root", Value: def.CgroupRoot, Usage: "where the cgroup filesystem is mounted"},
			&cli.StringFlag{Name: "pod-resources-socket", Value: def.PodResourcesSocket, Usage: "the kubelet's PodResources API socket (<kubelet --root-dir>/pod-resources/kubelet.sock): names the pod, namespace and container of device-plugin containers in vgpu status and the metrics; empty: do not ask"},
			&cli.BoolFlag{Name: "thaw", Usage: "only thaw what a vgpu-node on this state directory froze and did not thaw (killed, crashed), then exit: the systemd unit's ExecStopPost"},
			&cli.BoolFlag{Name: "device-plugin", Usage: "also serve the Kubernetes device plugin (vgpu.io/memory, vgpu.io/cores; flags below, docs/kubernetes-device-plugin.md)"},
		}, append(devicePluginFlags(), draFlags()...)...),
		Action: func(c *cli.Context) error {
			cfg := nodeapp.Config{
				StateDir: c.String("state-dir"), Listen: c.String("listen"), Interval: c.Duration("interval"),
				Grace: c.Duration("grace"), MPSGrace: c.Duration("mps-grace"), MemoryTolerance: c.String("memory-tolerance"), NVML: c.String("nvml"),
				CgroupRoot: c.String("cgroup-root"), PodResourcesSocket: c.String("pod-resources-socket"),
				Thaw: c.Bool("thaw"), Kubeconfig: c.String("kubeconfig"), NodeName: c.String("node-name"),
			}
			if c.Bool("device-plugin") {
				dp := devicePluginConfig(c)
				cfg.DevicePlugin = &dp
			}
			if c.Bool("dra") {
				cfg.DRA = &nodeapp.DRAConfig{Kubeconfig: c.String("kubeconfig"), NodeName: c.String("node-name"),
					RegistrarDir: c.String("dra-registrar-dir"), PluginDir: c.String("dra-plugin-dir"), CDIDir: c.String("cdi-dir")}
			}
			return run("vgpu-node", func(ctx context.Context) error { return nodeapp.Run(ctx, cfg) })
		},
		Commands: []*cli.Command{{
			Name:  "device-plugin",
			Usage: "serve the Kubernetes device plugin (vgpu.io/memory, vgpu.io/cores) to the kubelet, without the daemon",
			Description: `Advertises vgpu.io/memory (device memory in --memory-unit units) and
vgpu.io/cores (percent of a GPU) for every healthy GPU, and registers them with
the kubelet through --plugin-dir/kubelet.sock (again whenever the kubelet
restarts). Allocate writes a grant into the config's kubernetes.grant_dir;
vgpu-runtime gives a container only what its grants say. See docs/kubernetes-device-plugin.md.
In a cluster, run it as part of the node daemon: vgpu-node --device-plugin.`,
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "config", EnvVars: []string{config.PathEnv}, Value: config.DefaultPath, Usage: "vgpu configuration (driver root, grant directory)"},
			}, devicePluginFlags()...),
			Action: func(c *cli.Context) error {
				return run("vgpu-node device-plugin", func(ctx context.Context) error {
					return nodeapp.RunDevicePlugin(ctx, c.String("config"), devicePluginConfig(c))
				})
			},
		}, {
			Name:  "metrics",
			Usage: "serve the figures of `vgpu status` as Prometheus metrics on /metrics, without the daemon",
			Flags: []cli.Flag{
				stateDirFlag(),
				&cli.StringFlag{Name: "listen", Value: def.Listen, Usage: "address to listen on (host:port)"},
			},
			Action: func(c *cli.Context) error {
				return run("vgpu-node metrics", func(ctx context.Context) error {
					return nodeapp.ServeMetrics(ctx, c.String("listen"), c.String("state-dir"))
				})
			},
		}, {
			Name:  "version",
			Usage: "print the version and commit of vgpu-node and the driver's version",
			Action: func(c *cli.Context) error {
				if c.Args().Present() {
					return cli.Exit("vgpu-node version: takes no arguments", cliutil.ExitUsage)
				}
				fmt.Fprint(c.App.Writer, versionLines())
				return nil
			},
		}},
	}
	cliutil.Strict(app)
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(cliutil.ExitFailed)
	}
}

// run runs f until SIGTERM or SIGINT; an error is one line naming prog.
func run(prog string, f func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := f(ctx); err != nil {
		return cli.Exit(prog+": "+err.Error(), cliutil.ExitFailed)
	}
	return nil
}

func versionLines() string {
	cfg, err := config.Load(config.Path())
	return version.Line("vgpu-node") + "\n" + version.Driver(cfg, err) + "\n"
}

func stateDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "state-dir", Usage: "vgpu state directory (default: state_dir of the configuration, else " + config.DefaultStateDir + ")"}
}

// devicePluginFlags configure the kubelet device plugin, for both
// `vgpu-node device-plugin` and `vgpu-node --device-plugin`.
func devicePluginFlags() []cli.Flag {
	d := nodeapp.DefaultDevicePlugin
	return []cli.Flag{
		&cli.StringFlag{Name: "plugin-dir", Value: d.PluginDir, Usage: "the kubelet's device-plugin directory (holds kubelet.sock)"},
		&cli.StringFlag{Name: "memory-unit", Value: d.MemoryUnit, Usage: "device memory per vgpu.io/memory unit"},
		&cli.DurationFlag{Name: "health-interval", Value: d.HealthInterval, Usage: "how often the GPUs are listed again (health)"},
	}
}

func devicePluginConfig(c *cli.Context) nodeapp.DevicePluginConfig {
	return nodeapp.DevicePluginConfig{PluginDir: c.String("plugin-dir"), MemoryUnit: c.String("memory-unit"), HealthInterval: c.Duration("health-interval")}
}

// draFlags configure the DRA driver of `vgpu-node --dra`.
func draFlags() []cli.Flag {
	d := nodeapp.DefaultDRA
	return []cli.Flag{
		&cli.BoolFlag{Name: "dra", Usage: "also serve the Kubernetes DRA driver vgpu.io (ResourceSlices with consumable memory and cores; docs/kubernetes-dra.md)"},
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig of the API server: for --dra, and to post each kill, freeze, escalation and reclaim as an Event on the container's pod (default with --dra or --device-plugin in a pod: the in-cluster config)"},
		&cli.StringFlag{Name: "node-name", EnvVars: []string{"NODE_NAME"}, Usage: "this node's name in the API server (--dra; Events go only to pods bound to it; default: the host name)"},
		&cli.StringFlag{Name: "dra-registrar-dir", Value: d.RegistrarDir, Usage: "DRA: the kubelet's plugin registry directory"},
		&cli.StringFlag{Name: "dra-plugin-dir", Value: d.PluginDir, Usage: "DRA: the driver's socket directory (under the kubelet's plugins directory)"},
		&cli.StringFlag{Name: "cdi-dir", Value: d.CDIDir, Usage: "DRA: where the per-claim CDI specs go (one of the container runtime's cdi_spec_dirs)"},
	}
}
