//go:build k8s

// The Helm chart (deploy/helm/vgpu), rendered by the Helm CLI that
// test/k8s/helm/build.sh builds (VGPU_HELM names its directory; make
// k8s-test-run sets it): `helm lint` is clean, every values combination
// renders, every object decodes strictly into its Kubernetes API type (an
// unknown or mistyped field fails), the rendered config.toml is one vgpu
// reads, and values the schema forbids are refused. (Field names match
// case-insensitively in this decoding; test/e2e/kubernetes_chart_test.go
// creates the objects on the API server with its exact strict validation.)
package helm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/vgpu-dev/vgpu/internal/config"
)

const chartDir = "vgpu"

func helmBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("VGPU_HELM")
	if dir == "" {
		t.Fatal("VGPU_HELM is not set: run make k8s-test (or VGPU_HELM=$(test/k8s/helm/build.sh) go test -tags k8s ./deploy/helm/)")
	}
	return filepath.Join(dir, "helm")
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), nil
}

// rendered is one helm template's objects, by kind and name.
type rendered struct {
	objs map[string][]byte // "Kind/name" -> the object's YAML
}

func (r rendered) names(kind string) []string {
	var n []string
	for k := range r.objs {
		if name, ok := strings.CutPrefix(k, kind+"/"); ok {
			n = append(n, name)
		}
	}
	slices.Sort(n)
	return n
}

// decode decodes the object kind/name strictly into v.
func (r rendered) decode(t *testing.T, key string, v any) {
	t.Helper()
	b, ok := r.objs[key]
	if !ok {
		t.Fatalf("no %s rendered (have %v)", key, r.keys())
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s does not decode as its API type: %v\n%s", key, err, b)
	}
}

