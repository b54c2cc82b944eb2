package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// statusCommands is `vgpu status` (docs/status.md); `vgpu metrics` is an
// alias of vgpu-node metrics (alias.go).
func statusCommands() []*cli.Command {
	stateDir := &cli.StringFlag{Name: "state-dir", Usage: "vgpu state directory (default: state_dir of the configuration, else " + config.DefaultStateDir + ")"}
	return []*cli.Command{{
		Name:  "status",
		Usage: "show each vgpu container: devices, memory limit and usage, compute limit and share, GPU processes",
		Description: `Reads the state directory vgpu-runtime and vgpu-hook keep (one directory per
limited container) and each container's shared accounting region. A state
directory named with --state-dir must exist; the configured one may be missing
(no limited container has run since boot).

Examples:
   vgpu status                      # a table: container, GPU, memory used/limit, compute share/limit
   vgpu status --json | jq '.containers[] | {id, devices}'
   vgpu status --state-dir /run/vgpu/containers --interval 2s`,
		Flags: []cli.Flag{
			stateDir,
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.BoolFlag{Name: "wide", Aliases: []string{"w"}, Usage: "whole container ids and GPU UUIDs (cut to 12 characters otherwise, so that lines fit 120 columns)"},
			&cli.DurationFlag{Name: "interval", Value: 500 * time.Millisecond, Usage: "time between the two readings that measure compute shares (when the region has busy counters)"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return cli.Exit(fmt.Sprintf("vgpu status: takes no arguments, got %q (see vgpu status --help)", c.Args().First()), exitUsage)
			}
			o := status.Options{StateDir: config.StateDirOf(c.String("state-dir"))}
			if err := checkStateDir(c); err != nil {
				return err
			}
			r := status.Collect(o)
			if r.HasBusy() && c.Duration("interval") > 0 {
				time.Sleep(c.Duration("interval"))
				r2 := status.Collect(o)
				status.MeasureShares(r, r2)
				r = r2
			}
			r.Wide = c.Bool("wide")
			var err error
			if c.Bool("json") {
				err = r.WriteJSON(os.Stdout)
			} else {
				err = r.WriteText(os.Stdout)
			}
			if err != nil {
				return cli.Exit("vgpu status: "+err.Error(), 1)
			}
			if r.Error != "" {
				return cli.Exit("", 1)
			}
			return nil
		},
	}}
}

// checkStateDir refuses a --state-dir that is not a directory.
func checkStateDir(c *cli.Context) error {
	if err := status.CheckStateDir(c.String("state-dir")); err != nil {
		return cli.Exit(fmt.Sprintf("vgpu %s: %v", c.Command.Name, err), exitFailed)
	}
	return nil
}
