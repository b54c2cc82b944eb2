package kevents

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/state"
)

func pod(ns, name, node, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: node}}
}

// container lays out a state directory entry whose bundle's spec carries ann.
func container(t *testing.T, stateDir, id string, ann map[string]string) {
	bundle := filepath.Join(t.TempDir(), "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "annotations": ann})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(stateDir, id), 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(map[string]any{"version": state.InfoVersion, "id": id, "bundle": bundle})
	if err := os.WriteFile(filepath.Join(stateDir, id, config.StateInfo), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Each enforcement lands as an Event on its container's pod: found by the
// kubelet's name (pods.json) or by the spec's CRI annotations; a container
// that names a pod of another node, or another pod's UID, gets none, nor
// does one outside Kubernetes.
func TestEventsOnPods(t *testing.T) {
	dir := t.TempDir()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gpu-claim", UID: "cu1"},
		Status: resourceapi.ResourceClaimStatus{ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "claim-pod", UID: "uid-5"}}}}
	client := fake.NewClientset(pod("default", "dra-pod", "n1", "uid-1"), pod("ml", "train-0", "n1", "uid-2"),
		pod("default", "elsewhere", "n2", "uid-3"), pod("default", "victim", "n1", "uid-4"), pod("default", "claim-pod", "n1", "uid-5"), claim)
	// a DRA claim's state directory (its record names the claim), and one
	// whose UID is not the claim's
	for _, id := range []string{"claim-cu1", "claim-other"} {
		if err := os.MkdirAll(filepath.Join(dir, id), 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"version": state.InfoVersion, "id": id, "name": "default/gpu-claim"})
		if err := os.WriteFile(filepath.Join(dir, id, config.StateInfo), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	container(t, dir, "c-dra", map[string]string{annNamespace: "default", annPod: "dra-pod", annUID: "uid-1", annContainer: "main"})
	container(t, dir, "c-other-node", map[string]string{annNamespace: "default", annPod: "elsewhere"})
	container(t, dir, "c-forged-uid", map[string]string{annNamespace: "default", annPod: "victim", annUID: "uid-1"})
	container(t, dir, "c-plain", nil)
	if err := events.WritePods(dir, map[string]events.Pod{"c-dp": {Namespace: "ml", Name: "train-0", Container: "trainer"}}); err != nil {
		t.Fatal(err)
	}
	p := New(Options{Client: client, StateDir: dir, NodeName: "n1"})
	for _, id := range []string{"c-dra", "c-other-node", "c-forged-uid", "c-plain", "claim-cu1", "claim-other"} {
		p.Notify(events.Event{Kind: "kill", Container: id, PID: 4321, Reason: "memory", Used: 10 << 30, Limit: 8 << 30})
	}
	p.Notify(events.Event{Kind: "freeze", Container: "c-dp", Reason: "compute", Used: 97, Limit: 30, Device: 0})
	defer p.Stop()

	want := map[string]string{
		"default/dra-pod":   "Warning VGPUKilled container main: vgpu node killed pid 4321: device memory 10.00 GiB on GPU 0 > limit 8.00 GiB",
		"default/claim-pod": "Warning VGPUKilled claim gpu-claim: vgpu node killed pid 4321: device memory 10.00 GiB on GPU 0 > limit 8.00 GiB",
		"ml/train-0":        "Warning VGPUThrottled container trainer: vgpu node throttles the container (cgroup freezer): compute share 97% on GPU 0 > limit 30%",
	}
	got := map[string]string{}
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		l, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]string{}
		for _, e := range l.Items {
			o := e.InvolvedObject
			got[o.Namespace+"/"+o.Name] = e.Type + " " + e.Reason + " " + e.Message
			if o.Kind != "Pod" || e.Source.Component != Component || e.Source.Host != "n1" {
				t.Errorf("event %+v", e)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // an Event that should not come would have come with the others
	if l, _ := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{}); len(l.Items) != len(want) {
		t.Errorf("%d Events, want %d", len(l.Items), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("event on %s: %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("an Event on %s: %s", k, got[k])
		}
	}
}

func TestReasons(t *testing.T) {
	for kind, want := range map[string]string{"kill": ReasonKilled, "kill-container": ReasonKilled, "freeze": ReasonThrottled, "escalate": ReasonEscalated, "reclaim": ReasonReclaimed, "thaw": ReasonThawed, "suspend": ReasonSuspended, "restore": ReasonRestored, "odd": "VGPUOdd"} {
		if got := Reason(events.Event{Kind: kind}); got != want {
			t.Errorf("%s: %s, want %s", kind, got, want)
		}
	}
	if m := Message(events.Event{Kind: "escalate", Used: 90, Limit: 25, Device: 1, Detail: "throttled for 10s"}); !strings.Contains(m, "90% on GPU 1 (limit 25%): throttled for 10s") {
		t.Errorf("escalate: %s", m)
	}
	for _, c := range []struct {
		e    events.Event
		want string
	}{
		{events.Event{Kind: "suspend", PID: 7, Used: 6 << 30, Device: 0, Detail: "b borrows"}, "vgpu node suspended pid 7 to host memory (6.00 GiB of GPU 0) to take borrowed memory back; it is restored when it fits again: b borrows"},
		{events.Event{Kind: "restore", PID: 7, Used: 6 << 30, Device: 0}, "vgpu node restored pid 7 (6.00 GiB) to GPU 0"},
		{events.Event{Kind: "kill", Reason: "borrow", PID: 7, Device: 0, Detail: "killed, not suspended: x"}, "vgpu node killed pid 7 to take borrowed memory back on GPU 0: killed, not suspended: x"},
	} {
		if m := Message(c.e); m != c.want {
			t.Errorf("%s: %q, want %q", c.e.Kind, m, c.want)
		}
	}
}

// No API client: no Poster and no error; a kubeconfig that cannot be read:
// an error naming the flag.
func TestStart(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if p, err := Start(Config{Serving: true, StateDir: t.TempDir()}); p != nil || err != nil {
		t.Errorf("outside a pod, no --kubeconfig: %v %v", p, err)
	}
	bad := filepath.Join(t.TempDir(), "missing.kubeconfig")
	if _, err := Start(Config{Kubeconfig: bad}); err == nil || !strings.Contains(err.Error(), "--kubeconfig") || !strings.Contains(err.Error(), bad) {
		t.Errorf("missing kubeconfig: %v", err)
	}
}

// A tenant killed in a loop cannot flood the API server: the broadcaster's
// correlator (the kubelet's own settings) lets a burst of 25 writes per
// pod through and aggregates or drops the rest.
func TestEventsRateLimited(t *testing.T) {
	dir := t.TempDir()
	client := fake.NewClientset(pod("default", "loop", "n1", "uid-1"))
	container(t, dir, "c1", map[string]string{annNamespace: "default", annPod: "loop", annUID: "uid-1", annContainer: "main"})
	p := New(Options{Client: client, StateDir: dir, NodeName: "n1"})
	defer p.Stop()
	for i := 0; i < 200; i++ {
		p.Notify(events.Event{Kind: "kill", Container: "c1", PID: 1000 + i, Reason: "memory", Used: 10 << 30, Limit: 8 << 30})
	}
	writes := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetResource().Resource == "events" && (a.GetVerb() == "create" || a.GetVerb() == "patch" || a.GetVerb() == "update") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for writes() < 25 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	n := writes()
	t.Logf("%d Event writes for 200 kills", n)
	if n < 25 || n > 26 {
		t.Errorf("%d writes of Events for 200 kills of one pod, want the burst of 25", n)
	}
}
