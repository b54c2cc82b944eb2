// Package kevents posts what vgpu node does to a container (kill, freeze,
// escalation, reclaim, end of a throttle) as a Kubernetes Event on the
// container's pod, where `kubectl describe pod` and `kubectl get events`
// show it beside the kubelet's own. client-go's event broadcaster does the
// posting: it aggregates similar events and rate-limits each object's as
// the kubelet's does (record.EventCorrelator: a burst of 25, then one per
// 5 minutes), so a tenant that is killed in a loop cannot flood the API
// server.
//
// Which pod: the one the kubelet named for a device-plugin container
// (<state_dir>/.node/pods.json, internal/node/podres); for a DRA claim's
// state directory (claim-<uid>), the pods the claim is reserved for; else
// the CRI annotations containerd put in the container's OCI spec. Either way the pod is read from the API server and used only
// if it runs on this node (and, where the spec names it, has the sandbox's
// UID): an annotation a non-Kubernetes container made up cannot aim an
// Event at somebody else's pod.
package kevents

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Component is the Events' source.
const Component = "vgpu-node"

// Event reasons, one per kind of action.
const (
	ReasonKilled    = "VGPUKilled"
	ReasonThrottled = "VGPUThrottled"
	ReasonThawed    = "VGPUThrottleEnded"
	ReasonEscalated = "VGPUEscalated"
	ReasonReclaimed = "VGPUReclaimed"
	ReasonSuspended = "VGPUSuspended"
	ReasonRestored  = "VGPURestored"
)

// CRI annotations containerd sets on every container of a pod.
const (
	annNamespace = "io.kubernetes.cri.sandbox-namespace"
	annPod       = "io.kubernetes.cri.sandbox-name"
	annUID       = "io.kubernetes.cri.sandbox-uid"
	annContainer = "io.kubernetes.cri.container-name"
)

// queueLen bounds the events waiting for their pod; more are dropped (and
// counted in the log): Notify must never hold up the enforcement loop.
const queueLen = 256

// maxSpec bounds the OCI spec read for its annotations.
const maxSpec = 4 << 20

// podTTL is how long a container's pod is taken as known.
const podTTL = time.Minute

// Options configure a Poster.
type Options struct {
	Client   kubernetes.Interface
	StateDir string
	// NodeName: this node; a pod bound elsewhere gets no Event ("": not checked).
	NodeName string
	Log      *slog.Logger
}

// Poster turns enforcement events into Kubernetes Events.
type Poster struct {
	o     Options
	bc    record.EventBroadcaster
	rec   record.EventRecorder
	queue chan events.Event
	done  chan struct{}
	mu    sync.Mutex
	pods  map[string]cached // container id -> its pod
	drops int
}

// target is a pod to post on, and what to call the container in it.
type target struct {
	pod *corev1.Pod
	who string // "container main", "claim gpu-x" ("": not known)
}

type cached struct {
	to []target // none: not a pod's, or not on this node
	at time.Time
}

// New starts a Poster; Stop ends it.
func New(o Options) *Poster {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: o.Client.CoreV1().Events("")})
	p := &Poster{o: o, bc: bc, rec: bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: o.NodeName}),
		queue: make(chan events.Event, queueLen), done: make(chan struct{}), pods: map[string]cached{}}
	go p.run()
	return p
}

// Notify queues e (events.Writer.Notify); it never blocks.
func (p *Poster) Notify(e events.Event) {
	select {
	case p.queue <- e:
	default:
		p.mu.Lock()
		p.drops++
		n := p.drops
		p.mu.Unlock()
		if n == 1 || n%100 == 0 {
			p.o.Log.Warn("Kubernetes Events: queue full, dropped", "dropped", n)
		}
	}
}

// Stop posts what is queued and stops.
func (p *Poster) Stop() {
	close(p.queue)
	<-p.done
	p.bc.Shutdown()
}

func (p *Poster) run() {
	defer close(p.done)
	for e := range p.queue {
		typ := corev1.EventTypeWarning
		if e.Kind == "thaw" || e.Kind == "restore" {
			typ = corev1.EventTypeNormal
		}
		for _, to := range p.targets(e.Container) {
			msg := Message(e)
			if to.who != "" {
				msg = to.who + ": " + msg
			}
			p.rec.Event(to.pod, typ, Reason(e), msg)
		}
	}
}

