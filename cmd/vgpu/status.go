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
		Flags: []cli.Flag{
			stateDir,
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.DurationFlag{Name: "interval", Value: 500 * time.Millisecond, Usage: "time between the two readings that measure compute shares (when the region has busy counters)"},
		},
		Action: func(c *cli.Context) error {
			o := status.Options{StateDir: resolveStateDir(c.String("state-dir"))}
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
