//go:build e2e && k8s

// Multi-GPU nodes under the real kubelet, vgpu installed by the chart: the
// device plugin keeps each container's memory and cores on one GPU, and it
// and the DRA driver place by the chart's config.placement (binpack,
// spread).
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// placementPods is a fixed sequence of 20 pods of mixed sizes (vgpu.io/memory
// in GiB, vgpu.io/cores in percent) that fits two 16 GiB GPUs: 27 GiB and
// 180 cores in all. The same as internal/deviceplugin's placementSequence,
// which runs it through the kubelet's calls with either resource first.
var placementPods = [][2]int{
	{4, 25}, {1, 5}, {2, 15}, {1, 10}, {2, 10}, {1, 20}, {2, 5}, {1, 10}, {2, 15}, {1, 5},
	{1, 10}, {1, 5}, {1, 10}, {2, 5}, {1, 5}, {1, 5}, {1, 5}, {1, 10}, {1, 5}, {1, 5},
}

// holdPod makes a pod, through the API server on k's node, that prints its
// quota and keeps its units.
func (k *kube) holdPod(t *testing.T, name string, mem, cores int) {
	t.Helper()
	p := k.newPod(name, map[string]string{"vgpu.io/memory": strconv.Itoa(mem), "vgpu.io/cores": strconv.Itoa(cores)}, nil,
		"cat /run/vgpu/quota; exec sleep 3600")
	p.Spec.Containers[0].Env = nil
	if _, err := k.client.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// quotaLine returns the pod's "device 0 …" quota line once its log has it.
func (k *kube) quotaLine(name string) string {
	logs, _ := filepath.Glob(filepath.Join(k.logs, "default_"+name+"_*", "main", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.SplitN(line, " ", 4); len(f) == 4 && strings.HasPrefix(f[3], "device 0 ") {
				return f[3]
			}
		}
	}
	return ""
}

var quotaRE = regexp.MustCompile(`^device 0 (GPU-\S+) memory=(\d+) (?:memory-request=\d+ )?compute=(\d+)`)

const placementNode = "vgpu-e2e-placement"

// TestKubernetesDevicePluginPlacement sends placementPods through the
// chart's device plugin on a node of four 16 GiB GPUs: installed with
// config.placement binpack, then helm upgrade to spread (the configuration
// changes, the node pod rolls). One cluster for both policies: the
// sequence needs two GPUs' room, four show spread; binpack must still
// fill GPU 0 first with three empty ones beside it.
func TestKubernetesDevicePluginPlacement(t *testing.T) {
	const gpus = 4
	devs := make([]simroot.Device, gpus)
	for i := range devs {
		devs[i].MemoryBytes = 16 << 30
	}
	cc := startChartCluster(t, "k8s-placement", placementNode, devs)
	k := cc.k
	values := cc.installChart(t, "device-plugin", "config.placement=binpack")
	for _, policy := range []string{"binpack", "spread"} {
		if policy != "binpack" {
			cc.upgradeChart(t, "device-plugin", values, "config.placement="+policy)
		}
		cc.checkInstalledPlacement(t, policy)
		t.Run(policy, func(t *testing.T) { devicePluginPlacement(t, cc, gpus, policy) })
		// Room for the next policy's pods.
		if err := k.client.CoreV1().Pods("default").DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, k, cc.cp, 3*time.Minute, "every pod gone", func() error {
			l, err := k.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
			if err != nil || len(l.Items) != 0 {
				return fmt.Errorf("%v: %d pods", err, len(l.Items))
			}
			return nil
		})
	}
}

