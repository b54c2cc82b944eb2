// Command vgpu-install is the installer in the vgpu image (docs/kubernetes.md):
// the Helm chart's node DaemonSet runs `vgpu-install install` as its init
// step, `vgpu-install host-exec` to run the node's installed vgpu-node, and
// the chart's pre-delete hook runs `vgpu-install remove` on every node.
// Built static (no cgo): it runs from the image, on any node's libc.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/install"
	"github.com/vgpu-dev/vgpu/internal/version"
)

func main() {
	app := &cli.App{
		Name:    "vgpu-install",
		Usage:   "install vgpu's files onto a node from the vgpu image, or remove them",
		Version: version.Version,
		Description: `install and remove say what they did, one line per file. Exit status: 0
done; 1 failed (nothing half-done: run it again); 2 the command line is wrong.`,
		Commands: []*cli.Command{
			{
				Name:  "install",
				Usage: "copy the binaries and libraries under --install-root, write the containerd drop-in, restart containerd if its configuration changed",
				Flags: append(pathFlags(), &cli.StringFlag{Name: "config-source", Usage: "a configuration to write to --config whatever is there (the node's previous file is restored by remove)"}),
				Action: func(c *cli.Context) error {
					o := options(c)
					o.ConfigSource = c.String("config-source")
					res, err := install.Install(o)
					return report(c, res, err)
				},
			},
			{
				Name:  "remove",
				Usage: "undo what install recorded (refused while vgpu containers run on the node, unless --force)",
				Flags: append(pathFlags(), &cli.BoolFlag{Name: "force", Usage: "remove even while vgpu containers run (containerd then cannot stop them through vgpu-runtime)"}),
				Action: func(c *cli.Context) error {
					o := options(c)
					o.Force = c.Bool("force")
					res, err := install.Remove(o)
					return report(c, res, err)
				},
			},
			{
				Name:      "host-exec",
				Usage:     "run a program of the node inside --host-root (chroot), replacing this process",
				ArgsUsage: "-- PROGRAM [ARG...]",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "host-root", Value: "/host", Usage: "where the node's / is mounted"}},
				Action: func(c *cli.Context) error {
					args := c.Args().Slice()
					if len(args) == 0 {
						return cli.Exit("host-exec: name the program to run (vgpu-install host-exec -- /opt/vgpu/bin/vgpu-node ...)", 2)
					}
					if err := syscall.Chroot(c.String("host-root")); err != nil {
						return fmt.Errorf("chroot %s: %w", c.String("host-root"), err)
					}
					if err := os.Chdir("/"); err != nil {
						return err
					}
					return syscall.Exec(args[0], args, os.Environ())
				},
			},
			{
				Name:      "probe",
				Usage:     "exit 0 when URL answers 200 within 5 s (a liveness probe without a shell)",
				ArgsUsage: "URL",
				Action: func(c *cli.Context) error {
					ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
					defer cancel()
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Args().First(), nil)
					if err != nil {
						return cli.Exit(err.Error(), 2)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						return err
					}
					defer resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						return fmt.Errorf("%s: %s", c.Args().First(), resp.Status)
					}
					return nil
				},
			},
			{
				Name:  "pause",
				Usage: "wait for SIGTERM (the container of a pod whose work is its init step)",
				Action: func(*cli.Context) error {
					ch := make(chan os.Signal, 1)
					signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
					<-ch
					return nil
				},
			},
			{
				Name:  "wait-daemonset",
				Usage: "wait (in a pod, with its service account) until every pod of a DaemonSet is ready: the chart's removal hook",
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: "name", Required: true, Usage: "a DaemonSet in the pod's namespace (repeat for several)"},
					&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute},
				},
				Action: func(c *cli.Context) error {
					for _, n := range c.StringSlice("name") {
						if err := waitDaemonSet(c.Context, n, c.Duration("timeout")); err != nil {
							return err
						}
					}
					return nil
				},
			},
		},
	}
	if err := app.Run(os.Args); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "vgpu-install: "+err.Error())
		os.Exit(1)
	}
}

func pathFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "host-root", Value: "/host", Usage: "where the node's / is mounted (/ on the node itself)"},
		&cli.StringFlag{Name: "payload", Value: "/payload", Usage: "the image's files: bin/, lib/, config.toml"},
		&cli.StringFlag{Name: "install-root", Value: "/opt/vgpu", Usage: "where on the node bin/ and lib/ go"},
		&cli.StringFlag{Name: "config", Value: "/etc/vgpu/config.toml", Usage: "vgpu's configuration on the node: written from the image's (library.dir = <install-root>/lib) when missing, else kept; vgpu-runtime reads /etc/vgpu/config.toml unless containerd's environment sets VGPU_CONFIG"},
		&cli.StringFlag{Name: "containerd-config", Value: "/etc/containerd/config.toml", Usage: "containerd's config.toml on the node; the drop-in is conf.d/99-vgpu.toml beside it; empty: leave containerd alone"},
		&cli.StringFlag{Name: "restart-command", Value: "systemctl restart containerd", Usage: "run on the node (inside --host-root) when containerd's configuration changed; empty: do not restart"},
		&cli.StringFlag{Name: "state-dir", Value: "/run/vgpu/containers", Usage: "vgpu's state directory on the node (state_dir): remove refuses while it holds a container"},
	}
}

func options(c *cli.Context) install.Options {
	return install.Options{
		HostRoot: c.String("host-root"), Payload: c.String("payload"), InstallRoot: c.String("install-root"),
		ConfigPath: c.String("config"), ContainerdConfig: c.String("containerd-config"),
		RestartCommand: strings.Fields(c.String("restart-command")), StateDir: c.String("state-dir"),
		Log: c.App.Writer,
	}
}

func report(c *cli.Context, res *install.Result, err error) error {
	if err != nil {
		return err
	}
	if len(res.Changed) == 0 {
		fmt.Fprintln(c.App.Writer, "nothing to do: the node is as this image wants it")
	}
	return nil
}

const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// waitDaemonSet polls the API server (in-cluster: the pod's service account)
// until the DaemonSet in the pod's namespace has all its pods scheduled,
// updated and ready.
func waitDaemonSet(ctx context.Context, name string, timeout time.Duration) error {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" {
		return errors.New("not in a pod: KUBERNETES_SERVICE_HOST is not set")
	}
	token, err := os.ReadFile(filepath.Join(serviceAccount, "token"))
	if err != nil {
		return err
	}
	ns, err := os.ReadFile(filepath.Join(serviceAccount, "namespace"))
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(filepath.Join(serviceAccount, "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	url := fmt.Sprintf("https://%s/apis/apps/v1/namespaces/%s/daemonsets/%s", strings.Join([]string{host, port}, ":"), strings.TrimSpace(string(ns)), name)
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			var ds struct {
				Metadata struct {
					Generation int64 `json:"generation"`
				} `json:"metadata"`
				Status struct {
					ObservedGeneration     int64 `json:"observedGeneration"`
					DesiredNumberScheduled int   `json:"desiredNumberScheduled"`
					UpdatedNumberScheduled int   `json:"updatedNumberScheduled"`
					NumberReady            int   `json:"numberReady"`
				} `json:"status"`
			}
			switch {
			case resp.StatusCode != http.StatusOK:
				last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
			case json.Unmarshal(body, &ds) != nil:
				last = "the answer is not a DaemonSet"
			default:
				s := ds.Status
				last = fmt.Sprintf("%d of %d nodes done", s.NumberReady, s.DesiredNumberScheduled)
				if s.ObservedGeneration >= ds.Metadata.Generation && s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberReady == s.DesiredNumberScheduled {
					fmt.Printf("daemonset %s: %s\n", name, last)
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("daemonset %s not done after %s (%s): the removal step's log says why (kubectl logs -n %s daemonset/%s -c remove)", name, timeout, last, strings.TrimSpace(string(ns)), name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
