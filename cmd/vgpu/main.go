// Command vgpu is the vgpu admin CLI: exec, status, setup, cdi, version. The
// host daemon is vgpu-node (`vgpu node` runs it).
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/cliutil"
	"github.com/vgpu-dev/vgpu/internal/version"
	"github.com/vgpu-dev/vgpu/internal/vgpuexec"
)

func main() {
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprint(c.App.Writer, versionLines()) }
	app := &cli.App{
		Name:        "vgpu",
		Usage:       "GPU sharing for containers",
		Version:     version.Version, // never empty: that would hide --version
		Description: exitStatusHelp,
		Commands: []*cli.Command{{
			Name:      "exec",
			Usage:     "run a command with GPU limits, outside any container",
			ArgsUsage: "-- command [args…]",
			Description: `Runs the command with the vgpu library in front of the driver, limited as a
container would be. Its exit status is the command's; 125 when vgpu could not
start it.

Examples:
   vgpu exec --memory-limit 8Gi -- python train.py
   vgpu exec --devices 0 --memory-limit 4Gi --compute-limit 50 -- ./bench
   vgpu exec --compute-limit 30 --compute-phase 0 -- ./a &   # two commands on one GPU
   vgpu exec --compute-limit 30 --compute-phase 50 -- ./b     # take turns
   vgpu exec --compute-request 30 -- ./train   # 30 % guaranteed, the idle GPU used
   vgpu exec --priority high -- ./serve        # goes before normal and low tenants`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "memory-limit", Usage: "device memory per GPU (e.g. 4Gi, or per device 0=4Gi,1=8Gi)"},
				&cli.IntFlag{Name: "compute-limit", Usage: "compute share per GPU in percent: the cap"},
				&cli.StringFlag{Name: "compute-request", Usage: "compute share per GPU in percent guaranteed under contention (e.g. 30, or per device 0=30,1=50); at most the limit"},
				&cli.StringFlag{Name: "memory-request", Usage: "device memory request per GPU (e.g. 2Gi, or per device 0=2Gi,1=4Gi); at most the limit"},
				&cli.StringFlag{Name: "priority", Usage: "high, normal or low (or per device 0=high,1=low): orders the GPU's time inside each period; lifts no limit (default: defaults.priority, else normal)"},
				&cli.StringFlag{Name: "devices", Usage: "GPUs by host index or UUID, comma-separated (default: all)"},
				&cli.StringFlag{Name: "driver-root", Usage: "where the NVIDIA driver is laid out (default: driver.root of $VGPU_CONFIG or /etc/vgpu/config.toml)"},
				&cli.StringFlag{Name: "lib-dir", Usage: "directory of libvgpu-cuda.so and libvgpu-nvml.so"},
				&cli.StringFlag{Name: "log-level", Usage: "library log level: error, warn, info, debug"},
				&cli.StringFlag{Name: "compute-period", Usage: "pacing period of the compute limit (e.g. 500ms; 0: launch by launch; default: the library's)"},
				&cli.IntFlag{Name: "compute-phase", DefaultText: "one from the state directory", Usage: "start the command's stretch at this percent of each period (0..99), so that several commands on one GPU take turns"},
			},
			Action: func(c *cli.Context) error {
				var phase *int
				if c.IsSet("compute-phase") {
					v := c.Int("compute-phase")
					phase = &v
				}
				code, err := vgpuexec.Run(vgpuexec.Options{
					ComputePhase:   phase,
					MemoryLimit:    c.String("memory-limit"),
					ComputeLimit:   c.Int("compute-limit"),
					ComputeRequest: c.String("compute-request"),
					MemoryRequest:  c.String("memory-request"),
					Priority:       c.String("priority"),
					Devices:        c.String("devices"),
					DriverRoot:     c.String("driver-root"),
					LibDir:         c.String("lib-dir"),
					LogLevel:       c.String("log-level"),
					ComputePeriod:  c.String("compute-period"),
					Args:           c.Args().Slice(),
					Stdin:          os.Stdin,
					Stdout:         os.Stdout,
					Stderr:         os.Stderr,
				})
				if err != nil {
					return cli.Exit("vgpu exec: "+err.Error(), 125)
				}
				if code != 0 {
					return cli.Exit("", code)
				}
				return nil
			},
		}},
	}
	app.Commands = append(app.Commands, statusCommands()...)
	app.Commands = append(app.Commands, topCommand())
	app.Commands = append(app.Commands, setupCommands()...)
	app.Commands = append(app.Commands, aliasCommands()...)
	app.Commands = append(app.Commands, versionCommand())
	cliutil.Strict(app)
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitFailed)
	}
}
