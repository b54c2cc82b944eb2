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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pelletier/go-toml/v2"
	"sigs.k8s.io/yaml"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// chartNS is the namespace the chart's tests install into.
const chartNS = "vgpu-system"

// chartCluster is what the chart's real-cluster tests share: the test's
// containerd, the control plane (authorizing by RBAC, so that the node pods
// have only the chart's rights) with the DaemonSet and Job controllers and
// the CA publisher, a kubelet registered as node (labelled
// vgpu.io/enabled), and the image of release 0.1.0-e2e
// (deploy/image, as make image builds it) imported into containerd.
type chartCluster struct {
	e         *env
	k         *kube
	cp        *controlPlane
	c         *kubernetes.Clientset
	node      string
	root      string // the repository
	imgDir    string
	installer string // the static vgpu-install
	helmCLI   string
	api       *url.URL
	// installRoot is host.installRoot: under the test's directory.
	installRoot string
	// testConfig is the test's vgpu configuration as newEnvSim and
	// kubernetesMode wrote it, before an install replaced it.
	testConfig []byte
	restarts   int // containerd restarts served (serveRestart)
	execs      int
	configs    int // chartConfig's files
	// releaseConfig is the configuration installChart or upgradeChart gave
	// the release last.
	releaseConfig []byte
}

func startChartCluster(t *testing.T, name, node string, devs []simroot.Device) *chartCluster {
	t.Helper()
	requireRoot(t)
	need(t, "runc")
	f := shared(t)
	tools := k8sTools(t)
	cc := &chartCluster{node: node, helmCLI: helmCLI(t)}
	e := newEnvSim(t, name, simroot.Options{Devices: devs})
	cc.e = e
	kubernetesMode(t, e)
	var err error
	if cc.testConfig, err = os.ReadFile(e.config); err != nil {
		t.Fatal(err)
	}
	k := &kube{dir: e.dir, tools: tools, env: e}
	cc.k = k
	k.startContainerd(t, f)
	// RBAC: the node pods have only the rights the chart's roles give.
	cp := startControlPlaneAuthz(t, tools, e.dir, "RBAC")
	cc.cp, cc.c = cp, cp.client
	ctx := context.Background()
	c := cp.client
	// The DaemonSet and Job controllers, the garbage collector that
	// deletes a deleted DaemonSet's pods, as helm uninstall expects
	// (startControlPlane runs only the claim controller), and the
	// publisher of the API server's CA (kube-root-ca.crt) into every
	// namespace, which the node pods' in-cluster client reads: helm
	// install --create-namespace makes the chart's namespace, as on a
	// cluster.
	dsMarker := filepath.Join(e.dir, "kcm-ds")
	startDaemon(t, "kube-controller-manager daemonset,job,garbagecollector,root-ca-cert-publisher", dsMarker+".log", dsMarker, nil, filepath.Join(tools, "kube"), "kube-controller-manager",
		"--kubeconfig", cp.kubeconfig, "--leader-elect=false", "--controllers", "daemonset,job,garbagecollector,root-ca-cert-publisher",
		"--root-ca-file", filepath.Join(e.dir, "apiserver-pki", "apiserver.crt"),
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(freePort(t)), "--cert-dir", dsMarker,
		"--authentication-kubeconfig", cp.kubeconfig, "--authorization-kubeconfig", cp.kubeconfig)

	k.rootDir = filepath.Join(e.dir, "kubelet")
	k.logs = filepath.Join(e.dir, "pod-logs")
	mkdirAll(t, k.logs, 0o755)
	k.writeKubeletConfig(t, filepath.Join(e.dir, "kubelet.yaml"))
	pluginDir := "/var/lib/kubelet/device-plugins"
	t.Cleanup(func() {
		for _, f := range []string{"kubelet.sock", "vgpu-memory.sock", "vgpu-cores.sock", "kubelet_internal_checkpoint"} {
			os.Remove(filepath.Join(pluginDir, f))
		}
	})
	// Pods through the API server, on this node; --v 3: it logs DRA registrations.
	k.node, k.kubeconfig, k.client, k.kubeletV = node, cp.kubeconfig, c, "3"
	k.startKubelet(t)
	waitUntil(t, k, cp, 3*time.Minute, "node registered", func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels["vgpu.io/enabled"] = "true"
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})

	// The image, as make image builds it, in the node's containerd.
	cc.root = filepath.Dir(filepath.Dir(filepath.Dir(chartDir(t))))
	cc.imgDir = filepath.Join(e.dir, "image")
	cc.installer = filepath.Join(e.dir, "vgpu-install")
	cmd := exec.Command("go", "build", "-trimpath", "-o", cc.installer, "./cmd/vgpu-install")
	cmd.Dir = cc.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build vgpu-install: %v\n%s", err, out)
	}
	cc.image(t, "0.1.0-e2e", binaries(t), filepath.Join(os.Getenv("VGPU_BUILD"), "lib"))

	rc, err := clientcmd.BuildConfigFromFlags("", cp.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cc.api, err = url.Parse(rc.Host); err != nil {
		t.Fatal(err)
	}
	cc.installRoot = filepath.Join(e.dir, "opt", "vgpu")
	return cc
}