func (r rendered) keys() []string {
	var k []string
	for key := range r.objs {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

// typed is each kind the chart renders, with its API type.
var typed = map[string]func() any{
	"ServiceAccount":     func() any { return &corev1.ServiceAccount{} },
	"ConfigMap":          func() any { return &corev1.ConfigMap{} },
	"Service":            func() any { return &corev1.Service{} },
	"ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"Role":               func() any { return &rbacv1.Role{} },
	"RoleBinding":        func() any { return &rbacv1.RoleBinding{} },
	"DaemonSet":          func() any { return &appsv1.DaemonSet{} },
	"Job":                func() any { return &batchv1.Job{} },
	"RuntimeClass":       func() any { return &nodev1.RuntimeClass{} },
	"DeviceClass":        func() any { return &resourcev1.DeviceClass{} },
}

func render(t *testing.T, sets ...string) rendered {
	t.Helper()
	args := []string{"template", "vgpu", chartDir, "--namespace", "vgpu-system"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{objs: map[string][]byte{}}
	for doc := range strings.SplitSeq(out, "\n---") {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("a rendered document is not YAML: %v\n%s", err, doc)
		}
		if meta.Kind == "" {
			continue // comments only
		}
		key := meta.Kind + "/" + meta.Metadata.Name
		if _, dup := r.objs[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		r.objs[key] = []byte(doc)
		if mk, ok := typed[meta.Kind]; ok {
			r.decode(t, key, mk())
		} else if meta.Kind != "ServiceMonitor" {
			t.Errorf("%s: a kind this test does not check; add its API type to typed", key)
		}
	}
	return r
}

func daemonSet(t *testing.T, r rendered, name string) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	r.decode(t, "DaemonSet/"+name, &ds)
	return &ds
}

func args(ds *appsv1.DaemonSet) string {
	return strings.Join(ds.Spec.Template.Spec.Containers[0].Args, " ")
}

// vgpuConfig is the rendered config.toml, as vgpu reads it.
func vgpuConfig(t *testing.T, r rendered) *config.Config {
	t.Helper()
	var cm corev1.ConfigMap
	r.decode(t, "ConfigMap/vgpu-config", &cm)
	c, err := config.Parse([]byte(cm.Data["config.toml"]))
	if err != nil {
		t.Fatalf("the rendered config.toml is not one vgpu reads: %v\n%s", err, cm.Data["config.toml"])
	}
	return c
}

func TestKubernetesChartLint(t *testing.T) {
	out, err := helm(t, "lint", "--strict", chartDir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint: %s", out)
	}
}

func TestKubernetesChartDefaults(t *testing.T) {
	r := render(t)
	if got := r.names("DaemonSet"); !slices.Equal(got, []string{"vgpu-device-plugin", "vgpu-remove-device-plugin"}) {
		t.Errorf("DaemonSets %v; want the device plugin's and its removal hook's", got)
	}
	ds := daemonSet(t, r, "vgpu-device-plugin")
	a := args(ds)
	for _, want := range []string{"host-exec", "/opt/vgpu/bin/vgpu-node", "--device-plugin", "--listen=127.0.0.1:9400", "--memory-unit=1Gi"} {
		if !strings.Contains(a, want) {
			t.Errorf("node container args %q lack %q", a, want)
		}
	}
	init := ds.Spec.Template.Spec.InitContainers[0]
	if init.Image != "ghcr.io/vgpu-dev/vgpu:0.1.0" || init.Args[0] != "install" {
		t.Errorf("init container %s %v; want the chart's image running install", init.Image, init.Args)
	}
	if !slices.Contains(init.Args, "--install-root=/opt/vgpu") || !slices.Contains(init.Args, "--containerd-config=/etc/containerd/config.toml") {
		t.Errorf("install args %v", init.Args)
	}
	var rc nodev1.RuntimeClass
	r.decode(t, "RuntimeClass/vgpu", &rc)
	if rc.Handler != "vgpu" || rc.Scheduling.NodeSelector["vgpu.io/enabled"] != "true" {
		t.Errorf("RuntimeClass %+v", rc)
	}
	// Least rights: the device plugin's role has no DRA rights.
	var cr rbacv1.ClusterRole
	r.decode(t, "ClusterRole/vgpu-device-plugin", &cr)
	for _, rule := range cr.Rules {
		if slices.Contains(rule.APIGroups, "resource.k8s.io") || slices.Contains(rule.Resources, "nodes") || slices.Contains(rule.Verbs, "list") {
			t.Errorf("the device plugin's ClusterRole grants %v, which it does not use", rule)
		}
	}
	c := vgpuConfig(t, r)
	if c.Library.Dir != "/opt/vgpu/lib" || c.Kubernetes.Placement != "binpack" || !c.Kubernetes.GrantsOnly {
		t.Errorf("config library.dir %q placement %q grants_only %v", c.Library.Dir, c.Kubernetes.Placement, c.Kubernetes.GrantsOnly)
	}
	if r.names("ServiceMonitor") != nil || r.names("Service") != nil {
		t.Error("metrics objects rendered without metrics.serviceMonitor.enabled")
	}
	// The removal hook: a DaemonSet that runs remove, and a Job that waits for it.
	rm := daemonSet(t, r, "vgpu-remove-device-plugin")
	if rm.Annotations["helm.sh/hook"] != "pre-delete" || rm.Spec.Template.Spec.InitContainers[0].Args[0] != "remove" {
		t.Errorf("removal DaemonSet: hook %q, args %v", rm.Annotations["helm.sh/hook"], rm.Spec.Template.Spec.InitContainers[0].Args)
	}
	var job batchv1.Job
	r.decode(t, "Job/vgpu-remove", &job)
	if ja := strings.Join(job.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(ja, "--name=vgpu-remove-device-plugin") {
		t.Errorf("the waiting Job %q does not wait for the removal DaemonSet", ja)
	}
}

func TestKubernetesChartValues(t *testing.T) {
	t.Run("dra", func(t *testing.T) {
		r := render(t, "devicePlugin.enabled=false", "dra.enabled=true")
		if got := r.names("DaemonSet"); !slices.Equal(got, []string{"vgpu-dra", "vgpu-remove-dra"}) {
			t.Errorf("DaemonSets %v", got)
		}
		if a := args(daemonSet(t, r, "vgpu-dra")); !strings.Contains(a, "--dra") || strings.Contains(a, "--device-plugin") {
			t.Errorf("DRA node args %q", a)
		}
		if got := r.names("DeviceClass"); !slices.Equal(got, []string{"vgpu.io", "vgpu.io-share"}) {
			t.Errorf("DeviceClasses %v", got)
		}
		var cr rbacv1.ClusterRole
		r.decode(t, "ClusterRole/vgpu-dra", &cr)
		if !slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "resourceslices") }) {
			t.Error("the DRA driver's ClusterRole cannot publish ResourceSlices")
		}
	})
	t.Run("both on two node pools", func(t *testing.T) {
		r := render(t, "dra.enabled=true", "devicePlugin.nodeSelector.pool=a", "dra.nodeSelector.pool=b")
		dp, dra := daemonSet(t, r, "vgpu-device-plugin"), daemonSet(t, r, "vgpu-dra")
		if dp.Spec.Template.Spec.NodeSelector["pool"] != "a" || dra.Spec.Template.Spec.NodeSelector["pool"] != "b" ||
			dra.Spec.Template.Spec.NodeSelector["vgpu.io/enabled"] != "true" {
			t.Errorf("node selectors %v and %v", dp.Spec.Template.Spec.NodeSelector, dra.Spec.Template.Spec.NodeSelector)
		}
	})
	t.Run("placement, borrowing, spatial", func(t *testing.T) {
		r := render(t, "config.placement=spread", "config.memoryLimit=none", "config.memoryBorrow=free",
			"config.coresLimit=none", "config.spatialGPUs={0,GPU-1234}", "host.installRoot=/usr/local/vgpu", "config.paceAll=true")
		c := vgpuConfig(t, r)
		if c.Kubernetes.Placement != "spread" || c.Kubernetes.MemoryLimit != "none" || c.Kubernetes.CoresLimit != "none" ||
			c.MemoryBorrow != "free" || !slices.Equal(c.Spatial.GPUs, []string{"0", "GPU-1234"}) || c.Library.Dir != "/usr/local/vgpu/lib" || !c.Defaults.PaceAll {
			t.Errorf("config from the values: placement %q memory_limit %q cores_limit %q memory_borrow %q spatial %v library %q pace_all %v",
				c.Kubernetes.Placement, c.Kubernetes.MemoryLimit, c.Kubernetes.CoresLimit, c.MemoryBorrow, c.Spatial.GPUs, c.Library.Dir, c.Defaults.PaceAll)
		}
		if vgpuConfig(t, render(t)).Defaults.PaceAll {
			t.Error("the chart's defaults pace every pod: want pace_all only when config.paceAll is set")
		}
		if a := args(daemonSet(t, r, "vgpu-device-plugin")); !strings.Contains(a, "/usr/local/vgpu/bin/vgpu-node") {
			t.Errorf("node args %q do not run the installed vgpu-node", a)
		}
	})
	t.Run("priority classes", func(t *testing.T) {
		r := render(t, "config.priorityClasses.online-serving=high", "config.priorityClasses.batch=low")
		c := vgpuConfig(t, r)
		if c.Kubernetes.PriorityClasses["online-serving"] != "high" || c.Kubernetes.PriorityClasses["batch"] != "low" || len(c.Kubernetes.PriorityClasses) != 2 {
			t.Errorf("kubernetes.priority_classes %v; want online-serving high, batch low", c.Kubernetes.PriorityClasses)
		}
		// The table needs the pods of the node listed; without it the role
		// stays at get (TestKubernetesChartDefaults).
		var cr rbacv1.ClusterRole
		r.decode(t, "ClusterRole/vgpu-device-plugin", &cr)
		lists := false
		for _, rule := range cr.Rules {
			lists = lists || slices.Contains(rule.Resources, "pods") && slices.Contains(rule.Verbs, "list")
		}
		if !lists {
			t.Errorf("with priorityClasses the device plugin's role cannot list pods: %v", cr.Rules)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		r := render(t, "metrics.serviceMonitor.enabled=true", "metrics.port=9500", "metrics.grafanaDashboard.enabled=true")
		if r.names("ServiceMonitor") == nil || r.names("Service") == nil {
			t.Errorf("no ServiceMonitor or Service: %v", r.keys())
		}
		if a := args(daemonSet(t, r, "vgpu-device-plugin")); !strings.Contains(a, "--listen=0.0.0.0:9500") {
			t.Errorf("node args %q: Prometheus cannot reach a loopback listener", a)
		}
		var cm corev1.ConfigMap
		r.decode(t, "ConfigMap/vgpu-dashboard", &cm)
		want, err := os.ReadFile("../../configs/grafana/vgpu.json")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(cm.Data["vgpu.json"]) != strings.TrimSpace(string(want)) {
			t.Error("the dashboard ConfigMap is not configs/grafana/vgpu.json (copy it to deploy/helm/vgpu/dashboards/)")
		}
	})
	t.Run("image, selector, tolerations, resources", func(t *testing.T) {
		r := render(t, "image.repository=registry.example/vgpu", "image.tag=1.2.3", "nodeSelector.gpu=yes",
			"tolerations[0].key=gpu", "tolerations[0].operator=Exists", "resources.node.limits.memory=1Gi")
		ds := daemonSet(t, r, "vgpu-device-plugin")
		spec := ds.Spec.Template.Spec
		if spec.Containers[0].Image != "registry.example/vgpu:1.2.3" || spec.NodeSelector["gpu"] != "yes" ||
			len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "gpu" || spec.Containers[0].Resources.Limits.Memory().String() != "1Gi" {
			t.Errorf("pod spec from the values: image %s selector %v tolerations %v resources %v",
				spec.Containers[0].Image, spec.NodeSelector, spec.Tolerations, spec.Containers[0].Resources)
		}
	})
}

// Values the schema or the templates refuse, each with its reason.
func TestKubernetesChartRefuses(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"config.placement=fill"}, "placement"},
		{[]string{"host.installRoot=opt/vgpu"}, "installRoot"},
		{[]string{"config.memoryLimit=lots"}, "memoryLimit"},
		{[]string{"config.priorityClasses.batch=urgent"}, "priorityClasses"},
		{[]string{"devicePlugin.enabeld=true"}, "enabeld"},
		{[]string{"dra.enabled=true"}, "same nodes"},
		{[]string{"devicePlugin.enabled=false"}, "neither"},
	} {
		args := []string{"template", "vgpu", chartDir}
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		_, err := helm(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %v: %v; want a refusal naming %q", c.set, err, c.want)
		}
	}
}
