// Package podres names the Kubernetes pod, namespace and container of each
// container vgpu runs under the device plugin, from the kubelet's
// PodResources API (k8s.io/kubelet/pkg/apis/podresources/v1, gRPC on
// <kubelet root>/pod-resources/kubelet.sock).
//
// The link: a container's OCI spec carries the allocation annotations
// (grant.vgpu.io/memory, grant.vgpu.io/cores) containerd passed from the
// device plugin's Allocate; each allocation record lists the device IDs the
// kubelet allocated; PodResources lists, per pod container, the device IDs
// it holds. The kubelet is asked only while some container with allocations is
// not named yet (with backoff), never per scrape: what is learned goes to
// <state_dir>/.node/pods.json (events.WritePods), which `vgpu status` and
// the metrics read.
package podres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/vgpu-dev/vgpu/internal/allocation"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/spec"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// DefaultSocket is the kubelet's PodResources socket under its default
// --root-dir.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Device is one device the kubelet allocated: a resource and a device ID
// (one vgpu unit).
type Device struct{ Resource, ID string }

// Owners lists who holds each allocated device.
type Owners interface {
	Owners(ctx context.Context) (map[Device]events.Pod, error)
}

// Kubelet asks the kubelet's PodResources API over Socket.
type Kubelet struct {
	Socket  string
	Timeout time.Duration // per call; 0: 10 s
}

// maxMessage bounds the List answer (the kubelet's own client default).
const maxMessage = 16 << 20

// Owners implements Owners with PodResourcesLister.List.
func (k Kubelet) Owners(ctx context.Context) (map[Device]events.Pod, error) {
	to := k.Timeout
	if to == 0 {
		to = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+k.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := podresv1.NewPodResourcesListerClient(conn).List(ctx, &podresv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources List on %s: %w", k.Socket, err)
	}
	out := map[Device]events.Pod{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			who := events.Pod{Namespace: p.GetNamespace(), Name: p.GetName(), Container: c.GetName()}
			for _, d := range c.GetDevices() {
				if !strings.HasPrefix(d.GetResourceName(), "vgpu.io/") {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					out[Device{d.GetResourceName(), id}] = who
				}
			}
		}
	}
	return out, nil
}

// Options configure a Namer.
type Options struct {
	StateDir string
	GrantDir string // the device plugin's allocation records (config kubernetes.grant_dir)
	Owners   Owners
	// FirstRetry is the wait before asking again for a container the
	// kubelet did not name; it doubles up to MaxRetry. 0: 1 s and 1 min.
	FirstRetry, MaxRetry time.Duration
	Log                  *slog.Logger
	Now                  func() time.Time // nil: time.Now
}

// Namer keeps pods.json in step with the state directory.
type Namer struct {
	o      Options
	grants map[string][]string    // container id -> its grant IDs (empty: none; not Kubernetes)
	pods   map[string]events.Pod  // what pods.json holds
	retry  map[string]*retryState // containers with grants not named yet
	// askErr: the last question to the kubelet failed (kept until one
	// succeeds or nothing waits for a name).
	askErr error
	dirty  bool // pods differs from pods.json (a write failed)
}

type retryState struct {
	next time.Time
	wait time.Duration
}