// image builds the image of release tag from the binaries in bin and the
// libraries in lib, and imports it into the node's containerd.
func (cc *chartCluster) image(t *testing.T, tag, bin, lib string) {
	t.Helper()
	cmd := exec.Command("go", "run", ".", "-bin", bin, "-lib", lib, "-config", filepath.Join(cc.root, "configs/config.toml"),
		"-installer", cc.installer, "-out", cc.imgDir, "-version", tag, "-commit", "e2e")
	cmd.Dir = filepath.Join(cc.root, "deploy/image")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("image %s: %v\n%s", tag, err, out)
	}
	if out, err := cc.k.ctr(t, "images", "import", "--snapshotter", "native", filepath.Join(cc.imgDir, "vgpu-"+tag+".tar")); err != nil {
		t.Fatalf("ctr import: %v\n%s", err, out)
	}
}

// values writes the values every chart test gives (hostValues, and the
// image of release 0.1.0-e2e) plus extra, and returns the files.
func (cc *chartCluster) values(t *testing.T, metricsPort int, extra string) string {
	t.Helper()
	image := filepath.Join(cc.e.dir, "values-image.yaml")
	writeFile(t, image, []byte("image: {tag: 0.1.0-e2e, pullPolicy: Never}\n"), 0o644)
	return image + "," + cc.hostValues(t, metricsPort, extra)
}

// hostValues writes what a chart test must give for the chart to run on
// the test's node and touch nothing else of the machine (the node's paths
// under the test's directory, the in-cluster API address) plus extra, and
// returns the files (comma-separated, as helm -f takes them).
func (cc *chartCluster) hostValues(t *testing.T, metricsPort int, extra string) string {
	t.Helper()
	values := filepath.Join(cc.e.dir, "values.yaml")
	writeFile(t, values, []byte(fmt.Sprintf(`hostNetwork: true
priorityClassName: ""
host:
  installRoot: %q
  configPath: %q
  containerdConfig: ""
  stateDir: %q
  grantDir: %q
  kubeletRootDir: %q
  cdiDir: %q
  mountPropagation: None # this VM's / is a private mount
metrics: {port: %d}
extraEnv:
  - {name: KUBERNETES_SERVICE_HOST, value: %q}
  - {name: KUBERNETES_SERVICE_PORT, value: %q}
extraArgs: ["--health-interval=5s"]
uninstall: {timeout: 3m}
`, cc.installRoot, cc.e.config, cc.e.stateDir, filepath.Join(cc.e.dir, "grants"), cc.k.rootDir, cc.k.cdiDir, metricsPort,
		cc.api.Hostname(), cc.api.Port())), 0o644)
	if extra == "" {
		return values
	}
	more := filepath.Join(cc.e.dir, "values-test.yaml")
	writeFile(t, more, []byte(extra), 0o644)
	return values + "," + more
}