// devicePluginPlacement runs placementPods one at a time on cc's node of
// gpus GPUs, whose device plugin places by policy, and checks where they
// went.
func devicePluginPlacement(t *testing.T, cc *chartCluster, gpus int, policy string) {
	k := cc.k
	// The grants of the node pod that serves the plugin now (the one the
	// last install or upgrade started).
	node := cc.nodePod(t, "device-plugin").Name
	grants := func() int { return strings.Count(cc.nodePodLog(node), "msg=granted") }
	base := grants()
	// One pod at a time through admission (both its grants written), so
	// that each is placed knowing the ones before.
	for i, p := range placementPods {
		k.holdPod(t, fmt.Sprintf("%s-%02d", policy, i), p[0], p[1])
		if err := pollAt(podWaitLimit, 200*time.Millisecond, func() error {
			n := grants() - base
			return holds(n >= 2*(i+1), "%d grants, want %d", n, 2*(i+1))
		}); err != nil {
			k.dumpLogs(t)
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	// Every pod runs (vgpu-runtime refuses a container whose memory and
	// cores are on two GPUs) with its limits on one GPU.
	index := map[string]int{}
	for g := 0; g < gpus; g++ {
		index[simroot.DefaultUUID(g)] = g
	}
	at := make([]int, len(placementPods))
	deadline := time.Now().Add(podWaitLimit)
	for i, p := range placementPods {
		name := fmt.Sprintf("%s-%02d", policy, i)
		// one limit for all the pods: what is left of it for each; a pod
		// that never shows fails on its line below
		var line string
		_ = pollAt(time.Until(deadline), time.Second, func() error {
			line = k.quotaLine(name)
			return holds(line != "", "no quota line")
		})
		m := quotaRE.FindStringSubmatch(line)
		if m == nil {
			b, _ := os.ReadFile(k.kubelet.log)
			var refused []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, name) && strings.Contains(l, "units are on GPU") {
					refused = append(refused, l)
				}
			}
			k.dumpLogs(t)
			t.Fatalf("pod %s (%d GiB, %d cores) did not run with a quota (%q); the kubelet on it: %v", name, p[0], p[1], line, refused)
		}
		g, ok := index[m[1]]
		if !ok || m[2] != strconv.Itoa(p[0]<<30) || m[3] != strconv.Itoa(p[1]) {
			t.Fatalf("pod %s: quota %q, want memory=%d compute=%d on one of this node's GPUs", name, line, p[0]<<30, p[1])
		}
		at[i] = g
	}
	// Replayed in admission order: the policy's promise for each pod.
	load := make([]placeLoad, gpus)
	for i, p := range placementPods {
		g := at[i]
		for j, l := range load {
			if j == g || l.mem+p[0] > 16 || l.cores+p[1] > 100 {
				continue // no room for this pod
			}
			if policy == "binpack" && load[g].pods == 0 && l.pods > 0 {
				t.Errorf("binpack: pod %d (%d GiB, %d cores) opened empty GPU %d while GPU %d (%+v) had room", i, p[0], p[1], g, j, l)
			}
			if policy == "spread" && load[g].pods > 0 && l.pods == 0 {
				t.Errorf("spread: pod %d (%d GiB, %d cores) went to used GPU %d (%+v) while GPU %d was empty", i, p[0], p[1], g, load[g], j)
			}
		}
		load[g].mem += p[0]
		load[g].cores += p[1]
		load[g].pods++
	}
	t.Logf("%s on %d GPUs: pods on GPUs %v; per GPU %+v", policy, gpus, at, load)
	used := 0
	for _, l := range load {
		if l.pods > 0 {
			used++
		}
	}
	switch policy {
	case "binpack":
		if load[0].mem < 14 {
			t.Errorf("binpack: GPU 0 holds %d GiB, %d cores: it was not filled first", load[0].mem, load[0].cores)
		}
	case "spread":
		if used != gpus {
			t.Errorf("spread: %d of %d GPUs used", used, gpus)
		}
	}
}

type placeLoad struct{ mem, cores, pods int }

// claimTemplate is a ResourceClaimTemplate of one vgpu.io request; selector,
// if set, is a CEL expression the GPU must meet.
func claimTemplate(name, memory, cores, selector string) *resourceapi.ResourceClaimTemplate {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "vgpu.io",
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]apiresource.Quantity{
			"memory": apiresource.MustParse(memory), "cores": apiresource.MustParse(cores)}},
	}}
	if selector != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}}}
}

