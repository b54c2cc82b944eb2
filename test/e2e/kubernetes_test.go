//go:build e2e && k8s

// The Kubernetes end-to-end test: a real kubelet v1.37.2 and containerd
// v2.4.2 (built by test/k8s/build.sh, cached), the vgpu device plugin and
// vgpu-runtime as the runtime class's BinaryName, over the simulated GPU.
// `make test` runs it as a step of its own after the rest (and `make
// k8s-test` alone): the Makefile's k8s-tools step builds or finds the
// binaries and passes their directory in VGPU_K8S_TOOLS. The build tag keeps
// it out of a plain `go test ./...`, which has no such step; without the
// binaries the test fails, naming the step (docs/kubernetes-device-plugin.md).
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/setup"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// K8sToolsEnv names the directory of kube, containerd,
// containerd-shim-runc-v2 and ctr that test/k8s/build.sh printed.
const k8sToolsEnv = "VGPU_K8S_TOOLS"

// k8sTools is that directory. The test does not build them itself: a cold
// build takes longer than a test may run (the Makefile's k8s-tools step).
func k8sTools(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(k8sToolsEnv)
	if dir == "" {
		t.Fatalf("%s is not set: run make k8s-test (or %s=$(test/k8s/build.sh) go test -tags k8s -run Kubernetes ./test/e2e/)", k8sToolsEnv, k8sToolsEnv)
	}
	for _, b := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("%s=%s has no executable %s (%v): run test/k8s/build.sh (make k8s-tools)", k8sToolsEnv, dir, b, err)
		}
	}
	return dir
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// setTOML sets a dotted key path in a decoded TOML document.
func setTOML(m map[string]any, v any, path ...string) {
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

type kube struct {
	dir, tools, sock, logs, rootDir string
	cdiDir                          string
	kubeletCfg                      string
	metrics                         string // vgpu node's /metrics
	kubelet                         *daemon
	env                             *env
	// The kubelet's node name, the kubeconfig of the API server it
	// registers with, and the client pods are made through.
	node, kubeconfig string
	client           *kubernetes.Clientset
	kubeletV         string // the kubelet's --v
	// kubeletLogFrom is where kubeletLogWait starts reading the current
	// kubelet's log: past what an earlier registration wrote.
	kubeletLogFrom int64
	// containerd and its config.toml (restartContainerd starts it again).
	containerd    *daemon
	containerdCfg string
}

const (
	k8sImage      = "localhost/vgpu-e2e/bb:1"
	sandboxImage  = "localhost/vgpu-e2e/sandbox:1"
	k8sCriNS      = "k8s.io"
	podWaitLimit  = 4 * time.Minute
	k8sMemoryUnit = 1 << 30
)

// kubernetesMode puts e's configuration in Kubernetes mode: grants only,
// in a root-only directory (<e.dir>/grants).
func kubernetesMode(t *testing.T, e *env) {
	t.Helper()
	appendConfig(t, e, fmt.Sprintf("[kubernetes]\ngrants_only = true\ngrant_dir = %q\n", filepath.Join(e.dir, "grants")))
}

// writeKubeletConfig writes the one kubelet configuration of the
// Kubernetes tests to path (k.kubeletCfg): containerd at k.sock, pod logs
// in k.logs, no cgroups of its own, no evictions, loopback ports of its
// own.
func (k *kube) writeKubeletConfig(t *testing.T, path string) {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: %q
containerRuntimeEndpoint: "unix://%s"
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
cgroupDriver: cgroupfs
failSwapOn: false
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
syncFrequency: 5s
localStorageCapacityIsolation: false
evictionHard: {"memory.available": "0%%", "nodefs.available": "0%%", "imagefs.available": "0%%"}
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
`, k.logs, k.sock, freePort(t), freePort(t))
	if err := os.WriteFile(path, []byte(kc), 0o644); err != nil {
		t.Fatal(err)
	}
	k.kubeletCfg = path
}

// waitRegistered waits until the current kubelet took both resources'
// registrations and its device manager took their devices (the first
// ListAndWatch response): a pod admitted before that finds none.
func (k *kube) waitRegistered(t *testing.T) {
	t.Helper()
	for _, r := range []string{"vgpu.io/memory", "vgpu.io/cores"} {
		k.kubeletLogWait(t, "Got registration request from device plugin", r)
		k.kubeletLogWait(t, "Processed device updates for resource", `resourceName="`+r+`"`)
	}
}

func (k *kube) ctr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, 90*time.Second, nil, filepath.Join(k.tools, "ctr"), append([]string{"--address", k.sock, "--namespace", k8sCriNS}, args...)...)
}

// startKubelet starts the kubelet as node k.node (registered with the API
// server of k.kubeconfig, if any), each start logging to a file of its own;
// its stop kills only what names its config (not containerd or the plugin,
// which live in the same directory).
func (k *kube) startKubelet(t *testing.T) {
	t.Helper()
	args := []string{"--config", k.kubeletCfg, "--root-dir", k.rootDir, "--cert-dir", filepath.Join(k.dir, "pki"),
		"--hostname-override", k.node, "--v", k.kubeletV}
	if k.kubeconfig != "" {
		args = append(args, "--kubeconfig", k.kubeconfig)
	}
	k.kubelet = startDaemon(t, "kubelet", filepath.Join(k.dir, fmt.Sprintf("kubelet-%d.log", time.Now().UnixNano())), k.kubeletCfg, nil,
		filepath.Join(k.tools, "kubelet"), args...)
	k.kubeletLogFrom = 0
}

// pod starts a pod of the vgpu runtime class, through the API server, on
// k's node (named in the pod, bypassing the scheduler: the kubelet's
// admission decides), that runs the probe and the GPU programs and asks all
// GPUs and 100Gi in its env; hold keeps it running afterwards (its devices
// stay allocated).
func (k *kube) pod(t *testing.T, name string, limits map[string]string, annotations map[string]string, hold bool) {
	t.Helper()
	if k.client == nil {
		t.Fatal("kube.pod needs a kubelet registered with an API server (startChartCluster)")
	}
	command := gpuPrograms
	if hold {
		command += "; exec sleep 3600"
	}
	if _, err := k.client.CoreV1().Pods("default").Create(context.Background(), k.newPod(name, limits, annotations, command), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// newPod is a pod of the vgpu runtime class on k's node, with limits and
// annotations, whose container runs command and asks all GPUs and 100Gi
// in its env.
func (k *kube) newPod(name string, limits map[string]string, annotations map[string]string, command string) *corev1.Pod {
	lim := corev1.ResourceList{}
	for r, v := range limits {
		lim[corev1.ResourceName(r)] = apiresource.MustParse(v)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName: k.node, HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: new(int64),
			// The node has no CNI (host network only): tolerate its not-ready taints.
			Tolerations:      []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			RuntimeClassName: new("vgpu"),
			Containers: []corev1.Container{{
				Name: "main", Image: k8sImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", command},
				Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}, {Name: "VGPU_VISIBLE_DEVICES", Value: "all"},
					{Name: "VGPU_MEMORY_LIMIT", Value: "100Gi"}},
				Resources: corev1.ResourceRequirements{Limits: lim},
			}},
		},
	}
}

// deletePod deletes pod name (k.pod's).
func (k *kube) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := k.client.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
}

// podOutput waits for the container's log to hold the probe's report and
// the GPU programs' last line, and returns the log's contents.
func (k *kube) podOutput(t *testing.T, name string) string {
	t.Helper()
	return k.podLog(t, name, "{\"quota\"", "second_")
}

// podLog waits for the container's log to hold every one of words, and
// returns the log's contents.
func (k *kube) podLog(t *testing.T, name string, words ...string) string {
	t.Helper()
	var got string
	if err := pollAt(podWaitLimit, time.Second, func() error {
		// <namespace>_<pod>_<uid>
		logs, _ := filepath.Glob(filepath.Join(k.logs, "default_"+name+"_*", "main", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			var out strings.Builder
			sc := bufio.NewScanner(strings.NewReader(string(b)))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				// CRI log lines: <time> <stream> <P|F> <text>
				if f := strings.SplitN(sc.Text(), " ", 4); len(f) == 4 {
					out.WriteString(f[3] + "\n")
				}
			}
			s, all := out.String(), true
			for _, w := range words {
				all = all && strings.Contains(s, w)
			}
			if all {
				got = s
				return nil
			}
		}
		return fmt.Errorf("no %q in %v", words, logs)
	}); err != nil {
		k.dumpLogs(t)
		t.Fatalf("pod %s: %v", name, err)
	}
	return got
}

func (k *kube) dumpLogs(t *testing.T) {
	for _, g := range []string{"kubelet-*.log", "device-plugin.log", "containerd/containerd.log"} {
		ls, _ := filepath.Glob(filepath.Join(k.dir, g))
		for _, l := range ls {
			b, _ := os.ReadFile(l)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("%s (tail):\n%s", l, b)
		}
	}
}

// kubeletLogWait waits for a line of the current kubelet's log holding every one of words.
func (k *kube) kubeletLogWait(t *testing.T, words ...string) string {
	t.Helper()
	return k.kubeletLogWaitAny(t, words, nil)
}

// kubeletLogWaitAny is kubeletLogWait for a line that also holds one of anyOf.
func (k *kube) kubeletLogWaitAny(t *testing.T, words, anyOf []string) string {
	t.Helper()
	var found string
	if err := pollAt(podWaitLimit, time.Second, func() error {
		b, _ := os.ReadFile(k.kubelet.log)
		if int64(len(b)) >= k.kubeletLogFrom {
			b = b[k.kubeletLogFrom:]
		}
		for _, line := range strings.Split(string(b), "\n") {
			all := true
			for _, w := range words {
				all = all && strings.Contains(line, w)
			}
			some := len(anyOf) == 0
			for _, w := range anyOf {
				some = some || strings.Contains(line, w)
			}
			if all && some {
				found = line
				return nil
			}
		}
		return fmt.Errorf("no line with %q and one of %q", words, anyOf)
	}); err != nil {
		k.dumpLogs(t)
		t.Fatalf("kubelet log: %v", err)
	}
	return found
}

// checkNamed: vgpu status and vgpu node's metrics (k.metrics) name the
// running pod's namespace, pod and container, learned from the kubelet's PodResources
// API.
func (k *kube) checkNamed(t *testing.T, name string, memory uint64) {
	t.Helper()
	want := events.Pod{Namespace: "default", Name: name, Container: "main"}
	cli := filepath.Join(binaries(t), "vgpu")
	var got *status.Container
	if err := pollAt(30*time.Second, time.Second, func() error {
		for _, c := range vgpuStatus(t, cli, k.env.stateDir).Containers {
			if c.Pod != nil && *c.Pod == want {
				got = &c
			}
		}
		return holds(got != nil, "vgpu status does not name %+v", want)
	}); err != nil {
		k.dumpLogs(t)
		t.Fatalf("%v:\n%s", err, statusText(cli, k.env.stateDir))
	}
	if len(got.Devices) != 1 || got.Devices[0].MemoryLimit != memory {
		t.Errorf("the container named %+v has devices %+v, want one of %d bytes", *got.Pod, got.Devices, memory)
	}
	text, err := exec.Command(cli, "status", "--wide", "--state-dir", k.env.stateDir).CombinedOutput()
	line := fmt.Sprintf("  namespace default  pod %s  container main\n", name)
	if err != nil || !strings.Contains(string(text), "CONTAINER "+got.ID) || !strings.Contains(string(text), line) {
		t.Errorf("vgpu status (%v) lacks %q:\n%s", err, line, text)
	}
	t.Logf("vgpu status:\n%s", text)
	labels := map[string]string{"container": got.ID, "namespace": "default", "pod": name, "container_name": "main"}
	if v, ok := metricValue(scrape(t, k.metrics), "vgpu_memory_limit_bytes", labels); !ok || uint64(v) != memory {
		t.Errorf("vgpu_memory_limit_bytes%v: %v (%v), want %d", labels, v, ok, memory)
	}
}

// killContainers kills every process left in the cgroups of this
// containerd's containers (cgroupfs, no QOS cgroups: /k8s.io/<container id>,
// under the pids hierarchy on cgroup v1, the root on v2). Their shims are
// gone by the time the daemons' stragglers are killed, and the processes
// would outlive the test. Only one kubelet test runs per machine (the host's
// device-plugin directory), so /k8s.io/ holds only this test's containers.
func (k *kube) killContainers(t *testing.T) {
	for _, g := range []string{"/sys/fs/cgroup/pids/k8s.io/*/cgroup.procs", "/sys/fs/cgroup/k8s.io/*/cgroup.procs"} {
		files, _ := filepath.Glob(g)
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, field := range strings.Fields(string(b)) {
				var pid int
				if _, err := fmt.Sscanf(field, "%d", &pid); err == nil && pid > 1 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
}

// startContainerd starts containerd v2.4.2 on its own socket (k.sock) with
// vgpu-runtime as the default runtime and the test images imported.
func (k *kube) startContainerd(t *testing.T, f *fixture) {
	t.Helper()
	e, tools := k.env, k.tools
	path := "PATH=" + tools + ":" + os.Getenv("PATH")

	// containerd: its defaults, the vgpu runtime class as `vgpu setup
	// containerd --kubernetes --default` writes it, and what this VM needs.
	// The default runtime too: the DRA tests' pods name no runtime class.
	cdir := filepath.Join(e.dir, "containerd")
	mkdirAll(t, cdir, 0o700)
	k.sock = filepath.Join(cdir, "containerd.sock")
	def, err := exec.Command(filepath.Join(tools, "containerd"), "config", "default").Output()
	if err != nil {
		t.Fatalf("containerd config default: %v", err)
	}
	dropIn := filepath.Join(cdir, "conf.d", setup.DropInName)
	withVgpu, dropInData, err := setup.Containerd(def, dropIn, setup.ContainerdOptions{RuntimePath: e.wrapper, Kubernetes: true, Default: true})
	if err != nil {
		t.Fatalf("setup containerd --kubernetes: %v", err)
	}
	mkdirAll(t, filepath.Dir(dropIn), 0o700)
	if err := os.WriteFile(dropIn, dropInData, 0o600); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := toml.Unmarshal(withVgpu, &doc); err != nil {
		t.Fatal(err)
	}
	setTOML(doc, filepath.Join(cdir, "root"), "root")
	setTOML(doc, filepath.Join(cdir, "state"), "state")
	// Config version 4 (containerd 2.4) keeps the listeners under plugins;
	// never the default socket, which a dockerd started meanwhile would use.
	if doc["version"] != int64(4) {
		t.Fatalf("containerd config default: version %v, this test writes version 4's tables", doc["version"])
	}
	setTOML(doc, []string{dropIn}, "imports") // only vgpu's drop-in, not the host's conf.d
	setTOML(doc, k.sock, "plugins", "io.containerd.server.v1.grpc", "address")
	setTOML(doc, k.sock+".ttrpc", "plugins", "io.containerd.server.v1.ttrpc", "address")
	setTOML(doc, "", "plugins", "io.containerd.server.v1.debug", "address")
	setTOML(doc, "", "plugins", "io.containerd.server.v1.metrics", "address")
	setTOML(doc, []string{"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"}, "disabled_plugins")
	setTOML(doc, "native", "plugins", "io.containerd.cri.v1.images", "snapshotter")
	setTOML(doc, sandboxImage, "plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox")
	setTOML(doc, true, "plugins", "io.containerd.cri.v1.runtime", "restrict_oom_score_adj")
	// ctr import unpacks through the transfer service: into the native snapshotter.
	setTOML(doc, []map[string]any{{"platform": "linux/amd64", "snapshotter": "native"}}, "plugins", "io.containerd.transfer.v1.local", "unpack_config")
	for _, rt := range []string{"runc", "vgpu"} {
		setTOML(doc, "native", "plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", rt, "snapshotter")
	}
	setTOML(doc, filepath.Join(cdir, "cni-bin"), "plugins", "io.containerd.cri.v1.runtime", "cni", "bin_dirs")
	setTOML(doc, []string{filepath.Join(cdir, "cni-bin")}, "plugins", "io.containerd.cri.v1.runtime", "cni", "bin_dirs")
	setTOML(doc, filepath.Join(cdir, "cni-conf"), "plugins", "io.containerd.cri.v1.runtime", "cni", "conf_dir")
	// CDI specs (the DRA driver's per-claim ones) from the test's own directory.
	k.cdiDir = filepath.Join(e.dir, "cdi")
	setTOML(doc, []string{k.cdiDir}, "plugins", "io.containerd.cri.v1.runtime", "cdi_spec_dirs")
	delete(doc["plugins"].(map[string]any)["io.containerd.cri.v1.runtime"].(map[string]any)["cni"].(map[string]any), "bin_dir")
	out, err := toml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := filepath.Join(cdir, "config.toml")
	writeFile(t, ccfg, out, 0o600)
	if strings.Contains(string(out), "/run/containerd/containerd.sock") {
		t.Fatalf("the test's containerd config still names the host's socket:\n%s", out)
	}
	ctrd := startDaemon(t, "containerd", filepath.Join(cdir, "containerd.log"), e.dir, []string{path}, filepath.Join(tools, "containerd"), "--config", ccfg)
	k.containerd, k.containerdCfg = ctrd, ccfg
	ctrd.waitFor(t, 90*time.Second, func() error {
		_, err := k.ctr(t, "version")
		return err
	})
	// Kill what the kubelet left running (the sandboxes' sleep) before containerd stops.
	t.Cleanup(func() { k.killContainers(t) })
	sandboxTar := filepath.Join(e.dir, "sandbox.tar")
	writeDockerArchiveCmd(t, f.rootfs, sandboxTar, sandboxImage, []string{"/bin/sleep", "2147483647"})
	for _, a := range []string{f.archive, sandboxTar} {
		if out, err := k.ctr(t, "images", "import", "--snapshotter", "native", a); err != nil {
			t.Fatalf("ctr import %s: %v\n%s", a, err, out)
		}
	}

}