// helmCmd is the Helm CLI on the test's cluster, in the chart's namespace.
func (cc *chartCluster) helmCmd(t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.Command(cc.helmCLI, append(args, "--kubeconfig", cc.cp.kubeconfig, "--namespace", chartNS)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	return cmd
}

// helm runs the Helm CLI and fails the test when it fails.
func (cc *chartCluster) helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cc.helmCmd(t, args...).CombinedOutput()
	if err != nil {
		cc.cp.dumpLogs(t)
		cc.k.dumpLogs(t)
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nodePodRunning waits until a node pod of component (device-plugin,
// dra) whose image has tag runs, calling during each poll (nil: nothing).
func (cc *chartCluster) nodePodRunning(t *testing.T, component, tag string, during func() error) {
	t.Helper()
	waitUntil(t, cc.k, cc.cp, 4*time.Minute, "the chart's "+component+" pod of "+tag+" running", func() error {
		if during != nil {
			if err := during(); err != nil {
				return err
			}
		}
		l, err := cc.c.CoreV1().Pods(chartNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && strings.HasSuffix(p.Spec.Containers[0].Image, ":"+tag) {
				return nil
			}
		}
		return fmt.Errorf("%d pods, none of %s running", len(l.Items), tag)
	})
}

// previousChartRelease is the release the chart's upgrade starts from: the
// last one landed before this one (its make image and deploy/helm/vgpu).
// VGPU_CHART_PREVIOUS_RELEASE names another git ref.
const previousChartRelease = "bbd3c90"

// chartRelease is a release built from its own source.
type chartRelease struct {
	commit string // the ref resolved, 12 hex digits
	tag    string // its image's tag: its Makefile's VERSION
	chart  string // its deploy/helm/vgpu
	build  string // its BUILD: bin/, lib/, image/
	tar    string // its image, as make image wrote it
}

// previousRelease builds the previous release as a user of it would have:
// its source from this repository's history (git archive), then its own
// make image, offline (the module cache this build used, GOPROXY=off).
// VGPU_CHART_PREVIOUS_BUILD names a directory to build in and keep: a later
// run whose ref resolves to the same commit reuses what is there. Called
// before the cluster starts: the build needs none, and fails sooner.
func previousRelease(t *testing.T) chartRelease {
	t.Helper()
	root := filepath.Dir(filepath.Dir(filepath.Dir(chartDir(t))))
	ref := previousChartRelease
	if r := os.Getenv("VGPU_CHART_PREVIOUS_RELEASE"); r != "" {
		ref = r
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "--verify", ref+"^{commit}").CombinedOutput()
	if err != nil {
		t.Fatalf("git rev-parse %s: %v\n%s(the upgrade test builds the previous release from this repository's history: in a shallow clone, git fetch --unshallow; or set VGPU_CHART_PREVIOUS_RELEASE to a ref it has)", ref, err, out)
	}
	dir := os.Getenv("VGPU_CHART_PREVIOUS_BUILD")
	if dir == "" {
		dir = t.TempDir()
	}
	r := chartRelease{commit: strings.TrimSpace(string(out)), chart: filepath.Join(dir, "src", "deploy", "helm", "vgpu"), build: filepath.Join(dir, "build")}
	stamp := filepath.Join(dir, "built-commit")
	if b, _ := os.ReadFile(stamp); string(b) != r.commit {
		start := time.Now()
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		mkdirAll(t, filepath.Join(dir, "src"), 0o755)
		archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, r.commit, filepath.Join(dir, "src"))
		if out, err := archive.CombinedOutput(); err != nil {
			t.Fatalf("git archive %s: %v\n%s", r.commit, err, out)
		}
		// Its own make image, as its README says; GIT_COMMIT given, since
		// an archive is no git tree; nothing of an outer make or test run.
		mk := exec.Command("make", "-C", filepath.Join(dir, "src"), "image", "BUILD="+r.build, "GIT_COMMIT="+r.commit)
		mk.Env = append(cleanMakeEnv(), "GOPROXY=off", "GOFLAGS=-mod=mod -buildvcs=false", "GOTOOLCHAIN=local", "GOWORK=off")
		if out, err := mk.CombinedOutput(); err != nil {
			t.Fatalf("make image of %s (%s): %v\n%s(built offline, GOPROXY=off: the modules it needs must be in the module cache; or set VGPU_CHART_PREVIOUS_BUILD to a directory where it was built)", ref, r.commit, err, out)
		}
		writeFile(t, stamp, []byte(r.commit), 0o644)
		t.Logf("the previous release %s (%s) built with its own make image in %s", ref, r.commit, time.Since(start).Round(time.Second))
	}
	tars, _ := filepath.Glob(filepath.Join(r.build, "image", "vgpu-*.tar"))
	if len(tars) != 1 {
		t.Fatalf("the previous release's make image wrote %v, want one vgpu-<version>.tar", tars)
	}
	r.tag = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(tars[0]), "vgpu-"), ".tar")
	r.tar = tars[0]
	return r
}

