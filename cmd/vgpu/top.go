package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/shim"
	"github.com/vgpu-dev/vgpu/internal/status"
	"github.com/vgpu-dev/vgpu/internal/top"
)

// topCommand is `vgpu top` (docs/status.md).
func topCommand() *cli.Command {
	return &cli.Command{
		Name:  "top",
		Usage: "live view of each GPU: memory and busy time, every container's memory, compute share and throttle, enforcement events",
		Description: `Reads the same records as vgpu status every second. One block per GPU, one
row per container; the latest kills, throttles and escalations of vgpu node at
the bottom. Keys: s sorts (memory, compute, name), g shows the next GPU only,
a all GPUs, q quits. --once prints one frame as plain text for scripts.

Examples:
   vgpu top
   vgpu top --once --gpu 0`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "state-dir", Usage: "vgpu state directory (default: state_dir of the configuration, else " + config.DefaultStateDir + ")"},
			&cli.BoolFlag{Name: "once", Usage: "print one frame (plain text) and exit"},
			&cli.StringFlag{Name: "gpu", Usage: "show only this GPU (host index, as vgpu node reports it, or UUID)"},
			&cli.StringFlag{Name: "sort", Value: "memory", Usage: "order of the rows: memory, compute or name"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return cli.Exit(fmt.Sprintf("vgpu top: takes no arguments, got %q (see vgpu top --help)", c.Args().First()), exitUsage)
			}
			dir := config.StateDirOf(c.String("state-dir"))
			// unlike vgpu status, a missing state directory is an error
			// here: a live view of nothing would look like idle GPUs
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				if err == nil {
					err = errors.New("not a directory")
				}
				return cli.Exit(fmt.Sprintf("vgpu top: state directory %s: %v (set --state-dir, or state_dir in %s; no vgpu container has run here if it was never made)", dir, unwrapPathError(err), shim.ConfigPath()), exitFailed)
			}
			v := top.View{}
			switch c.String("sort") {
			case "memory":
			case "compute":
				v.Sort = top.ByCompute
			case "name":
				v.Sort = top.ByName
			default:
				return cli.Exit(fmt.Sprintf("vgpu top: --sort %q: want memory, compute or name", c.String("sort")), exitUsage)
			}
			o := status.Options{StateDir: dir}
			collect := func() *status.Report { return status.Collect(o) }
			r := collect()
			if r.Error != "" {
				return cli.Exit(fmt.Sprintf("vgpu top: state directory %s: %s", dir, r.Error), exitFailed)
			}
			if g := c.String("gpu"); g != "" {
				u, err := pickGPU(r, g)
				if err != nil {
					return cli.Exit("vgpu top: "+err.Error(), exitUsage)
				}
				v.GPU = u
			}
			if c.Bool("once") {
				if r.HasBusy() {
					time.Sleep(500 * time.Millisecond)
					r2 := collect()
					status.MeasureShares(r, r2)
					r = r2
				}
				_, err := fmt.Fprint(os.Stdout, top.Frame(r, v))
				return err
			}
			v.Styled, v.Keys = true, true
			if _, err := tea.NewProgram(top.NewModel(collect, v)).Run(); err != nil {
				return cli.Exit("vgpu top: "+err.Error(), exitFailed)
			}
			return nil
		},
	}
}

// pickGPU finds --gpu among the report's GPUs: a host index (vgpu node
// reports them) or a UUID.
func pickGPU(r *status.Report, g string) (string, error) {
	if i, err := strconv.Atoi(g); err == nil {
		for _, x := range r.GPUs {
			if x.Index == i {
				return x.UUID, nil
			}
		}
		if len(r.GPUs) == 0 {
			return "", fmt.Errorf("--gpu %s: host indexes are known only while vgpu node runs; give the GPU's UUID", g)
		}
		return "", fmt.Errorf("--gpu %s: no such GPU (vgpu node reports %d)", g, len(r.GPUs))
	}
	for _, u := range top.GPUs(r) {
		if u == g {
			return u, nil
		}
	}
	return "", fmt.Errorf("--gpu %s: no vgpu container uses this GPU and vgpu node does not report it (give a host index or a UUID of vgpu status)", g)
}

// unwrapPathError is an os.PathError's cause alone: the message names the
// path already.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