// podGPUs waits until pod runs and returns the device of each of its claims, by claim name in the pod.
func (de *draEnv) podGPUs(t *testing.T, name string) map[string]string {
	t.Helper()
	ctx := context.Background()
	c := de.cp.client
	out := map[string]string{}
	waitUntil(t, de.k, de.cp, 3*time.Minute, "pod "+name+" running", func() error {
		p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%s %+v", p.Status.Phase, p.Status.Conditions)
		}
		for _, s := range p.Status.ResourceClaimStatuses {
			rc, err := c.ResourceV1().ResourceClaims("default").Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if rc.Status.Allocation == nil || len(rc.Status.Allocation.Devices.Results) != 1 {
				return fmt.Errorf("claim %s: allocation %+v", rc.Name, rc.Status.Allocation)
			}
			out[s.Name] = rc.Status.Allocation.Devices.Results[0].Device
		}
		return nil
	})
	return out
}

// sliceOrder is the order of the devices in the node's vgpu.io ResourceSlice.
func (de *draEnv) sliceOrder(t *testing.T) string {
	l, err := de.cp.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Items {
		if s.Spec.Driver == "vgpu.io" {
			var n []string
			for _, d := range s.Spec.Devices {
				n = append(n, d.Name)
			}
			return strings.Join(n, ",")
		}
	}
	return ""
}

// waitOrder waits until the driver has published the GPUs in order.
func (de *draEnv) waitOrder(t *testing.T, order string) {
	t.Helper()
	waitUntil(t, de.k, de.cp, time.Minute, "ResourceSlice order "+order, func() error {
		if got := de.sliceOrder(t); got != order {
			return fmt.Errorf("order %s", got)
		}
		return nil
	})
	// The scheduler learns of the slice through its own watch.
	de.waitSchedulerSlices(t)
}

