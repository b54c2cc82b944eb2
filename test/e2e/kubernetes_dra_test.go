//go:build e2e && k8s

// The DRA end-to-end test: a real control plane v1.37.2 (etcd v3.7.3
// embedded, kube-apiserver, kube-scheduler, kube-controller-manager with the
// resourceclaim controller) and kubelet, all on 127.0.0.1, the containerd of
// kubernetes_test.go, and the chart's DRA driver (the node pod's `vgpu node
// --dra`, kubernetes_chart_cluster_test.go) over a simulated 80 GiB GPU. The
// scheduler shares the GPU by consumable capacity (memory, cores); the
// driver's per-claim CDI spec carries the limits into the containers.
package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

const draNode = "vgpu-e2e"

// controlPlane is etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager, each a daemon of the multicall kube binary.
type controlPlane struct {
	kubeconfig string
	client     *kubernetes.Clientset
	logs       []string
}

func startControlPlane(t *testing.T, tools, dir string) *controlPlane {
	t.Helper()
	return startControlPlaneAuthz(t, tools, dir, "AlwaysAllow")
}

// startControlPlaneAuthz starts one whose API server authorizes by authz
// (its --authorization-mode): RBAC holds a service account to the rights
// its roles give, while the test's admin token (system:masters) may do
// anything under either.
func startControlPlaneAuthz(t *testing.T, tools, dir, authz string) *controlPlane {
	t.Helper()
	kube := filepath.Join(tools, "kube")
	for _, c := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Lstat(filepath.Join(tools, c)); err != nil {
			t.Fatalf("%s=%s has no %s (%v): test/k8s/build.sh builds the control plane into the multicall kube", k8sToolsEnv, tools, c, err)
		}
	}
	cp := &controlPlane{}
	logf := func(name string) string {
		l := filepath.Join(dir, name+".log")
		cp.logs = append(cp.logs, l)
		return l
	}
	etcdPort := freePort(t)
	etcd := startDaemon(t, "etcd", logf("etcd"), dir, nil, kube, "etcd", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort), "--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
	etcd.waitFor(t, 2*time.Minute, func() error {
		r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", etcdPort))
		if err != nil {
			return err
		}
		r.Body.Close()
		return nil
	})

	// An admin token (system:masters): the test's client, the kubelet, the
	// scheduler and the controller managers share it.
	var tb [16]byte
	rand.Read(tb[:])
	token := hex.EncodeToString(tb[:])
	tokens := filepath.Join(dir, "tokens.csv")
	writeFile(t, tokens, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	saKey := filepath.Join(dir, "sa.key")
	writeFile(t, saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	port := freePort(t)
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	apiserver := startDaemon(t, "kube-apiserver", logf("kube-apiserver"), dir, nil, kube, "kube-apiserver",
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", fmt.Sprint(port),
		"--cert-dir", filepath.Join(dir, "apiserver-pki"), "--token-auth-file", tokens, "--authorization-mode", authz,
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", saKey, "--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", "10.0.0.0/24", "--endpoint-reconciler-type", "none",
		// No service-account controllers run, so no pod could be admitted with one.
		"--disable-admission-plugins", "ServiceAccount", "--enable-priority-and-fairness=false",
		// As a real cluster's: the chart's node pods are privileged (kubernetes_chart_test.go).
		"--allow-privileged=true")
	cp.kubeconfig = filepath.Join(dir, "kubeconfig")
	writeFile(t, cp.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: e2e, context: {cluster: e2e, user: admin}}]
current-context: e2e
`, server, token)), 0o600)
	cp.client, err = kubernetes.NewForConfig(&rest.Config{Host: server, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	apiserver.waitFor(t, 3*time.Minute, func() error {
		// Ready: /readyz, and the default namespace created.
		body, err := cp.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		if err != nil {
			return fmt.Errorf("%v %s", err, body)
		}
		_, err = cp.client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		return err
	})
	startDaemon(t, "kube-scheduler", logf("kube-scheduler"), dir, nil, kube, "kube-scheduler",
		"--kubeconfig", cp.kubeconfig, "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(freePort(t)),
		"--authentication-kubeconfig", cp.kubeconfig, "--authorization-kubeconfig", cp.kubeconfig)
	startDaemon(t, "kube-controller-manager", logf("kube-controller-manager"), dir, nil, kube, "kube-controller-manager",
		"--kubeconfig", cp.kubeconfig, "--leader-elect=false", "--controllers", "resourceclaim-controller",
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(freePort(t)),
		"--authentication-kubeconfig", cp.kubeconfig, "--authorization-kubeconfig", cp.kubeconfig)
	return cp
}

func (cp *controlPlane) dumpLogs(t *testing.T) {
	for _, l := range cp.logs {
		b, _ := os.ReadFile(l)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("%s (tail):\n%s", l, b)
	}
}

// waitUntil polls ok every second until it returns nil, or fails the test
// after limit with ok's last error and the logs.
func waitUntil(t *testing.T, k *kube, cp *controlPlane, limit time.Duration, what string, ok func() error) {
	t.Helper()
	if err := pollAt(limit, time.Second, ok); err != nil {
		cp.dumpLogs(t)
		k.dumpLogs(t)
		t.Fatalf("%s: %v", what, err)
	}
}

// draPod is a pod whose one container uses a claim made from template.
func draPod(name, template, command string) *corev1.Pod {
	claim := "gpu"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"test": "dra"}},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			// The node has no CNI (host network only): tolerate its not-ready taints.
			Tolerations:    []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: claim, ResourceClaimTemplateName: &template}},
			Containers: []corev1.Container{{
				Name: "main", Image: k8sImage, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"/bin/sh", "-c", command},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claim}}},
			}},
		},
	}
}

// draEnv is what the scheduler barriers (kubernetes_scheduler_test.go) and
// the DRA placement helpers need of a cluster: its control plane and the
// kubelet of its node.
type draEnv struct {
	k        *kube
	cp       *controlPlane
	barriers int // waitSchedulerSlices' count, naming each barrier
}

// draEnv is the chart cluster's.
func (cc *chartCluster) draEnv() *draEnv { return &draEnv{k: cc.k, cp: cc.cp} }

// driverSlice waits for the ResourceSlice the DRA driver publishes for
// node, and returns it.
func (de *draEnv) driverSlice(t *testing.T, node string) resourceapi.ResourceSlice {
	t.Helper()
	var slice resourceapi.ResourceSlice
	waitUntil(t, de.k, de.cp, 2*time.Minute, "ResourceSlice of vgpu.io", func() error {
		l, err := de.cp.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range l.Items {
			if s.Spec.Driver == "vgpu.io" && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
				slice = s
				return nil
			}
		}
		return fmt.Errorf("%d slices, none of vgpu.io on %s", len(l.Items), node)
	})
	return slice
}

// TestKubernetesDRA runs the DRA driver's scenarios through what the chart
// deployed: helm install of this tree's chart and image with the DRA
// driver on, its DeviceClasses (vgpu.io, vgpu.io-share), the node pod's
// installed vgpu-node --dra, over one simulated 80 GiB GPU. Its own
// cluster, not TestKubernetesChartDRA's: that one installs the previous
// release and ends in an uninstall whose byte-for-byte checks want a node
// that only the install touched, and these scenarios fill the GPU (11
// claims); a cluster of its own (its start, image and install: about half
// a minute on two cores) keeps either test readable and its failure its
// own. The bypass Event is
// TestKubernetesChartDRA's, through the same chart.
func TestKubernetesDRA(t *testing.T) {
	cc := startChartCluster(t, "k8s-dra", draNode, []simroot.Device{{MemoryBytes: 80 << 30}})
	cc.installChart(t, "dra")
	de := cc.draEnv()
	k, cp := cc.k, cc.cp
	ctx := context.Background()
	c := cp.client
	slice := de.driverSlice(t, draNode)
	d := slice.Spec.Devices
	if len(d) != 1 {
		t.Fatalf("ResourceSlice devices %+v: want one, gpu-0", d)
	}
	mem, cores := d[0].Capacity["memory"].Value, d[0].Capacity["cores"].Value
	if d[0].Name != "gpu-0" || mem.Value() != 80<<30 || cores.Value() != 100 {
		t.Fatalf("ResourceSlice devices %+v: want gpu-0 with memory 80Gi and cores 100", d)
	}

	// The chart's DeviceClass vgpu.io and the template of {memory: 8Gi,
	// cores: 30} of configs/k8s (the chart installs no claim template).
	class, err := c.ResourceV1().DeviceClasses().Get(ctx, "vgpu.io", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's DeviceClass vgpu.io: %v", err)
	}
	var template resourceapi.ResourceClaimTemplate
	readManifest(t, "dra-claimtemplate.yaml", &template)
	if _, err := c.ResourceV1().ResourceClaimTemplates("default").Create(ctx, &template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// 11 pods of 8Gi and 30 cores on one 80 GiB GPU: memory would take 10,
	// cores take 3 (3 x 30 <= 100 < 4 x 30).
	for i := 0; i < 11; i++ {
		if _, err := c.CoreV1().Pods("default").Create(ctx, draPod(fmt.Sprintf("gpu-%02d", i), template.Name, gpuPrograms+"; exec sleep 3600"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// pods returns the running pods and the pending ones the scheduler
	// found no room for (its reason and message).
	pods := func() (running []string, unschedulable map[string]string, err error) {
		l, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "test=dra"})
		if err != nil {
			return nil, nil, err
		}
		unschedulable = map[string]string{}
		for _, p := range l.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, p.Name)
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					unschedulable[p.Name] = cond.Message
				}
			}
		}
		sort.Strings(running)
		return running, unschedulable, nil
	}
	var running []string
	var pending map[string]string
	waitUntil(t, k, cp, 6*time.Minute, "3 pods running and 8 unschedulable", func() error {
		var err error
		if running, pending, err = pods(); err != nil {
			return err
		}
		if len(running) != 3 || len(pending) != 8 {
			return fmt.Errorf("running %v, unschedulable %d", running, len(pending))
		}
		return nil
	})
	for name, msg := range pending {
		if !strings.Contains(msg, "cannot allocate all claims") {
			t.Errorf("pod %s is unschedulable for another reason: %s", name, msg)
		}
	}
	t.Logf("running %v; the scheduler says of the others: %s", running, pending[firstKey(pending)])
	// No fourth pod gets the GPU later either: once the scheduler has seen
	// every slice the driver has published, it retries each pending pod
	// (a node added), and each comes back unschedulable again, its message
	// written by that retry.
	de.waitSchedulerSlices(t)
	retried := de.retryUnschedulable(t, "vgpu-e2e-retry")
	var bound []string
	var after map[string]string
	waitUntil(t, k, cp, 3*time.Minute, "each pending pod retried: bound, or \""+retried+"\"", func() error {
		l, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "test=dra"})
		if err != nil {
			return err
		}
		bound, after = nil, map[string]string{}
		for _, p := range l.Items {
			if p.Spec.NodeName != "" {
				bound = append(bound, p.Name)
				continue
			}
			msg := ""
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					msg = cond.Message
				}
			}
			if !strings.HasPrefix(msg, retried) {
				return fmt.Errorf("pod %s not retried yet: %q", p.Name, msg)
			}
			after[p.Name] = msg
		}
		return nil
	})
	t.Logf("after the retry the scheduler says: %s", after[firstKey(after)])
	for name, msg := range after {
		if !strings.Contains(msg, "cannot allocate all claims") {
			t.Errorf("pod %s is unschedulable after the retry for another reason: %s", name, msg)
		}
	}
	if len(bound) != 3 {
		t.Fatalf("pods bound to the node: %v, want 3 (cores: 3 x 30 of 100)", bound)
	}
	if err := c.CoreV1().Nodes().Delete(ctx, "vgpu-e2e-retry", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// What a running pod sees: its claim's quota, and a CUDA client that
	// stops at 8 GiB.
	out := k.podOutput(t, running[0])
	r := parseReport(t, out)
	checkLimited(t, r, "8589934592")
	if !strings.Contains(r.Quota, "memory=8589934592 memory-request=8589934592 compute=30") {
		t.Errorf("quota lacks memory=8589934592 memory-request=8589934592 compute=30:\n%s", r.Quota)
	}
	checkGPUPrograms(t, out, 8<<30)

	// vgpu node restarts as the chart runs it: the node pod deleted, the
	// DaemonSet starts another. The running pods keep their claims (the
	// files are the record), and the new daemon unprepares the one deleted
	// next.
	before := cc.nodePod(t, "dra").Name
	k.kubeletLogFrom = fileSize(k.kubelet.log)
	if err := c.CoreV1().Pods(chartNS).Delete(ctx, before, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	node := cc.nodePodReplaced(t, "dra", before)
	cc.waitNodeRegistered(t, "dra")
	if specs, _ := filepath.Glob(filepath.Join(k.cdiDir, "vgpu.io-claim-*.json")); len(specs) != 3 {
		t.Errorf("CDI specs after the daemon's restart: %v, want the 3 running pods'", specs)
	}

	// Deleting a running pod frees its 30 cores: a pending pod starts.
	victim := running[0]
	if err := c.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, k, cp, 6*time.Minute, "a pending pod running in the deleted one's place", func() error {
		now, _, err := pods()
		if err != nil {
			return err
		}
		started := ""
		for _, n := range now {
			if _, was := pending[n]; was {
				started = n
			}
		}
		if started == "" || len(now) != 3 {
			return fmt.Errorf("running %v", now)
		}
		return nil
	})
	// The deleted pod's claim was unprepared, by the restarted daemon: its CDI spec is gone.
	waitUntil(t, k, cp, 2*time.Minute, "the deleted pod's claim unprepared", func() error {
		specs, _ := filepath.Glob(filepath.Join(k.cdiDir, "vgpu.io-claim-*.json"))
		if len(specs) != 3 || !strings.Contains(cc.nodePodLog(node.Name), "claim unprepared") {
			return fmt.Errorf("CDI specs %v, want 3 (one per running pod), and the log of the new node pod %s with the unprepare", specs, node.Name)
		}
		return nil
	})
	// Every pod deleted: every claim unprepared.
	if err := c.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "test=dra"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, k, cp, 3*time.Minute, "every claim unprepared", func() error {
		specs, _ := filepath.Glob(filepath.Join(k.cdiDir, "vgpu.io-claim-*.json"))
		if len(specs) != 0 {
			return fmt.Errorf("CDI specs left: %v", specs)
		}
		return nil
	})

	// One claim, two containers: one budget. "holder" takes 6 GiB of the
	// claim's 8; "main" waits until its NVML shows that much used, then
	// fills: it gets what is left of the 8 GiB, not 8 GiB of its own.
	shared := draPod("shared", template.Name, "until [ \"$(nvml-info | grep -o 'nvml_used0=[0-9]*' | grep -o '[0-9]*$')\" -ge 6442450944 ] 2>/dev/null; do sleep 1; done; "+
		"/bin/probe; cuda-fill fill alloc 256; exec sleep 3600")
	holder := shared.Spec.Containers[0]
	holder.Name, holder.Command = "holder", []string{"/bin/sh", "-c", "sleep 3600 | cuda-fill hold 6144"}
	shared.Spec.Containers = append(shared.Spec.Containers, holder)
	if _, err := c.CoreV1().Pods("default").Create(ctx, shared, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out = k.podOutput(t, "shared")
	r = parseReport(t, out)
	checkLimited(t, r, "8589934592")
	kv := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if key, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			kv[key] = v
		}
	}
	var first uint64
	if _, err := fmt.Sscan(kv["first_bytes"], &first); err != nil {
		t.Errorf("first_bytes %q: %v", kv["first_bytes"], err)
	}
	t.Logf("the second container of one 8 GiB claim got %d bytes beside the first's 6 GiB", first)
	// Alone it would get 8 GiB less its context; beside the holder's 6 GiB
	// (and its context) at most 2 GiB less its own.
	if kv["before_total"] != "8589934592" || first == 0 || first > 2<<30 {
		t.Errorf("second container of one claim: total %s, got %d bytes before out-of-memory; want the claim's 8 GiB total and at most 2 GiB beside the first's 6\n%s", kv["before_total"], first, out)
	}
	if err := c.CoreV1().Pods("default").Delete(ctx, "shared", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The extended-resource form, through the chart's DeviceClass
	// vgpu.io-share: vgpu.io/share: 1 is one allocation of the request
	// policies' defaults, 1Gi and 10 cores.
	if _, err := c.ResourceV1().DeviceClasses().Get(ctx, "vgpu.io-share", metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's DeviceClass vgpu.io-share: %v", err)
	}
	share := draPod("share", "", gpuPrograms+"; exec sleep 3600")
	share.Spec.ResourceClaims = nil
	share.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{"vgpu.io/share": apiresource.MustParse("1")}}
	// The scheduler must see the class first (its informer).
	waitUntil(t, k, cp, 2*time.Minute, "a pod with vgpu.io/share: 1 running", func() error {
		if _, err := c.CoreV1().Pods("default").Get(ctx, share.Name, metav1.GetOptions{}); err != nil {
			if _, err := c.CoreV1().Pods("default").Create(ctx, share, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		p, err := c.CoreV1().Pods("default").Get(ctx, share.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod share: %s %+v", p.Status.Phase, p.Status.Conditions)
		}
		return nil
	})
	out = k.podOutput(t, "share")
	r = parseReport(t, out)
	checkLimited(t, r, "1073741824")
	if !strings.Contains(r.Quota, "memory=1073741824 memory-request=1073741824 compute=10") {
		t.Errorf("vgpu.io/share: 1: quota lacks memory=1073741824 memory-request=1073741824 compute=10:\n%s", r.Quota)
	}

	// The limit is the DeviceClass's, never the claim's: a class (the
	// chart's vgpu.io with a config) whose config says coresLimit none gives its claims limit 100 beside their
	// 30-core request; a claim that gives vgpu.io parameters itself is not
	// prepared, and the kubelet's event says why.
	params := runtime.RawExtension{Raw: []byte(`{"apiVersion": "vgpu.io/v1", "kind": "ClassConfig", "coresLimit": "none"}`)}
	opaque := resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "vgpu.io", Parameters: params}}
	burstClass := class.DeepCopy()
	burstClass.ObjectMeta = metav1.ObjectMeta{Name: "vgpu.io-burst"}
	burstClass.Spec.Config = []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: opaque}}
	if _, err := c.ResourceV1().DeviceClasses().Create(ctx, burstClass, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	burstT := template.DeepCopy()
	burstT.ObjectMeta = metav1.ObjectMeta{Name: "vgpu-burst", Namespace: "default"}
	burstT.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = burstClass.Name
	selfT := template.DeepCopy()
	selfT.ObjectMeta = metav1.ObjectMeta{Name: "vgpu-self", Namespace: "default"}
	selfT.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: opaque}}
	for _, tm := range []*resourceapi.ResourceClaimTemplate{burstT, selfT} {
		if _, err := c.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	burst := draPod("burst", burstT.Name, gpuPrograms+"; exec sleep 3600")
	waitUntil(t, k, cp, 2*time.Minute, "a pod of class vgpu.io-burst running", func() error {
		if _, err := c.CoreV1().Pods("default").Get(ctx, burst.Name, metav1.GetOptions{}); err != nil {
			if _, err := c.CoreV1().Pods("default").Create(ctx, burst, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		p, err := c.CoreV1().Pods("default").Get(ctx, burst.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod burst: %s %+v", p.Status.Phase, p.Status.Conditions)
		}
		return nil
	})
	r = parseReport(t, k.podOutput(t, "burst"))
	if !strings.Contains(r.Quota, "memory=8589934592 memory-request=8589934592 compute-request=30 ") || strings.Contains(r.Quota, "compute=") {
		t.Errorf("class with coresLimit none: quota lacks memory=8589934592 memory-request=8589934592 compute-request=30 (limit 100):\n%s", r.Quota)
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, draPod("self", selfT.Name, "exec sleep 3600"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, k, cp, 3*time.Minute, "the pod whose claim sets its own limit refused", func() error {
		ev, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=self"})
		if err != nil {
			return err
		}
		var msgs []string
		for _, e := range ev.Items {
			if strings.Contains(e.Message, "never by a claim") {
				return nil
			}
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
		return fmt.Errorf("events of pod self: %v", msgs)
	})
	if p, err := c.CoreV1().Pods("default").Get(ctx, "self", metav1.GetOptions{}); err != nil || p.Status.Phase == corev1.PodRunning {
		t.Errorf("pod self: %v, running: its claim sets its own limit", err)
	}

	// Delete them before the daemons stop, so that the kubelet unprepares them.
	for _, n := range []string{"share", "burst", "self"} {
		if err := c.CoreV1().Pods("default").Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting pod %s: %v", n, err)
		}
	}
}

// draBypassEvent runs a memory bypass in a pod (the real driver opened by
// its path, 12 GiB under the claim's 8): vgpu node on node kills it and
// posts a Kubernetes Event on the pod, which `kubectl describe pod` shows.
func draBypassEvent(t *testing.T, k *kube, cp *controlPlane, e *env, template, node string) {
	f := shared(t)
	ctx := context.Background()
	c := cp.client
	need(t, "gcc")
	addAttacker(t, f)
	const attackImage = "localhost/vgpu-e2e/attack:1"
	tar := filepath.Join(e.dir, "attack.tar")
	writeDockerArchive(t, f.rootfs, tar, attackImage)
	if out, err := k.ctr(t, "images", "import", "--snapshotter", "native", tar); err != nil {
		t.Fatalf("ctr import %s: %v\n%s", tar, err, out)
	}
	bypass := draPod("bypass", template, "sleep 3600 | vgpu-attack driver 12288")
	bypass.Spec.Containers[0].Image = attackImage
	if _, err := c.CoreV1().Pods("default").Create(ctx, bypass, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Clean-up: vgpu node's kill may have ended the pod; the control
		// plane's stop removes what is left.
		_ = c.CoreV1().Pods("default").Delete(ctx, "bypass", metav1.DeleteOptions{})
	}()
	var ev corev1.Event
	waitUntil(t, k, cp, 4*time.Minute, "an Event of vgpu node's kill on pod bypass", func() error {
		l, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=bypass"})
		if err != nil {
			return err
		}
		var seen []string
		for _, x := range l.Items {
			if x.Source.Component == "vgpu-node" && x.Reason == "VGPUKilled" {
				ev = x
				return nil
			}
			seen = append(seen, x.Reason+": "+x.Message)
		}
		return fmt.Errorf("events of pod bypass: %q", seen)
	})
	t.Logf("Event on pod bypass: %s %s: %s", ev.Type, ev.Reason, ev.Message)
	if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Pod" || ev.Source.Host != node ||
		!strings.Contains(ev.Message, "claim bypass-gpu-") || !strings.Contains(ev.Message, "vgpu node killed pid") || !strings.Contains(ev.Message, "> limit 8.00 GiB") {
		t.Errorf("Event %+v: want a Warning on the pod from vgpu-node on %s naming the claim, the pid and the 8 GiB limit", ev, node)
	}
}

// readManifest decodes configs/k8s/name into obj, refusing unknown fields.
func readManifest(t *testing.T, name string, obj any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", "k8s", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("configs/k8s/%s: %v", name, err)
	}
}

func firstKey(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}