// importImage imports an image tar into the node's containerd.
func (cc *chartCluster) importImage(t *testing.T, tar string) {
	t.Helper()
	if out, err := cc.k.ctr(t, "images", "import", "--snapshotter", "native", tar); err != nil {
		t.Fatalf("ctr import %s: %v\n%s", tar, err, out)
	}
}

// cleanMakeEnv is this process's environment without what an outer make
// (make test's jobserver, its exported BUILD) or go test set.
func cleanMakeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "BUILD", "GOFLAGS", "GOPROXY", "GOTOOLCHAIN", "GOWORK", "CGO_CFLAGS":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// chartConfig writes vgpu's configuration as this tree's chart renders it
// from values (helm -f) and sets (helm --set: config.placement=spread),
// with the [driver] table of the test's simulated GPU in place of the
// chart's (the chart renders the root of a real driver, whose device nodes
// are under the node's /dev), and returns the file for config.override.
// So a value such as config.placement reaches the node through the chart's
// own template, and the installer writes what the chart rendered.
func (cc *chartCluster) chartConfig(t *testing.T, values string, sets ...string) string {
	t.Helper()
	args := []string{"template", "vgpu", chartDir(t), "-f", values, "--show-only", "templates/config.yaml"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out := cc.helm(t, args...)
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal([]byte(out), &cm); err != nil {
		t.Fatalf("helm template config.yaml: %v\n%s", err, out)
	}
	var rendered, test map[string]any
	if err := toml.Unmarshal([]byte(cm.Data["config.toml"]), &rendered); err != nil {
		t.Fatalf("the chart's config.toml: %v\n%s", err, cm.Data["config.toml"])
	}
	if err := toml.Unmarshal(cc.testConfig, &test); err != nil {
		t.Fatal(err)
	}
	rendered["driver"] = test["driver"]
	b, err := toml.Marshal(rendered)
	if err != nil {
		t.Fatal(err)
	}
	cc.configs++
	p := filepath.Join(cc.e.dir, fmt.Sprintf("chart-config-%d.toml", cc.configs))
	writeFile(t, p, b, 0o644)
	return p
}

// installChart runs helm install of this tree's chart and image (0.1.0-e2e)
// with component ("device-plugin" or "dra") the only mode, vgpu's
// configuration rendered by the chart from sets (chartConfig), containerd
// left alone (the test's already runs vgpu-runtime, reading the file the
// installer writes); it waits until the node pod runs and the kubelet took
// its registration, and returns the values files, for helm upgrade.
func (cc *chartCluster) installChart(t *testing.T, component string, sets ...string) string {
	t.Helper()
	extra := "devicePlugin: {enabled: true}\ndra: {enabled: false}\n"
	if component == "dra" {
		extra = "devicePlugin: {enabled: false}\ndra: {enabled: true}\n"
	}
	values := cc.values(t, freePort(t), extra)
	config := cc.chartConfig(t, values, sets...)
	cc.releaseConfig = readFile(t, config)
	args := []string{"install", "vgpu", chartDir(t), "--create-namespace", "-f", values, "--set-file", "config.override=" + config}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cc.helm(t, args...)
	cc.nodePodRunning(t, component, "0.1.0-e2e", nil)
	cc.waitNodeRegistered(t, component)
	return values
}

// upgradeChart runs helm upgrade of the release with values and sets (its
// configuration rendered again, chartConfig): a changed configuration
// rolls the node pod. It waits until a node pod other than the one
// running before runs and the kubelet took its registration.
func (cc *chartCluster) upgradeChart(t *testing.T, component, values string, sets ...string) {
	t.Helper()
	before := cc.nodePod(t, component).Name
	cc.k.kubeletLogFrom = fileSize(cc.k.kubelet.log)
	config := cc.chartConfig(t, values, sets...)
	if b := readFile(t, config); string(b) == string(cc.releaseConfig) {
		t.Fatalf("helm upgrade with %q: the chart renders the release's configuration again, so the node pod would not roll (does the chart's templates/config.yaml render these values?):\n%s", sets, b)
	} else {
		cc.releaseConfig = b
	}
	args := []string{"upgrade", "vgpu", chartDir(t), "-f", values, "--set-file", "config.override=" + config}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cc.helm(t, args...)
	cc.nodePodReplaced(t, component, before)
	cc.waitNodeRegistered(t, component)
}

// nodePodReplaced waits until a running node pod of component is not
// the pod named before (the DaemonSet replaced it), and returns it.
func (cc *chartCluster) nodePodReplaced(t *testing.T, component, before string) *corev1.Pod {
	t.Helper()
	var now *corev1.Pod
	waitUntil(t, cc.k, cc.cp, 4*time.Minute, "a node pod of "+component+" in place of "+before, func() error {
		p, err := cc.runningNodePod(component)
		if err != nil {
			return err
		}
		if p.Name == before {
			return fmt.Errorf("%s still runs", before)
		}
		now = p
		return nil
	})
	return now
}

// waitNodeRegistered waits until the kubelet's log, after
// k.kubeletLogFrom, shows the node pod's registration: both resources
// of the device plugin, or the DRA driver.
func (cc *chartCluster) waitNodeRegistered(t *testing.T, component string) {
	t.Helper()
	if component == "dra" {
		cc.k.kubeletLogWait(t, "Registered DRA plugin", "vgpu.io")
		return
	}
	cc.k.waitRegistered(t)
}

// runningNodePod is the running node pod of component, not being deleted.
func (cc *chartCluster) runningNodePod(component string) (*corev1.Pod, error) {
	l, err := cc.c.CoreV1().Pods(chartNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component})
	if err != nil {
		return nil, err
	}
	for i, p := range l.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return &l.Items[i], nil
		}
	}
	return nil, fmt.Errorf("%d pods of %s, none running", len(l.Items), component)
}

