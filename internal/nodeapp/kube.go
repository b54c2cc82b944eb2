package nodeapp

import (
	"fmt"
	"log/slog"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/dra"
	"github.com/vgpu-dev/vgpu/internal/request"
)

// newDevicePlugin builds the kubelet device plugin from c and cfg.
func newDevicePlugin(c DevicePluginConfig, cfg *config.Config) (*deviceplugin.Plugin, error) {
	unit, err := request.ParseSize(c.MemoryUnit)
	if err != nil {
		return nil, fmt.Errorf("--memory-unit %s: %v (e.g. 1Gi, 512Mi)", c.MemoryUnit, err)
	}
	return deviceplugin.New(deviceplugin.Options{
		PluginDir: c.PluginDir, GrantDir: cfg.Kubernetes.GrantDir, UnitBytes: unit,
		HealthInterval: c.HealthInterval, Inventory: deviceplugin.HostInventory{Config: cfg},
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Placement: cfg.Kubernetes.Placement,
	})
}

// newDRADriver builds the DRA driver from c; stateDir is the daemon's.
func newDRADriver(c DRAConfig, cfg *config.Config, stateDir string) (*dra.Driver, error) {
	var rc *rest.Config
	var err error
	if c.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
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
	node := c.NodeName
	if node == "" {
		if node, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("--dra: --node-name not set and no host name: %w", err)
		}
	}
	dcfg := *cfg
	dcfg.StateDir = stateDir
	return dra.New(dra.Options{NodeName: node, KubeClient: client, Config: &dcfg,
		Inventory:    deviceplugin.HostInventory{Config: cfg},
		RegistrarDir: c.RegistrarDir, PluginDir: c.PluginDir, CDIDir: c.CDIDir,
		Placement: cfg.Kubernetes.Placement,
		Log:       slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "dra")})
}