// New loads pods.json (what an earlier run learned).
func New(o Options) (*Namer, error) {
	if o.StateDir == "" || o.GrantDir == "" || o.Owners == nil {
		return nil, errors.New("podres: StateDir, GrantDir and Owners are required")
	}
	if o.FirstRetry == 0 {
		o.FirstRetry = time.Second
	}
	if o.MaxRetry == 0 {
		o.MaxRetry = time.Minute
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	pods, err := events.ReadPods(o.StateDir)
	if err != nil {
		o.Log.Warn("pods.json unreadable; naming the containers again", "err", err)
		pods = map[string]events.Pod{}
	}
	return &Namer{o: o, grants: map[string][]string{}, pods: pods, retry: map[string]*retryState{}}, nil
}

// Run scans every interval until ctx ends, logging an error when it differs
// from the previous scan's (a kubelet that is down is said once).
func (n *Namer) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	last := ""
	for {
		err := n.Scan(ctx)
		switch {
		case err != nil && err.Error() != last:
			n.o.Log.Warn("cannot name the pods of granted containers (is --pod-resources-socket the kubelet's?); retrying", "err", err)
			last = err.Error()
		case err == nil && last != "":
			n.o.Log.Info("naming pods again")
			last = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pods returns a copy of what the namer knows (container id -> pod).
func (n *Namer) Pods() map[string]events.Pod {
	out := make(map[string]events.Pod, len(n.pods))
	for k, v := range n.pods {
		out[k] = v
	}
	return out
}

// Scan reads the state directory once; it asks the kubelet only when a
// container with grants is not named yet and its retry time has come, and
// rewrites pods.json only when it changed.
func (n *Namer) Scan(ctx context.Context) error {
	ents, err := state.List(n.o.StateDir)
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, e := range ents {
		id := e.ID
		present[id] = true
		if _, ok := n.grants[id]; !ok {
			n.grants[id] = grantIDs(e.Info)
		}
	}
	changed := n.dirty
	for id := range n.grants {
		if !present[id] {
			delete(n.grants, id)
			delete(n.retry, id)
		}
	}
	for id := range n.pods {
		if !present[id] {
			delete(n.pods, id)
			changed = true
		}
	}
	now := n.o.Now()
	due := false
	for id, gs := range n.grants {
		if _, named := n.pods[id]; named || len(gs) == 0 {
			continue
		}
		r := n.retry[id]
		if r == nil {
			r = &retryState{next: now}
			n.retry[id] = r
		}
		due = due || !now.Before(r.next)
	}
	if due {
		owners, err := n.o.Owners.Owners(ctx)
		n.askErr = err
		for id, r := range n.retry {
			if now.Before(r.next) {
				continue
			}
			if owners != nil {
				if p, ok := n.owner(id, owners); ok {
					n.pods[id] = p.Clean()
					delete(n.retry, id)
					changed = true
					n.o.Log.Info("container named", "container", id, "namespace", p.Namespace, "pod", p.Name, "name", p.Container)
					continue
				}
			}
			r.wait = min(max(2*r.wait, n.o.FirstRetry), n.o.MaxRetry)
			r.next = now.Add(r.wait)
		}
	}
	if len(n.retry) == 0 {
		n.askErr = nil
	}
	if changed {
		if err := events.WritePods(n.o.StateDir, n.pods); err != nil {
			n.dirty = true
			return errors.Join(n.askErr, fmt.Errorf("write %s: %w", events.PodsFile, err))
		}
		n.dirty = false
	}
	return n.askErr
}

// owner finds the pod container holding the devices of container id's allocations.
func (n *Namer) owner(id string, owners map[Device]events.Pod) (events.Pod, bool) {
	var who *events.Pod
	for _, gid := range n.grants[id] {
		r, err := allocation.Read(n.o.GrantDir, gid)
		if err != nil {
			n.o.Log.Debug("grant record", "container", id, "grant", gid, "err", err)
			continue
		}
		for _, dev := range r.DeviceIDs {
			p, ok := owners[Device{r.Resource, dev}]
			if !ok {
				continue
			}
			if who != nil && *who != p {
				// The kubelet reassigned a unit (the record is stale): name nobody.
				n.o.Log.Warn("grant devices held by different pods", "container", id, "grant", gid, "one", *who, "other", p)
				return events.Pod{}, false
			}
			who = &p
		}
	}
	if who == nil {
		return events.Pod{}, false
	}
	return *who, true
}

// grantIDs reads the grant annotations from the container's OCI spec (the
// bundle its record names); none when there is no bundle to read (the
// container is not one the device plugin granted, or it is gone), nil when
// its record could not be read.
func grantIDs(info *tenant.Record) []string {
	if info == nil {
		return nil
	}
	if info.Bundle == "" {
		return []string{}
	}
	s, err := spec.LoadBundle(info.Bundle)
	if err != nil {
		return []string{}
	}
	ann := s.Annotations()
	var ids []string
	for _, res := range []string{allocation.ResourceMemory, allocation.ResourceCores} {
		if g := ann[allocation.AnnotationKey(res)]; g != "" {
			ids = append(ids, g)
		}
	}
	if ids == nil {
		ids = []string{}
	}
	return ids
}
