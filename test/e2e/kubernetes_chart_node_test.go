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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

const chartNode = "vgpu-e2e-chart"

// The chart on a real node: the image that deploy/image builds, imported
// into the test's containerd; helm install onto the control plane with a
// kubelet registered to it; the node pod's init step installs the files
// under a temporary install root and its container runs the installed
// vgpu-node as the device plugin; the device plugin's scenarios
// (devicePluginScenarios) run through it; helm upgrade rolls the node pod
// under a running tenant; helm uninstall runs the removal on the node and
// leaves the install root as before. containerd is left alone here (host.containerdConfig ""):
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
	k.waitRegistered(t)
	k.metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", port) // the node pod's, on the host network
	devicePluginScenarios(t, k)

	// helm upgrade to the second release with a tenant running: the node
	// pod rolls, the tenant keeps running with its limits (read from inside
	// after the upgrade).
	holder, err := c.CoreV1().Pods("default").Get(ctx, "granted", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder.Status.Phase != corev1.PodRunning || len(holder.Status.ContainerStatuses) == 0 {
		t.Fatalf("the pod granted is not running before the upgrade: %+v", holder.Status)
	}
	holderID := strings.TrimPrefix(holder.Status.ContainerStatuses[0].ContainerID, "containerd://")
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
	if err := c.CoreV1().Pods("default").Delete(ctx, "granted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, k, cp, 2*time.Minute, "the pod granted gone", func() error {
		if _, err := c.CoreV1().Pods("default").Get(ctx, "granted", metav1.GetOptions{}); err == nil {
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

// devicePluginScenarios runs the device plugin's scenarios on k's node,
// whose vgpu node (serving the plugin, its metrics at k.metrics) and kubelet
// run, one 16 GiB GPU free: a granted pod gets exactly its grant whatever
// it asks itself, named in vgpu status and the metrics; a pod with only
// annotations gets no GPU; a pod asking more than is left is rejected at
// admission; after a kubelet restart the plugin registers again and new
// pods get grants. It leaves the pod "granted" running (3 GiB, 30 cores)
// and deletes the others.
func devicePluginScenarios(t *testing.T, k *kube) {
	t.Helper()
	ctx := context.Background()
	// A pod asking vgpu.io/memory: 3 and vgpu.io/cores: 30 gets exactly
	// that, although it annotates itself 100Gi and its env asks for all GPUs
	// and 100Gi: in Kubernetes mode only the device plugin's grant counts.
	k.pod(t, "granted", map[string]string{"vgpu.io/memory": "3", "vgpu.io/cores": "30"},
		map[string]string{"vgpu.io/memory-limit": "100Gi", "vgpu.io/visible-devices": "all"}, true)
	out := k.podOutput(t, "granted")
	r := parseReport(t, out)
	checkLimited(t, r, "3221225472")
	// vgpu.io/memory is the request; kubernetes.memory_limit ("request" by
	// default) makes the limit equal to it
	if !strings.Contains(r.Quota, " memory=3221225472 memory-request=3221225472 compute=30") {
		t.Errorf("quota lacks memory=3221225472 memory-request=3221225472 compute=30:\n%s", r.Quota)
	}
	checkGPUPrograms(t, out, 3*k8sMemoryUnit)
	k.checkNamed(t, "granted", 3*k8sMemoryUnit)

	// A pod with no vgpu resources but the same annotations and env gets no
	// GPU (its GPU programs fail without one: the probe's report is enough).
	k.pod(t, "forged", nil, map[string]string{"vgpu.io/memory-limit": "100Gi", "vgpu.io/visible-devices": "all"}, false)
	forged := parseReport(t, k.podLog(t, "forged", "{\"quota\""))
	if forged.QuotaErr != "ENOENT" || len(forged.Devs) != 0 {
		t.Errorf("a pod with only vgpu.io annotations got a GPU: quota %q (%s), devices %v", forged.Quota, forged.QuotaErr, forged.Devs)
	}

	// A pod asking more than the node has left (16 GiB, 3 held by the
	// running pod "granted") is rejected at the kubelet's admission (the
	// pod names the node: no scheduler in the way), naming the resource.
	k.pod(t, "toolarge", map[string]string{"vgpu.io/memory": "14"}, nil, false)
	var why string
	if err := pollAt(podWaitLimit, time.Second, func() error {
		p, err := k.client.CoreV1().Pods("default").Get(ctx, "toolarge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		why = p.Status.Reason + ": " + p.Status.Message
		return holds(p.Status.Phase == corev1.PodFailed, "phase %s (%s)", p.Status.Phase, why)
	}); err != nil {
		k.dumpLogs(t)
		t.Fatalf("pod toolarge: %v", err)
	}
	if !strings.Contains(why, "vgpu.io/memory") {
		t.Errorf("pod toolarge failed for %q, want its admission refused naming vgpu.io/memory", why)
	}
	t.Logf("admission: %s", why)

	// The kubelet restarts: the plugin registers again and new pods get grants.
	k.kubelet.stop(t)
	k.deletePod(t, "toolarge")
	k.deletePod(t, "forged")
	k.startKubelet(t)
	k.waitRegistered(t)
	k.pod(t, "after-restart", map[string]string{"vgpu.io/memory": "2"}, nil, false)
	checkLimited(t, parseReport(t, k.podOutput(t, "after-restart")), "2147483648")
	k.deletePod(t, "after-restart")
}
