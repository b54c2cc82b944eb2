package main

import (
	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/node/kevents"
)

// newEventPoster posts vgpu node's enforcement as Kubernetes Events on the
// pods (internal/node/kevents) when it has an API client: --kubeconfig, or,
// serving Kubernetes (--device-plugin, --dra) inside a pod, the in-cluster
// config. nil: no API server to post to.
func newEventPoster(c *cli.Context, stateDir string) (*kevents.Poster, error) {
	return kevents.Start(kevents.Config{Kubeconfig: c.String("kubeconfig"), Serving: c.Bool("device-plugin") || c.Bool("dra"),
		NodeName: c.String("node-name"), StateDir: stateDir})
}
