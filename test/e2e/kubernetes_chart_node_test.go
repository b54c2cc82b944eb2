//go:build e2e && k8s

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

const chartNode = "vgpu-e2e-chart"

// The chart on a real node: the image that deploy/image builds, imported
// into the test's containerd; helm install onto the control plane with a
// kubelet registered to it; the node pod's init step installs the files
// under a temporary install root and its container runs the installed
// vgpu-node as the device plugin; a pod asking vgpu.io/memory gets its
// limit; helm uninstall runs the removal on the node and leaves the install
// root as before. containerd is left alone here (host.containerdConfig ""):
// the test's containerd already runs vgpu-runtime (through a wrapper that
// names the test's configuration).
func TestKubernetesChartNode(t *testing.T) {
	requireRoot(t)
	need(t, "runc")
	f := shared(t)
	tools := k8sTools(t)
	helm := helmCLI(t)
	e := newEnvSim(t, "k8s-chart", simroot.Options{Devices: []simroot.Device{{MemoryBytes: 16 << 30}}})
	cfg, _ := os.ReadFile(e.config)
	cfg = append(cfg, fmt.Sprintf("[kubernetes]\ngrants_only = true\ngrant_dir = %q\n", filepath.Join(e.dir, "grants"))...)
	if err := os.WriteFile(e.config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	k := &kube{dir: e.dir, tools: tools, env: e}
	k.startContainerd(t, f)
	cp := startControlPlane(t, tools, e.dir)
	ctx := context.Background()
	c := cp.client
	// The DaemonSet and Job controllers (startControlPlane runs only the
	// claim controller).
	dsMarker := filepath.Join(e.dir, "kcm-ds")
	startDaemon(t, "kube-controller-manager daemonset,job", dsMarker+".log", dsMarker, nil, filepath.Join(tools, "kube"), "kube-controller-manager",
		"--kubeconfig", cp.kubeconfig, "--leader-elect=false", "--controllers", "daemonset,job",
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(freePort(t)), "--cert-dir", dsMarker,
		"--authentication-kubeconfig", cp.kubeconfig, "--authorization-kubeconfig", cp.kubeconfig)

	k.rootDir = filepath.Join(e.dir, "kubelet")
	k.logs = filepath.Join(e.dir, "pod-logs")
	if err := os.MkdirAll(k.logs, 0o755); err != nil {
		t.Fatal(err)
	}
	k.writeKubeletConfig(t, filepath.Join(e.dir, "kubelet.yaml"), "")
	pluginDir := "/var/lib/kubelet/device-plugins"
	t.Cleanup(func() {
		for _, f := range []string{"kubelet.sock", "vgpu-memory.sock", "vgpu-cores.sock", "kubelet_internal_checkpoint"} {
			os.Remove(filepath.Join(pluginDir, f))
		}
	})
	k.kubelet = startDaemon(t, "kubelet", filepath.Join(e.dir, "kubelet-chart.log"), k.kubeletCfg, nil,
		filepath.Join(tools, "kubelet"), "--config", k.kubeletCfg, "--root-dir", k.rootDir, "--cert-dir", filepath.Join(e.dir, "pki"),
		"--kubeconfig", cp.kubeconfig, "--hostname-override", chartNode, "--v", "2")
	waitUntil(t, k, cp, 3*time.Minute, "node registered", func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, chartNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels["vgpu.io/enabled"] = "true"
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})

	// The image, as make image builds it, in the node's containerd.
	root := filepath.Dir(chartDir(t))
	root = filepath.Dir(filepath.Dir(root))
	imgDir := filepath.Join(e.dir, "image")
	installer := filepath.Join(e.dir, "vgpu-install")
	for _, c := range [][]string{
		{root, "CGO_ENABLED=0", "go", "build", "-trimpath", "-o", installer, "./cmd/vgpu-install"},
		{filepath.Join(root, "deploy/image"), "", "go", "run", ".", "-bin", binaries(t), "-lib", filepath.Join(os.Getenv("VGPU_BUILD"), "lib"),
			"-config", filepath.Join(root, "configs/config.toml"), "-installer", installer, "-out", imgDir, "-version", "0.1.0-e2e", "-commit", "e2e"},
	} {
		cmd := exec.Command(c[2], c[3:]...)
		cmd.Dir = c[0]
		cmd.Env = os.Environ()
		if c[1] != "" {
			cmd.Env = append(cmd.Env, c[1])
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c[2:], err, out)
		}
	}
	// A second release's image, for the upgrade.
	cmd := exec.Command("go", "run", ".", "-bin", binaries(t), "-lib", filepath.Join(os.Getenv("VGPU_BUILD"), "lib"),
		"-config", filepath.Join(root, "configs/config.toml"), "-installer", installer, "-out", imgDir, "-version", "0.1.1-e2e", "-commit", "e2e")
	cmd.Dir = filepath.Join(root, "deploy/image")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("image 0.1.1-e2e: %v\n%s", err, out)
	}
	for _, tag := range []string{"0.1.0-e2e", "0.1.1-e2e"} {
		if out, err := k.ctr(t, "images", "import", "--snapshotter", "native", filepath.Join(imgDir, "vgpu-"+tag+".tar")); err != nil {
			t.Fatalf("ctr import: %v\n%s", err, out)
		}
	}

	// The namespace, with what a cluster's controllers would have put there:
	// the API server's CA for the in-cluster client.
	const ns = "vgpu-system"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(e.dir, "apiserver-pki", "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(ca)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cp.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	api, err := url.Parse(rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	installRoot := filepath.Join(e.dir, "opt", "vgpu")
	metricsPort := freePort(t)
	values := filepath.Join(e.dir, "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`image: {tag: 0.1.0-e2e, pullPolicy: Never}
hostNetwork: true
priorityClassName: ""
host:
  installRoot: %q
  configPath: %q
  containerdConfig: ""
  stateDir: %q
  grantDir: %q
  kubeletRootDir: %q
  mountPropagation: None # this VM's / is a private mount
metrics: {port: %d}
extraEnv:
  - {name: KUBERNETES_SERVICE_HOST, value: %q}
  - {name: KUBERNETES_SERVICE_PORT, value: %q}
extraArgs: ["--health-interval=5s"]
uninstall: {timeout: 3m}
`, installRoot, e.config, e.stateDir, filepath.Join(e.dir, "grants"), k.rootDir, metricsPort, api.Hostname(), api.Port())), 0o644); err != nil {
		t.Fatal(err)
	}
	h := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(helm, append(args, "--kubeconfig", cp.kubeconfig, "--namespace", ns)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			cp.dumpLogs(t)
			k.dumpLogs(t)
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	h("install", "vgpu", chartDir(t), "-f", values, "--set-file", "config.override="+e.config)

	waitUntil(t, k, cp, 4*time.Minute, "the chart's node pod running", func() error {
		l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=device-plugin"})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning {
				return nil
			}
		}
		return fmt.Errorf("%d pods, none running: %+v", len(l.Items), l.Items)
	})
	for _, p := range []string{"bin/vgpu-node", "bin/vgpu-runtime", "lib/libvgpu-cuda.so", "install-record.json"} {
		if _, err := os.Stat(filepath.Join(installRoot, p)); err != nil {
			t.Errorf("the installer did not write %s: %v", p, err)
		}
	}
	k.kubeletLogWait(t, "Got registration request from device plugin", "vgpu.io/memory")

	// A tenant through what the chart deployed.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: new(int64),
			Tolerations:      []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			RuntimeClassName: new("vgpu"),
			Containers: []corev1.Container{{
				Name: "main", Image: k8sImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", "cat /run/vgpu/quota"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					"vgpu.io/memory": apiresource.MustParse("3"), "vgpu.io/cores": apiresource.MustParse("30")}},
			}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, k, cp, 3*time.Minute, "the tenant pod done", func() error {
		p, err := c.CoreV1().Pods("default").Get(ctx, "tenant", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	logs, _ := filepath.Glob(filepath.Join(k.logs, "default_tenant_*", "main", "*.log"))
	var quota []byte
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		quota = append(quota, b...)
	}
	if !strings.Contains(string(quota), "memory=3221225472") || !strings.Contains(string(quota), "compute=30") {
		t.Errorf("the tenant's quota through the chart's device plugin:\n%s\nwant memory=3221225472 compute=30", quota)
	}
	if err := c.CoreV1().Pods("default").Delete(ctx, "tenant", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// helm upgrade to the second release with a tenant running: the node
	// pod rolls, the tenant keeps running with its limits (read from inside
	// after the upgrade).
	holder := pod.DeepCopy()
	holder.Name = "holder"
	holder.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "exec sleep 3600"}
	if _, err := c.CoreV1().Pods("default").Create(ctx, holder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var holderID string
	waitUntil(t, k, cp, 3*time.Minute, "the holder pod running", func() error {
		p, err := c.CoreV1().Pods("default").Get(ctx, "holder", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		holderID = strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
		return nil
	})
	h("upgrade", "vgpu", chartDir(t), "-f", values, "--set-file", "config.override="+e.config, "--set", "image.tag=0.1.1-e2e")
	waitUntil(t, k, cp, 4*time.Minute, "the node pod of 0.1.1-e2e running", func() error {
		l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=device-plugin"})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && strings.HasSuffix(p.Spec.Containers[0].Image, ":0.1.1-e2e") {
				return nil
			}
		}
		return fmt.Errorf("%d pods, none of 0.1.1-e2e running", len(l.Items))
	})
	out, err := k.ctr(t, "tasks", "exec", "--exec-id", "after-upgrade", holderID, "cat", "/run/vgpu/quota")
	if err != nil || !strings.Contains(out, "memory=3221225472") || !strings.Contains(out, "compute=30") {
		t.Errorf("the tenant after the upgrade (%v):\n%s\nwant memory=3221225472 compute=30", err, out)
	}
	// helm uninstall while the tenant runs: the removal refuses on the
	// node (containerd still needs vgpu-runtime to stop it), so the
	// uninstall fails and the node keeps its files.
	uninstall := exec.Command(helm, "uninstall", "vgpu", "--timeout", "40s", "--kubeconfig", cp.kubeconfig, "--namespace", ns)
	uninstall.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if out, err := uninstall.CombinedOutput(); err == nil {
		t.Errorf("helm uninstall with a tenant running succeeded:\n%s", out)
	}
	waitUntil(t, k, cp, 2*time.Minute, "the removal's refusal", func() error {
		l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=remove-device-plugin"})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			for _, st := range p.Status.InitContainerStatuses {
				for _, term := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
					if term != nil && strings.Contains(term.Message, "vgpu containers are running") {
						return nil
					}
				}
			}
		}
		return fmt.Errorf("no removal pod says it refused: %d pods", len(l.Items))
	})
	if _, err := os.Stat(filepath.Join(installRoot, "bin", "vgpu-runtime")); err != nil {
		t.Errorf("a refused uninstall removed vgpu-runtime: %v", err)
	}
	if err := c.CoreV1().Pods("default").Delete(ctx, "holder", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, k, cp, 2*time.Minute, "the holder pod gone", func() error {
		if _, err := c.CoreV1().Pods("default").Get(ctx, "holder", metav1.GetOptions{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})

	// helm uninstall: the removal hook on the node, then the objects.
	h("uninstall", "vgpu", "--timeout", "4m")
	if _, err := os.Stat(installRoot); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(installRoot)
		t.Errorf("the install root is left after uninstall (%v): %v", err, ents)
	}
	if b, _ := os.ReadFile(e.config); string(b) != string(cfg) {
		t.Errorf("the configuration changed after uninstall:\n%s\nwant\n%s", b, cfg)
	}
}
