package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/shim"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// statusCommands are `vgpu status` and `vgpu metrics` (docs/status.md).
func statusCommands() []*cli.Command {
	stateDir := &cli.StringFlag{Name: "state-dir", Usage: "vgpu state directory (default: state_dir of the configuration, else " + shim.DefaultStateDir + ")"}
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
			&cli.DurationFlag{Name: "interval", Value: 500 * time.Millisecond, Usage: "time between the two readings that measure compute shares (when the region has busy counters)"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return cli.Exit(fmt.Sprintf("vgpu status: takes no arguments, got %q (see vgpu status --help)", c.Args().First()), exitUsage)
			}
			o := status.Options{StateDir: resolveStateDir(c.String("state-dir"))}
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
	}, {
		Name:  "metrics",
		Usage: "serve the figures of `vgpu status` as Prometheus metrics on /metrics",
		Flags: []cli.Flag{
			stateDir,
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:9400", Usage: "address to listen on (host:port)"},
		},
		Action: func(c *cli.Context) error {
			o := status.Options{StateDir: resolveStateDir(c.String("state-dir"))}
			if err := checkStateDir(c); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", c.String("listen"))
			if err != nil {
				return cli.Exit("vgpu metrics: "+err.Error(), 1)
			}
			mux := http.NewServeMux()
			mux.Handle("/metrics", status.Handler(o))
			mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/" {
					http.NotFound(w, r)
					return
				}
				fmt.Fprintln(w, "vgpu metrics: see /metrics")
			})
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(sctx)
			}()
			fmt.Fprintf(os.Stderr, "vgpu metrics: serving %s on http://%s/metrics\n", o.StateDir, ln.Addr())
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return cli.Exit("vgpu metrics: "+err.Error(), 1)
			}
			return nil
		},
	}}
}

// resolveStateDir: the flag, else state_dir of the configuration
// ($VGPU_CONFIG or /etc/vgpu/config.toml), else the default.
func resolveStateDir(flag string) string {
	if flag != "" {
		return flag
	}
	return shim.StateDir()
}

// checkStateDir refuses a --state-dir that is not a directory: a typo must
// not read as "no containers". The configured default may be missing.
func checkStateDir(c *cli.Context) error {
	dir := c.String("state-dir")
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		return cli.Exit(fmt.Sprintf("vgpu %s: --state-dir %s: %v (the state directory is state_dir in %s, default %s)", c.Command.Name, dir, unwrapPathError(err), shim.ConfigPath(), shim.DefaultStateDir), exitFailed)
	}
	return nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
