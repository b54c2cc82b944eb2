//go:build e2e && k8s

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	cc := startChartCluster(t, "k8s-chart", chartNode, []simroot.Device{{MemoryBytes: 16 << 30}})
	e, k, cp, c, installRoot := cc.e, cc.k, cc.cp, cc.c, cc.installRoot
	ctx := context.Background()
	const ns = chartNS
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	// A second release's image, for the upgrade.
	cc.image(t, "0.1.1-e2e", binaries(t), filepath.Join(os.Getenv("VGPU_BUILD"), "lib"))
	port := freePort(t)
	values := cc.values(t, port, "")
	h := func(args ...string) string {
		t.Helper()
		return cc.helm(t, args...)
	}
	// The install as README.md tells it: make image, the image loaded with
	// ctr, helm install with the chart's defaults.
	start := time.Now()
	tag := cc.readmeInstall(t, cc.hostValues(t, port, ""), e.config)
	cc.nodePodRunning(t, "device-plugin", tag, nil)
	t.Logf("README.md's commands, then the node pod of %s running: %s", tag, time.Since(start).Round(100*time.Millisecond))
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
	uninstall := cc.helmCmd(t, "uninstall", "vgpu", "--timeout", "40s")
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

// readmeKubernetes is what README.md tells a Kubernetes user to run: the
// make commands of the paragraph that introduces the block (`make image`),
// then each line of the block that holds `helm install`, as written.
func readmeKubernetes(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var found [][]string
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		start := i
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
		}
		block := lines[start+1 : min(i, len(lines))]
		if !strings.Contains(strings.Join(block, "\n"), "helm install ") {
			continue
		}
		// The paragraph before the block (and its newcomer marker).
		p := start
		for p > 0 && strings.TrimSpace(lines[p-1]) != "" {
			p--
		}
		for p > 0 && strings.TrimSpace(lines[p-1]) == "" {
			p--
		}
		for p > 0 && strings.TrimSpace(lines[p-1]) != "" {
			p--
		}
		var cmds []string
		for _, m := range regexp.MustCompile("`(make [^`]+)`").FindAllStringSubmatch(strings.Join(lines[p:start], "\n"), -1) {
			cmds = append(cmds, m[1])
		}
		for _, l := range block {
			if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "#") {
				cmds = append(cmds, s)
			}
		}
		found = append(found, cmds)
	}
	if len(found) != 1 {
		t.Fatalf("README.md has %d command blocks with helm install, want the one of its Kubernetes paragraph: %q", len(found), found)
	}
	return found[0]
}

// readmeInstall runs README's Kubernetes commands (readmeKubernetes) as
// written, from the repository's root, on the test's node and cluster, and
// returns the tag of the image they loaded. What a test must change, it
// changes around the commands, not in them: the cluster (KUBECONFIG), the
// node's containerd (CONTAINERD_ADDRESS, and CONTAINERD_SNAPSHOTTER=native,
// the snapshotter of the test's containerd), the build directory (BUILD,
// and build/ in a command where VGPU_BUILD is elsewhere), and the node's
// paths (helm is a wrapper that adds -f values and the test's
// configuration: the install root under the test's directory, no restart
// of the machine's containerd).
func (cc *chartCluster) readmeInstall(t *testing.T, values, config string) string {
	t.Helper()
	cmds := readmeKubernetes(t, cc.root)
	t.Logf("README.md's Kubernetes commands: %q", cmds)
	build := os.Getenv("VGPU_BUILD")
	wrap := filepath.Join(cc.e.dir, "readme-bin")
	mkdirAll(t, wrap, 0o755)
	writeFile(t, filepath.Join(wrap, "helm"), []byte(fmt.Sprintf("#!/bin/sh\nexec %q \"$@\" -f %q --set-file %q\n",
		cc.helmCLI, values, "config.override="+config)), 0o755)
	env := append(cleanMakeEnv(), "BUILD="+build, "KUBECONFIG="+cc.cp.kubeconfig,
		"CONTAINERD_ADDRESS="+cc.k.sock, "CONTAINERD_SNAPSHOTTER=native",
		"PATH="+wrap+":"+cc.k.tools+":"+os.Getenv("PATH"),
		"HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	tag := ""
	tarName := regexp.MustCompile(`build/image/vgpu-([^ ]+)\.tar`)
	for _, c := range cmds {
		if m := tarName.FindStringSubmatch(c); m != nil {
			tag = m[1]
		}
		run := c
		if build != filepath.Join(cc.root, "build") {
			run = strings.ReplaceAll(run, " build/", " "+build+"/")
		}
		cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", run)
		cmd.Dir, cmd.Env = cc.root, env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README.md's %q (run as %q): %v\n%s", c, run, err, out)
		}
		t.Logf("README.md's %q: %s", c, time.Since(start).Round(100*time.Millisecond))
	}
	if tag == "" {
		t.Fatalf("README.md's Kubernetes commands %q load no build/image/vgpu-<version>.tar", cmds)
	}
	return tag
}
