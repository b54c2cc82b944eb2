package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/dra"
)

// draFlags configure the DRA driver of `vgpu node --dra`.
func draFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "dra", Usage: "also serve the Kubernetes DRA driver vgpu.io (ResourceSlices with consumable memory and cores; docs/kubernetes.md)"},
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig of the API server: for --dra, and to post each kill, freeze, escalation and reclaim as an Event on the container's pod (default with --dra or --device-plugin in a pod: the in-cluster config)"},
		&cli.StringFlag{Name: "node-name", EnvVars: []string{"NODE_NAME"}, Usage: "this node's name in the API server (--dra; Events go only to pods bound to it; default: the host name)"},
		&cli.StringFlag{Name: "dra-registrar-dir", Value: dra.DefaultRegistrarDir, Usage: "DRA: the kubelet's plugin registry directory"},
		&cli.StringFlag{Name: "dra-plugin-dir", Value: dra.DefaultPluginDir, Usage: "DRA: the driver's socket directory (under the kubelet's plugins directory)"},
		&cli.StringFlag{Name: "cdi-dir", Value: dra.DefaultCDIDir, Usage: "DRA: where the per-claim CDI specs go (one of the container runtime's cdi_spec_dirs)"},
	}
}

// newDRADriver builds the DRA driver from draFlags; stateDir is the daemon's.
func newDRADriver(c *cli.Context, cfg *config.Config, stateDir string) (*dra.Driver, error) {
	var rc *rest.Config
	var err error
	if p := c.String("kubeconfig"); p != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", p)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("--dra: Kubernetes client: %w (set --kubeconfig outside a pod)", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("--dra: Kubernetes client: %w", err)
	}
	node := c.String("node-name")
	if node == "" {
		if node, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("--dra: --node-name not set and no host name: %w", err)
		}
	}
	dcfg := *cfg
	dcfg.StateDir = stateDir
	return dra.New(dra.Options{NodeName: node, KubeClient: client, Config: &dcfg,
		Inventory:    deviceplugin.HostInventory{Config: cfg},
		RegistrarDir: c.String("dra-registrar-dir"), PluginDir: c.String("dra-plugin-dir"), CDIDir: c.String("cdi-dir"),
		Placement: cfg.Kubernetes.Placement,
		Log:       slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "dra")})
}