// TestKubernetesDRAPlacement: on a node of two 16 GiB GPUs the chart's DRA
// driver lists the GPUs in the ResourceSlice fullest first (binpack) or
// emptiest first (spread, after helm upgrade with config.placement spread,
// which rolls the node pod), and the scheduler, first fit, places claims
// so; a pod with two claims too large to share a GPU runs with both, each
// container with its claim's limits on its own GPU.
func TestKubernetesDRAPlacement(t *testing.T) {
	cc := startChartCluster(t, "k8s-dra-placement", placementNode, []simroot.Device{{MemoryBytes: 16 << 30}, {MemoryBytes: 16 << 30}})
	values := cc.installChart(t, "dra", "config.placement=binpack")
	de := cc.draEnv()
	de.driverSlice(t, placementNode)
	ctx := context.Background()
	c := de.cp.client
	for _, tpl := range []*resourceapi.ResourceClaimTemplate{
		claimTemplate("small", "2Gi", "20", ""),
		claimTemplate("small-on-1", "2Gi", "20", `device.attributes["vgpu.io"].index == 1`),
		claimTemplate("big", "10Gi", "60", ""),
	} {
		if _, err := c.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	hold := "cat /run/vgpu/quota; exec sleep 3600"
	run := func(name, template string) string {
		t.Helper()
		if _, err := c.CoreV1().Pods("default").Create(ctx, draPod(name, template, hold), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return de.podGPUs(t, name)["gpu"]
	}
	deleteAll := func() {
		t.Helper()
		if err := c.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "test=dra"}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, de.k, de.cp, 3*time.Minute, "every claim unprepared", func() error {
			specs, _ := filepath.Glob(filepath.Join(de.k.cdiDir, "vgpu.io-claim-*.json"))
			l, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			if err != nil || len(specs) != 0 || len(l.Items) != 0 {
				return fmt.Errorf("CDI specs left %v, pods %d (%v)", specs, len(l.Items), err)
			}
			return nil
		})
	}

	// Binpack: a claim pinned to gpu-1 makes it the fuller GPU; the next
	// claims, free to go anywhere, follow it there (NVML order would put
	// them on gpu-0).
	if got := run("anchor", "small-on-1"); got != "gpu-1" {
		t.Fatalf("claim pinned to index 1 on %s", got)
	}
	de.waitOrder(t, "gpu-1,gpu-0")
	for i := 0; i < 2; i++ {
		if got := run(fmt.Sprintf("pack-%d", i), "small"); got != "gpu-1" {
			t.Errorf("binpack: pod %d of 2 GiB, 20 cores beside a claim on gpu-1: on %s, want gpu-1", i, got)
		}
	}
	deleteAll()
	de.waitOrder(t, "gpu-0,gpu-1")

	// Spread: helm upgrade with config.placement spread; the new node pod's
	// driver puts each pod on the emptier GPU (NVML order on a tie).
	cc.upgradeChart(t, "dra", values, "config.placement=spread")
	cc.checkInstalledPlacement(t, "spread")
	for i, want := range []string{"gpu-0", "gpu-1", "gpu-0"} {
		order := map[string]string{"gpu-0": "gpu-0,gpu-1", "gpu-1": "gpu-1,gpu-0"}[want]
		de.waitOrder(t, order) // the driver published what the last prepare changed
		if got := run(fmt.Sprintf("spread-%d", i), "small"); got != want {
			t.Errorf("spread: pod %d on %s, want %s", i, got, want)
		}
	}

	// Two claims of 10 GiB and 60 cores: no GPU holds both (120 cores), so
	// they land on two GPUs; each container runs with its claim's limits.
	two := draPod("two-claims", "big", hold)
	big := "big"
	two.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "a", ResourceClaimTemplateName: &big}, {Name: "b", ResourceClaimTemplateName: &big}}
	second := two.Spec.Containers[0]
	two.Spec.Containers[0].Name = "a"
	two.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "a"}}
	second.Name = "b"
	second.Resources.Claims = []corev1.ResourceClaim{{Name: "b"}}
	two.Spec.Containers = append(two.Spec.Containers, second)
	if _, err := c.CoreV1().Pods("default").Create(ctx, two, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpus := de.podGPUs(t, "two-claims")
	if gpus["a"] == gpus["b"] || gpus["a"] == "" || gpus["b"] == "" {
		t.Fatalf("two claims of 60 cores: on %v, want two GPUs", gpus)
	}
	for _, ctr := range []string{"a", "b"} {
		idx := strings.TrimPrefix(gpus[ctr], "gpu-")
		want := fmt.Sprintf("device 0 %s memory=%d memory-request=%d compute=60", simroot.DefaultUUID(int(idx[0]-'0')), 10<<30, 10<<30)
		var line string
		waitUntil(t, de.k, de.cp, 2*time.Minute, "container "+ctr+" quota", func() error {
			logs, _ := filepath.Glob(filepath.Join(de.k.logs, "default_two-claims_*", ctr, "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				for _, ln := range strings.Split(string(b), "\n") {
					if f := strings.SplitN(ln, " ", 4); len(f) == 4 && strings.HasPrefix(f[3], "device 0 ") {
						line = f[3]
						return nil
					}
				}
			}
			return fmt.Errorf("no quota line in %v", logs)
		})
		if !strings.HasPrefix(line, want) {
			t.Errorf("container %s (claim on %s): quota %q, want %q", ctr, gpus[ctr], line, want)
		}
	}
	t.Logf("two claims on %v", gpus)
	deleteAll() // room for the next pod's two claims

	// One container naming two claims would get both GPUs and one claim's
	// quota: the driver refuses to prepare them, and the pod's event says why.
	both := draPod("both-in-one", "small", hold)
	small := "small"
	both.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "a", ResourceClaimTemplateName: &small}, {Name: "b", ResourceClaimTemplateName: &small}}
	both.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "a"}, {Name: "b"}}
	if _, err := c.CoreV1().Pods("default").Create(ctx, both, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, de.k, de.cp, 2*time.Minute, "the refusal of a container with two claims", func() error {
		ev, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=both-in-one"})
		if err != nil {
			return err
		}
		for _, e := range ev.Items {
			if strings.Contains(e.Message, `container "main" of pod default/both-in-one names 2 vgpu.io claims`) {
				t.Logf("event %s: %s", e.Reason, e.Message)
				return nil
			}
		}
		return fmt.Errorf("%d events, none with the refusal", len(ev.Items))
	})
	if p, err := c.CoreV1().Pods("default").Get(ctx, "both-in-one", metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if p.Status.Phase == corev1.PodRunning {
		t.Error("pod both-in-one runs; want it held before its containers start")
	}
	deleteAll()
}