// Reason is the Event reason of e.
func Reason(e events.Event) string {
	switch e.Kind {
	case "kill", "kill-container":
		return ReasonKilled
	case "freeze":
		return ReasonThrottled
	case "thaw":
		return ReasonThawed
	case "escalate":
		return ReasonEscalated
	case "reclaim":
		return ReasonReclaimed
	case "suspend":
		return ReasonSuspended
	case "restore":
		return ReasonRestored
	}
	return "VGPU" + strings.ToUpper(e.Kind[:1]) + e.Kind[1:]
}

// Message says what was done, with its figures.
func Message(e events.Event) string {
	gpu := fmt.Sprintf("GPU %d", e.Device)
	if e.Device < 0 {
		gpu = "GPU " + e.GPU
	}
	var s string
	switch {
	case e.Kind == "kill-container":
		s = "vgpu node killed every process of the container (its processes kept coming back over the limit)"
	case (e.Kind == "kill" || e.Kind == "reclaim") && e.Reason == "memory":
		who := fmt.Sprintf("pid %d", e.PID)
		verb := "killed"
		if e.Kind == "reclaim" {
			verb = "reclaimed memory from"
		}
		s = fmt.Sprintf("vgpu node %s %s: device memory %s on %s > limit %s", verb, who, gib(e.Used), gpu, gib(e.Limit))
	case e.Kind == "kill" && e.Reason == "borrow":
		s = fmt.Sprintf("vgpu node killed pid %d to take borrowed memory back on %s", e.PID, gpu)
	case e.Kind == "suspend":
		s = fmt.Sprintf("vgpu node suspended pid %d to host memory (%s of %s) to take borrowed memory back; it is restored when it fits again", e.PID, gib(e.Used), gpu)
	case e.Kind == "restore":
		s = fmt.Sprintf("vgpu node restored pid %d (%s) to %s", e.PID, gib(e.Used), gpu)
	case e.Kind == "kill":
		s = fmt.Sprintf("vgpu node killed pid %d: compute share %d%% on %s > limit %d%%", e.PID, e.Used, gpu, e.Limit)
	case e.Kind == "freeze":
		s = fmt.Sprintf("vgpu node throttles the container (cgroup freezer): compute share %d%% on %s > limit %d%%", e.Used, gpu, e.Limit)
	case e.Kind == "thaw":
		s = "vgpu node ended the container's throttle"
	case e.Kind == "escalate":
		s = fmt.Sprintf("freezing could not hold compute share %d%% on %s (limit %d%%)", e.Used, gpu, e.Limit)
	default:
		s = fmt.Sprintf("vgpu node: %s on %s (%s %d, limit %d)", e.Kind, gpu, e.Reason, e.Used, e.Limit)
	}
	if e.Priority != "" {
		s += " (priority " + e.Priority + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Error != "" {
		s += " (failed: " + e.Error + ")"
	}
	return s
}

func gib(n uint64) string { return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30)) }

// targets finds and checks the pods of container id (none: nothing to
// post on), remembered for podTTL.
func (p *Poster) targets(id string) []target {
	p.mu.Lock()
	c, ok := p.pods[id]
	p.mu.Unlock()
	if ok && time.Since(c.at) < podTTL {
		return c.to
	}
	var to []target
	if strings.HasPrefix(id, tenant.ClaimIDPrefix) {
		to = p.claimPods(id)
	} else {
		to = p.lookup(id)
	}
	p.mu.Lock()
	p.pods[id] = cached{to, time.Now()}
	for k, v := range p.pods {
		if time.Since(v.at) > podTTL {
			delete(p.pods, k)
		}
	}
	p.mu.Unlock()
	return to
}

