package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/request"
)

// devicePluginFlags configure the kubelet device plugin, for both
// `vgpu device-plugin` and `vgpu node --device-plugin`.
func devicePluginFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "plugin-dir", Value: "/var/lib/kubelet/device-plugins", Usage: "the kubelet's device-plugin directory (holds kubelet.sock)"},
		&cli.StringFlag{Name: "memory-unit", Value: "1Gi", Usage: "device memory per vgpu.io/memory unit"},
		&cli.DurationFlag{Name: "health-interval", Value: 30 * time.Second, Usage: "how often the GPUs are listed again (health)"},
	}
}

// newDevicePlugin builds the plugin from devicePluginFlags and cfg.
func newDevicePlugin(c *cli.Context, cfg *config.Config) (*deviceplugin.Plugin, error) {
	unit, err := request.ParseSize(c.String("memory-unit"))
	if err != nil {
		return nil, fmt.Errorf("--memory-unit %s: %v (e.g. 1Gi, 512Mi)", c.String("memory-unit"), err)
	}
	return deviceplugin.New(deviceplugin.Options{
		PluginDir: c.String("plugin-dir"), GrantDir: cfg.Kubernetes.GrantDir, UnitBytes: unit,
		HealthInterval: c.Duration("health-interval"), Inventory: deviceplugin.HostInventory{Config: cfg},
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Placement: cfg.Kubernetes.Placement,
	})
}

// devicePluginCommand is `vgpu device-plugin`: the kubelet device plugin
// alone (`vgpu node --device-plugin` serves the same plugin beside the daemon).
func devicePluginCommand() *cli.Command {
	return &cli.Command{
		Name:  "device-plugin",
		Usage: "serve the Kubernetes device plugin (vgpu.io/memory, vgpu.io/cores) to the kubelet",
		Description: `Advertises vgpu.io/memory (device memory in --memory-unit units) and
vgpu.io/cores (percent of a GPU) for every healthy GPU, and registers them with
the kubelet through --plugin-dir/kubelet.sock (again whenever the kubelet
restarts). Allocate writes a grant into the config's kubernetes.grant_dir;
vgpu-runtime gives a container only what its grants say. See docs/kubernetes.md.
In a cluster, run it as part of the node daemon: vgpu node --device-plugin.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", EnvVars: []string{config.PathEnv}, Value: config.DefaultPath, Usage: "vgpu configuration (driver root, grant directory)"},
		}, devicePluginFlags()...),
		Action: func(c *cli.Context) error {
			fail := func(err error) error { return cli.Exit("vgpu device-plugin: "+err.Error(), 1) }
			cfg, err := config.Load(c.String("config"))
			if err != nil {
				return fail(err)
			}
			p, err := newDevicePlugin(c, cfg)
			if err != nil {
				return fail(err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := p.Run(ctx); err != nil {
				return fail(err)
			}
			return nil
		},
	}
}
