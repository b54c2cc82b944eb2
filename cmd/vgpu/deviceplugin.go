package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/request"
)

// devicePluginCommand is `vgpu device-plugin`: the kubelet device plugin.
// (When `vgpu node` exists it runs the same deviceplugin.Plugin.)
func devicePluginCommand() *cli.Command {
	return &cli.Command{
		Name:  "device-plugin",
		Usage: "serve the Kubernetes device plugin (vgpu.io/memory, vgpu.io/cores) to the kubelet",
		Description: `Advertises vgpu.io/memory (device memory in --memory-unit units) and
vgpu.io/cores (percent of a GPU) for every healthy GPU, and registers them with
the kubelet through --plugin-dir/kubelet.sock (again whenever the kubelet
restarts). Allocate writes a grant into the config's kubernetes.grant_dir;
vgpu-runtime gives a container only what its grants say. See docs/kubernetes.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", EnvVars: []string{"VGPU_CONFIG"}, Value: config.DefaultPath, Usage: "vgpu configuration (driver root, grant directory)"},
			&cli.StringFlag{Name: "plugin-dir", Value: "/var/lib/kubelet/device-plugins", Usage: "the kubelet's device-plugin directory (holds kubelet.sock)"},
			&cli.StringFlag{Name: "memory-unit", Value: "1Gi", Usage: "device memory per vgpu.io/memory unit"},
			&cli.DurationFlag{Name: "health-interval", Value: 30e9, Usage: "how often the GPUs are listed again (health)"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("config"))
			if err != nil {
				return cli.Exit("vgpu device-plugin: "+err.Error(), 1)
			}
			unit, err := request.ParseSize(c.String("memory-unit"))
			if err != nil {
				return cli.Exit("vgpu device-plugin: --memory-unit "+c.String("memory-unit")+": "+err.Error()+" (e.g. 1Gi, 512Mi)", 2)
			}
			p, err := deviceplugin.New(deviceplugin.Options{
				PluginDir: c.String("plugin-dir"), GrantDir: cfg.Kubernetes.GrantDir, UnitBytes: unit,
				HealthInterval: c.Duration("health-interval"), Inventory: deviceplugin.HostInventory{Config: cfg},
				Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
			})
			if err != nil {
				return cli.Exit("vgpu device-plugin: "+err.Error(), 1)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := p.Run(ctx); err != nil {
				return cli.Exit("vgpu device-plugin: "+err.Error(), 1)
			}
			return nil
		},
	}
}