// lookup: the pod of a container, from pods.json or its spec's annotations.
func (p *Poster) lookup(id string) []target {
	ns, name, uid, ctr := "", "", "", ""
	if pods, err := events.ReadPods(p.o.StateDir); err == nil {
		if pd, ok := pods[id]; ok {
			ns, name, ctr = pd.Namespace, pd.Name, pd.Container
		}
	}
	if name == "" {
		ann := annotations(p.o.StateDir, id)
		ns, name, uid, ctr = ann[annNamespace], ann[annPod], ann[annUID], ann[annContainer]
	}
	if ns == "" || name == "" {
		return nil // not a pod's container
	}
	pod := p.check(id, ns, name, uid)
	if pod == nil {
		return nil
	}
	who := ""
	if ctr = (events.Pod{Container: ctr}).Clean().Container; ctr != "" {
		who = "container " + ctr
	}
	return []target{{pod, who}}
}

// claimPods are the pods a DRA claim's state directory serves: the claim
// is read from the API server by the namespace/name its record holds and
// must have the directory's UID; its pods are those it is reserved for,
// each checked as any other.
func (p *Poster) claimPods(id string) []target {
	info, err := state.Read(p.o.StateDir, id)
	if err != nil {
		return nil
	}
	ns, name, ok := strings.Cut(info.Name, "/")
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	claim, err := p.o.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		p.o.Log.Warn("Kubernetes Events: claim of a state directory", "container", id, "claim", info.Name, "err", err)
		return nil
	}
	if tenant.ClaimID(string(claim.UID)) != id {
		return nil // deleted and made again under the same name
	}
	var out []target
	for _, r := range claim.Status.ReservedFor {
		if r.APIGroup != "" || r.Resource != "pods" {
			continue
		}
		if pod := p.check(id, ns, r.Name, string(r.UID)); pod != nil {
			out = append(out, target{pod, "claim " + name})
		}
	}
	return out
}

// check reads pod ns/name: nil unless it runs on this node and has uid
// ("": any).
func (p *Poster) check(id, ns, name, uid string) *corev1.Pod {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod, err := p.o.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		p.o.Log.Warn("Kubernetes Events: pod of a container", "container", id, "pod", ns+"/"+name, "err", err)
		return nil
	}
	if p.o.NodeName != "" && pod.Spec.NodeName != p.o.NodeName {
		p.o.Log.Warn("Kubernetes Events: the container names a pod of another node: no Event", "container", id, "pod", ns+"/"+name, "podNode", pod.Spec.NodeName)
		return nil
	}
	if uid != "" && string(pod.UID) != uid {
		p.o.Log.Warn("Kubernetes Events: the container names another pod's UID: no Event", "container", id, "pod", ns+"/"+name)
		return nil
	}
	return pod
}

// annotations reads the CRI annotations of the container's OCI spec (its
// bundle's config.json, as the runtime recorded it); nil when there are none.
func annotations(stateDir, id string) map[string]string {
	info, err := state.Read(stateDir, id)
	if err != nil || info.Bundle == "" {
		return nil
	}
	b, err := readLimited(filepath.Join(info.Bundle, "config.json"), maxSpec)
	if err != nil {
		return nil
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(b, &spec) != nil {
		return nil
	}
	return spec.Annotations
}

func readLimited(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, n+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > n {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, n)
	}
	return b, nil
}

// Config says how vgpu node reaches the API server for Events.
type Config struct {
	Kubeconfig string // --kubeconfig; "": none
	// Serving: the daemon serves Kubernetes (device plugin, DRA); inside a
	// pod it then uses the in-cluster config.
	Serving  bool
	NodeName string // "": the host name
	StateDir string
}

// Start makes a Poster from c: nil (and no error) when there is no API
// server to post to (no --kubeconfig, and not serving Kubernetes from a pod).
func Start(c Config) (*Poster, error) {
	var rc *rest.Config
	var err error
	switch {
	case c.Kubeconfig != "":
		rc, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	case c.Serving && os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		rc, err = rest.InClusterConfig()
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("posting Kubernetes Events: API client: %w (--kubeconfig)", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("posting Kubernetes Events: API client: %w", err)
	}
	node := c.NodeName
	if node == "" {
		node, _ = os.Hostname()
	}
	return New(Options{Client: client, StateDir: c.StateDir, NodeName: node,
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "kevents")}), nil
}
