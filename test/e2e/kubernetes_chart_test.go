//go:build e2e && k8s

// The Helm chart's objects against the real API server of the control plane
// (kubernetes_dra_test.go's): every object of each values combination is
// created with server-side dry run and strict field validation, so a field
// the cluster's OpenAPI does not know, a wrong type or an invalid value
// fails here as it would at `helm install`. The Helm CLI is the one
// test/k8s/helm/build.sh builds (VGPU_HELM, set by make k8s-test-run).
package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

func helmCLI(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("VGPU_HELM")
	if dir == "" {
		t.Fatal("VGPU_HELM is not set: run make k8s-test (or VGPU_HELM=$(test/k8s/helm/build.sh))")
	}
	return filepath.Join(dir, "helm")
}

func chartDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "helm", "vgpu")
}

func TestKubernetesChartOnAPIServer(t *testing.T) {
	tools := k8sTools(t)
	helm := helmCLI(t)
	cp := startControlPlane(t, tools, t.TempDir())
	defer func() {
		if t.Failed() {
			cp.dumpLogs(t)
		}
	}()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.client.Discovery()))
	ctx := context.Background()
	const ns = "vgpu-system"
	if _, err := cp.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("install, upgrade, uninstall", func(t *testing.T) { chartLifecycle(t, helm, cp.kubeconfig, cp) })

	for name, sets := range map[string][]string{
		"defaults":         nil,
		"dra":              {"devicePlugin.enabled=false", "dra.enabled=true"},
		"both, two pools":  {"dra.enabled=true", "devicePlugin.nodeSelector.pool=a", "dra.nodeSelector.pool=b"},
		"metrics, options": {"metrics.grafanaDashboard.enabled=true", "config.placement=spread", "config.spatialGPUs={0}", "hostNetwork=true", "extraArgs={--interval=2s}"},
	} {
		t.Run(name, func(t *testing.T) {
			args := []string{"template", "vgpu", chartDir(t), "--namespace", ns}
			for _, s := range sets {
				args = append(args, "--set", s)
			}
			cmd := exec.Command(helm, args...)
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir())
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			n := 0
			for doc := range strings.SplitSeq(string(out), "\n---") {
				var obj unstructured.Unstructured
				if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
					t.Fatal(err)
				}
				if obj.Object == nil || obj.GetKind() == "" {
					continue
				}
				gvk := obj.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Errorf("%s %s: the API server does not serve it: %v", gvk, obj.GetName(), err)
					continue
				}
				var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
				if m.Scope.Name() == "namespace" {
					ri = dyn.Resource(m.Resource).Namespace(ns)
				}
				if _, err := ri.Create(ctx, &obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
					t.Errorf("%s %s: the API server refuses it: %v", gvk.Kind, obj.GetName(), err)
				}
				n++
			}
			if n == 0 {
				t.Error("nothing rendered")
			}
		})
	}
}

// chartLifecycle runs helm install, upgrade and uninstall against the API
// server (no kubelet here, so no pod runs and the pre-delete hook, which
// waits for the node pods, is skipped): the release's objects are created,
// the upgrade changes the node pods' image in place, and the uninstall
// leaves none of the chart's cluster-wide objects.
func chartLifecycle(t *testing.T, helm, kubeconfig string, cp *controlPlane) {
	ctx := context.Background()
	h := func(args ...string) {
		t.Helper()
		cmd := exec.Command(helm, append(args, "--kubeconfig", kubeconfig, "--namespace", "vgpu-life")...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	image := func() string {
		t.Helper()
		ds, err := cp.client.AppsV1().DaemonSets("vgpu-life").Get(ctx, "life-vgpu-device-plugin", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ds.Spec.Template.Spec.InitContainers[0].Image + " " + ds.Spec.Template.Spec.Containers[0].Image
	}
	h("install", "life", chartDir(t), "--create-namespace", "--set", "runtimeClass.name=vgpu-life")
	if got := image(); got != "ghcr.io/vgpu-dev/vgpu:0.1.0 ghcr.io/vgpu-dev/vgpu:0.1.0" {
		t.Errorf("after install the node pods run %s", got)
	}
	h("upgrade", "life", chartDir(t), "--set", "runtimeClass.name=vgpu-life", "--set", "image.tag=0.1.1")
	if got := image(); got != "ghcr.io/vgpu-dev/vgpu:0.1.1 ghcr.io/vgpu-dev/vgpu:0.1.1" {
		t.Errorf("after upgrade the node pods run %s; want the new tag", got)
	}
	h("uninstall", "life", "--no-hooks")
	if _, err := cp.client.NodeV1().RuntimeClasses().Get(ctx, "vgpu-life", metav1.GetOptions{}); err == nil {
		t.Error("the RuntimeClass is left after uninstall")
	}
	if _, err := cp.client.RbacV1().ClusterRoles().Get(ctx, "life-vgpu-device-plugin", metav1.GetOptions{}); err == nil {
		t.Error("the ClusterRole is left after uninstall")
	}
}
