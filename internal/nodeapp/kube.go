package nodeapp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/deviceplugin"
	"github.com/vgpu-dev/vgpu/internal/dra"
	"github.com/vgpu-dev/vgpu/internal/request"
)

// newDevicePlugin builds the kubelet device plugin from c and cfg. With a
// kubernetes.priority_classes table it lists the node's pods from the API
// server (kubeconfig: "" the in-cluster config; node: "" the host name).
func newDevicePlugin(c DevicePluginConfig, cfg *config.Config, kubeconfig, node string) (*deviceplugin.Plugin, error) {
	unit, err := request.ParseSize(c.MemoryUnit)
	if err != nil {
		return nil, fmt.Errorf("--memory-unit %s: %v (e.g. 1Gi, 512Mi)", c.MemoryUnit, err)
	}
	var classes func(context.Context) (map[string]string, error)
	if len(cfg.Kubernetes.PriorityClasses) > 0 {
		client, err := kubeClient(kubeconfig, "kubernetes.priority_classes")
		if err != nil {
			return nil, err
		}
		if node, err = nodeName(node, "kubernetes.priority_classes"); err != nil {
			return nil, err
		}
		classes = func(ctx context.Context) (map[string]string, error) { return podClasses(ctx, client, node) }
	}
	return deviceplugin.New(deviceplugin.Options{
		PluginDir: c.PluginDir, GrantDir: cfg.Kubernetes.GrantDir, UnitBytes: unit,
		HealthInterval: c.HealthInterval, Inventory: deviceplugin.HostInventory{Config: cfg},
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Placement: cfg.Kubernetes.Placement,
		PodClasses: classes,
	})
}

// podClasses lists the PriorityClass of each pod bound to node, by UID, as
// the API server holds the pods' specs (pods without one left out).
func podClasses(ctx context.Context, client kubernetes.Interface, node string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", node, err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.Spec.PriorityClassName != "" {
			out[string(p.UID)] = p.Spec.PriorityClassName
		}
	}
	return out, nil
}

// kubeClient is a client of the API server from kubeconfig ("": the pod's
// in-cluster config); what names the setting that needs it.
func kubeClient(kubeconfig, what string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: Kubernetes client: %w (set --kubeconfig outside a pod)", what, err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("%s: Kubernetes client: %w", what, err)
	}
	return client, nil
}

// nodeName is node, else the host name.
func nodeName(node, what string) (string, error) {
	if node != "" {
		return node, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("%s: --node-name not set and no host name: %w", what, err)
	}
	return h, nil
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