// nodePod is the running node pod of component.
func (cc *chartCluster) nodePod(t *testing.T, component string) *corev1.Pod {
	t.Helper()
	p, err := cc.runningNodePod(component)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// nodePodLog is what the node container of pod name (in the chart's
// namespace) wrote, from the kubelet's pod logs.
func (cc *chartCluster) nodePodLog(name string) string {
	logs, _ := filepath.Glob(filepath.Join(cc.k.logs, chartNS+"_"+name+"_*", "node", "*.log"))
	var b strings.Builder
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		b.Write(data)
	}
	return b.String()
}

// checkInstalledPlacement checks that the configuration the chart's
// installer wrote on the node (host.configPath) says kubernetes.placement
// = policy.
func (cc *chartCluster) checkInstalledPlacement(t *testing.T, policy string) {
	t.Helper()
	b, err := os.ReadFile(cc.e.config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Kubernetes struct {
			Placement string `toml:"placement"`
		} `toml:"kubernetes"`
	}
	if err := toml.Unmarshal(b, &cfg); err != nil || cfg.Kubernetes.Placement != policy {
		t.Fatalf("the configuration the chart installed (%v) has kubernetes.placement %q, want %q (config.placement):\n%s", err, cfg.Kubernetes.Placement, policy, b)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}
