// Package dra is vgpu's Dynamic Resource Allocation driver (driver name
// vgpu.io), served by the node daemon through the kubelet plugin helper of
// k8s.io/dynamic-resource-allocation (kubeletplugin):
//
//   - ResourceSlices: one device per GPU, allowMultipleAllocations, with the
//     consumable capacities memory and cores (slices.go), so that the default
//     scheduler shares a GPU among claims and keeps the per-GPU sums;
//   - PrepareResourceClaims takes each claim through the host pipeline
//     (pipeline.Run, like every other caller) with the allocation, trusted:
//     the state directory claim-<uid> (quota, shared/,
//     ld.so.preload) and a CDI spec vgpu.io/claim=<uid> that carries the
//     device nodes, the libraries, the read-only quota and the shared state;
//     the kubelet passes its ID to the runtime (CRI CDIDevices), and
//     containerd puts the edits into each container of the pod;
//   - UnprepareResourceClaims removes both;
//   - WatchHealthStatus reports each GPU to the kubelet: Unhealthy once NVML
//     no longer lists it.
//
// A claim is one budget: every container that uses it mounts the same
// quota and shared accounting region. The files are the record: a restarted
// daemon finds prepared claims by their UID and keeps no state of its own.
//
// This package pulls in client-go and gRPC: only the vgpu command imports
// it, never vgpu-runtime or vgpu-hook.
package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/vgpu-dev/vgpu/internal/apply"
	"github.com/vgpu-dev/vgpu/internal/cdispec"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/pipeline"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Inventory lists the node's GPUs (in production discover.Discover).
type Inventory interface {
	GPUs() ([]discover.GPU, error)
}

// Options configure the driver.
type Options struct {
	NodeName   string
	KubeClient kubernetes.Interface
	// Config is vgpu's configuration; its StateDir holds the claims' state.
	Config    *config.Config
	Inventory Inventory
	// RegistrarDir is the kubelet's plugin registry (…/plugins_registry),
	// PluginDir the driver's socket directory (…/plugins/vgpu.io), CDIDir
	// where the per-claim CDI specs go (one the runtime reads).
	RegistrarDir, PluginDir, CDIDir string
	// RefreshInterval: how often the GPUs are listed again and the
	// ResourceSlice updated when they changed (0: 30 s).
	RefreshInterval time.Duration
	// HealthInterval: how often the kubelet gets a health report of every
	// GPU (0: 10 s; the kubelet marks a device Unknown after 30 s without).
	HealthInterval time.Duration
	Log            *slog.Logger
	// Placement is config.PlacementBinpack (the default) or
	// config.PlacementSpread: the order of the GPUs in the ResourceSlice,
	// which the scheduler's allocator takes first-fit (Ordered).
	Placement string
}

// Defaults of Options' directories.
const (
	DefaultRegistrarDir = kubeletplugin.KubeletRegistryDir
	DefaultPluginDir    = kubeletplugin.KubeletPluginsDir + "/" + DriverName
	DefaultCDIDir       = "/var/run/cdi"
)

// Driver implements kubeletplugin.DRAPlugin.
type Driver struct {
	o    Options
	mu   sync.Mutex // one prepare or unprepare at a time (the helper serializes too)
	stop context.CancelCauseFunc

	knownMu sync.Mutex
	known   map[int]discover.GPU // every GPU seen, by index: health reports name them all

	// republish is signalled when a claim was prepared or unprepared: the
	// GPUs' order in the ResourceSlice may change.
	republish chan struct{}
}

// New checks the options.
func New(o Options) (*Driver, error) {
	if o.NodeName == "" || o.Config == nil || o.Inventory == nil {
		return nil, errors.New("DRA driver: NodeName, Config and Inventory are required")
	}
	if o.RegistrarDir == "" {
		o.RegistrarDir = DefaultRegistrarDir
	}
	if o.PluginDir == "" {
		o.PluginDir = DefaultPluginDir
	}
	if o.CDIDir == "" {
		o.CDIDir = DefaultCDIDir
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 30 * time.Second
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Placement == "" {
		o.Placement = config.PlacementBinpack
	}
	if o.Placement != config.PlacementBinpack && o.Placement != config.PlacementSpread {
		return nil, fmt.Errorf("DRA driver: placement %q: use %q or %q", o.Placement, config.PlacementBinpack, config.PlacementSpread)
	}
	return &Driver{o: o, known: map[int]discover.GPU{}, republish: make(chan struct{}, 1)}, nil
}

// Run registers with the kubelet, publishes the ResourceSlice and serves
// until ctx ends (or a fatal error of the helper).
func (d *Driver) Run(ctx context.Context) error {
	if d.o.KubeClient == nil {
		return errors.New("DRA driver: no Kubernetes client")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.stop = cancel
	for _, dir := range []string{d.o.RegistrarDir, d.o.PluginDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(DriverName), kubeletplugin.NodeName(d.o.NodeName), kubeletplugin.KubeClient(d.o.KubeClient),
		kubeletplugin.RegistrarDirectoryPath(d.o.RegistrarDir), kubeletplugin.PluginDataDirectoryPath(d.o.PluginDir))
	if err != nil {
		return fmt.Errorf("DRA driver: %w", err)
	}
	defer h.Stop()
	d.o.Log.Info("DRA driver serving", "driver", DriverName, "node", d.o.NodeName, "plugin", d.o.PluginDir, "cdi", d.o.CDIDir)
	var last []discover.GPU
	t := time.NewTicker(d.o.RefreshInterval)
	defer t.Stop()
	for {
		gpus, err := d.o.Inventory.GPUs()
		if err != nil {
			d.o.Log.Warn("GPU inventory failed; the ResourceSlice keeps the last list", "err", err)
		} else if ordered := d.ordered(gpus); !sameGPUs(ordered, last) {
			if err := h.PublishResources(ctx, Resources(d.o.NodeName, ordered)); err != nil {
				return fmt.Errorf("DRA driver: publish ResourceSlice: %w", err)
			}
			names := make([]string, len(ordered))
			for i, g := range ordered {
				names[i] = DeviceName(g.Index)
			}
			d.o.Log.Info("ResourceSlice published", "node", d.o.NodeName, "gpus", len(gpus), "placement", d.o.Placement, "order", strings.Join(names, ","))
			last = ordered
		}
		select {
		case <-ctx.Done():
			if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		case <-t.C:
		case <-d.republish:
		}
	}
}

// ordered is gpus in the order the placement policy prefers them, by what
// the claims prepared on this node commit of each (Ordered).
func (d *Driver) ordered(gpus []discover.GPU) []discover.GPU {
	d.mu.Lock()
	mem, cores, err := d.committed(gpus, "")
	d.mu.Unlock()
	if err != nil {
		d.o.Log.Warn("read the claims prepared; the ResourceSlice lists the GPUs in NVML order", "err", err)
	}
	return Ordered(gpus, mem, cores, d.o.Placement)
}

// changed tells Run to publish the GPUs' order again.
func (d *Driver) changed() {
	select {
	case d.republish <- struct{}{}:
	default:
	}
}

func sameGPUs(a, b []discover.GPU) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// StateID is the state directory (pipeline container id) of claim uid.
func StateID(uid types.UID) string { return tenant.ClaimID(string(uid)) }

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	together := d.claimsTogether(ctx, claims)
	for _, c := range claims {
		if err := together[c.UID]; err != nil {
			d.o.Log.Warn("claim not prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		devs, err := d.prepare(c)
		if err != nil {
			d.o.Log.Warn("claim not prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	d.changed()
	return out, nil
}

// claimsTogether refuses the claims that one container of their pod names
// together with another of this driver's claims: each claim's CDI spec
// mounts its own quota at /run/vgpu/quota, so that container would get one
// claim's limits and another claim's GPU without them. The kubelet prepares
// a pod's claims of one driver in one call, so claims holds them all. It
// reads the pod (the claim does not say which containers use it); without
// a client (tests) it checks nothing.
func (d *Driver) claimsTogether(ctx context.Context, claims []*resourceapi.ResourceClaim) map[types.UID]error {
	out := map[types.UID]error{}
	if d.o.KubeClient == nil {
		return out
	}
	type podKey struct{ ns, name string }
	byPod := map[podKey]map[string]*resourceapi.ResourceClaim{}
	for _, c := range claims {
		for _, r := range c.Status.ReservedFor {
			if r.APIGroup == "" && r.Resource == "pods" {
				k := podKey{c.Namespace, r.Name}
				if byPod[k] == nil {
					byPod[k] = map[string]*resourceapi.ResourceClaim{}
				}
				byPod[k][c.Name] = c
			}
		}
	}
	for k, ours := range byPod {
		pod, err := d.o.KubeClient.CoreV1().Pods(k.ns).Get(ctx, k.name, metav1.GetOptions{})
		if err != nil {
			for _, c := range ours {
				out[c.UID] = fmt.Errorf("claim %s/%s: read pod %s/%s to check its containers: %w", c.Namespace, c.Name, k.ns, k.name, err)
			}
			continue
		}
		// The pod's claim names → the ResourceClaims' names.
		actual := map[string]string{}
		for _, pc := range pod.Spec.ResourceClaims {
			if pc.ResourceClaimName != nil {
				actual[pc.Name] = *pc.ResourceClaimName
			}
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.ResourceClaimName != nil {
				actual[st.Name] = *st.ResourceClaimName
			}
		}
		for _, ctr := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
			var names []string
			seen := map[string]bool{}
			for _, rc := range ctr.Resources.Claims {
				if n := actual[rc.Name]; ours[n] != nil && !seen[n] {
					seen[n] = true
					names = append(names, n)
				}
			}
			if len(names) < 2 {
				continue
			}
			for _, n := range names {
				c := ours[n]
				out[c.UID] = fmt.Errorf("claim %s/%s: container %q of pod %s/%s names %d %s claims (%s): a container gets the limits of one; put the requests into one claim (its quota lists every GPU, each with its limits) or give each container its own claim",
					c.Namespace, c.Name, ctr.Name, pod.Namespace, pod.Name, len(names), DriverName, strings.Join(names, ", "))
			}
		}
	}
	return out
}

// claimAllocation is a claim's allocation on this node (whose GPUs are gpus)
// as the pipeline's Allocation, and the helper's devices (every one names the
// claim's CDI device).
func (d *Driver) claimAllocation(c *resourceapi.ResourceClaim, gpus []discover.GPU) (pipeline.Allocation, []kubeletplugin.Device, error) {
	src := fmt.Sprintf("claim %s/%s", c.Namespace, c.Name)
	g := pipeline.Allocation{Source: src}
	if c.Status.Allocation == nil {
		return g, nil, fmt.Errorf("%s is not allocated", src)
	}
	byIndex := map[int]discover.GPU{}
	for _, gpu := range gpus {
		byIndex[gpu.Index] = gpu
	}
	pos := map[int]int{} // GPU index -> position in the allocation
	var devs []kubeletplugin.Device
	cdiID := cdispec.ClaimDeviceID(string(c.UID))
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		if r.Pool != d.o.NodeName {
			return g, nil, fmt.Errorf("%s: device %s of pool %q is not this node's (%q)", src, r.Device, r.Pool, d.o.NodeName)
		}
		idx, err := deviceIndex(r.Device)
		if err != nil {
			return g, nil, fmt.Errorf("%s: %w", src, err)
		}
		gpu, ok := byIndex[idx]
		if !ok {
			return g, nil, fmt.Errorf("%s: device %s: no GPU with index %d on this node (found %d)", src, r.Device, idx, len(gpus))
		}
		mem, okm := r.ConsumedCapacity[CapacityMemory]
		cores, okc := r.ConsumedCapacity[CapacityCores]
		if !okm || !okc {
			return g, nil, fmt.Errorf("%s: device %s: the allocation has no consumed memory and cores; the scheduler must run with consumable capacity (DRAConsumableCapacity)", src, r.Device)
		}
		if mem.Sign() <= 0 || cores.Sign() <= 0 {
			return g, nil, fmt.Errorf("%s: device %s: consumed memory %s, cores %s: want both above 0", src, r.Device, mem.String(), cores.String())
		}
		i, seen := pos[idx]
		if !seen {
			i = len(g.UUIDs)
			pos[idx] = i
			g.UUIDs = append(g.UUIDs, gpu.UUID)
			g.Memory = append(g.Memory, 0)
			g.Compute = append(g.Compute, 0)
		}
		// Two requests of one claim on one GPU add up: the claim is one budget.
		g.Memory[i] += uint64(mem.Value())
		g.Compute[i] = min(g.Compute[i]+int(cores.Value()), int(MaxCores.Value()))
		devs = append(devs, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: []string{cdiID}})
	}
	if len(g.UUIDs) == 0 {
		return g, nil, fmt.Errorf("%s allocates no %s device", src, DriverName)
	}
	return g, devs, nil
}

func (d *Driver) prepare(c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	gpus, err := d.o.Inventory.GPUs()
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s: list GPUs: %w", c.Namespace, c.Name, err)
	}
	g, devs, err := d.claimAllocation(c, gpus)
	if err != nil {
		return nil, err
	}
	policy, err := classLimits(c, Limits{Cores: d.o.Config.Kubernetes.CoresLimit, Memory: d.o.Config.Kubernetes.MemoryLimit})
	if err != nil {
		return nil, err
	}
	id := StateID(c.UID)
	specPath := filepath.Join(d.o.CDIDir, cdispec.ClaimFileName(string(c.UID)))
	_, statErr := os.Stat(specPath)
	_, readErr := state.Read(d.o.Config.StateDir, id)
	if statErr == nil && readErr == nil {
		return devs, nil // prepared before (the kubelet asks again after restarts)
	}
	// Half there (a crash between the two writes, or a reboot that cleared
	// one): start again from nothing.
	if err := d.remove(c.UID); err != nil {
		return nil, err
	}
	if err := d.fits(c, g, gpus); err != nil {
		return nil, err
	}
	// cores and memory capacity are the requests; the limits the class's or the host's
	g.CoresAsRequests(policy.Cores)
	g.Priority = policy.Priority
	if err := g.MemoryAsRequests(policy.Memory); err != nil {
		return nil, err
	}
	req, err := g.Request()
	if err != nil {
		return nil, err
	}
	res, err := pipeline.Run(pipeline.Input{Config: d.o.Config, ContainerID: id, Request: req,
		Name: c.Namespace + "/" + c.Name, Target: &cdiTarget{uid: string(c.UID), dir: d.o.CDIDir}})
	if err != nil {
		return nil, err
	}
	for _, dv := range res.Plan.Devices {
		d.o.Log.Info("claim prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "gpu", dv.GPU.UUID, "index", dv.GPU.Index,
			"memory", dv.Memory, "compute", dv.Compute, "cdi", cdispec.ClaimDeviceID(string(c.UID)))
	}
	return devs, nil
}

// fits refuses a claim that, with the claims prepared on this node before
// it, would commit more memory or cores of a GPU than the GPU has. The
// scheduler keeps that account from the ResourceSlice; this is the node's
// own check of what it is handed (a slice gone stale, a claim allocated
// twice), made before anything is written. gpus: this node's. With d.mu
// held.
func (d *Driver) fits(c *resourceapi.ResourceClaim, g pipeline.Allocation, gpus []discover.GPU) error {
	total := map[string]uint64{}
	for _, gpu := range gpus {
		total[gpu.UUID] = gpu.MemoryBytes
	}
	mem, cores, err := d.committed(gpus, StateID(c.UID))
	if err != nil {
		return fmt.Errorf("claim %s/%s: read the claims prepared: %w", c.Namespace, c.Name, err)
	}
	for i, uuid := range g.UUIDs {
		if have := total[uuid]; mem[uuid]+g.Memory[i] > have {
			others := ""
			if mem[uuid] > 0 {
				others = fmt.Sprintf("claims prepared on this node commit %d bytes of GPU %s and ", mem[uuid], uuid)
			}
			return fmt.Errorf("claim %s/%s: %sthis one asks %d: more than GPU %s has (%d; a stale ResourceSlice, or an allocation made twice?); the claim is not prepared",
				c.Namespace, c.Name, others, g.Memory[i], uuid, have)
		}
		if have := int(MaxCores.Value()); cores[uuid]+g.Compute[i] > have {
			return fmt.Errorf("claim %s/%s: GPU %s: claims prepared on this node commit %d cores and this one asks %d: more than %d (a stale ResourceSlice, or an allocation made twice?); the claim is not prepared",
				c.Namespace, c.Name, uuid, cores[uuid], g.Compute[i], have)
		}
	}
	return nil
}

// committed sums what the claims prepared on this node (but skip) commit
// of each GPU (gpus: this node's), by UUID. With d.mu held.
func (d *Driver) committed(gpus []discover.GPU, skip string) (map[string]uint64, map[string]int, error) {
	total := map[string]uint64{}
	for _, gpu := range gpus {
		total[gpu.UUID] = gpu.MemoryBytes
	}
	mem, cores := map[string]uint64{}, map[string]int{}
	// Claims hold from prepare to unprepare (they have no init): a claim
	// half there is prepared again, and checked, when asked for.
	ledger, err := state.Ledger(d.o.Config.StateDir)
	if err != nil {
		return mem, cores, err
	}
	for _, uuid := range ledger.GPUs() {
		for _, h := range ledger.On(uuid) {
			if !strings.HasPrefix(h.Record.ID, tenant.ClaimIDPrefix) || h.Record.ID == skip {
				continue
			}
			dv := h.Device()
			m := dv.MemoryRequest // the scheduler counts requests
			if m == 0 {
				m = dv.Memory
			}
			if m == 0 {
				m = total[uuid] // no limit: the whole GPU
			}
			mem[uuid] += m
			cores[uuid] += dv.Request()
		}
	}
	return mem, cores, nil
}

// cdiTarget is the pipeline's target for a claim: the CDI spec, written
// once the state directory exists (and its shared/ has its capped tmpfs).
type cdiTarget struct {
	uid, dir string
}

func (t *cdiTarget) Apply(p *plan.Plan) error {
	raw, err := cdispec.ForPlan(p, cdispec.ClaimKind, t.uid)
	if err != nil {
		return err
	}
	if err := apply.MountSharedFS(p.StateDir); err != nil {
		return err
	}
	_, err = cdispec.WriteDir(raw, t.dir, cdispec.ClaimFileName(t.uid))
	return err
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.remove(c.UID)
		if err != nil {
			d.o.Log.Warn("claim not unprepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
		} else {
			d.o.Log.Info("claim unprepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID)
		}
		out[c.UID] = err
	}
	d.changed()
	return out, nil
}

// remove takes claim uid's CDI spec and state away (absent is fine): the
// spec first, so that no new container gets a quota that is going.
func (d *Driver) remove(uid types.UID) error {
	if err := state.ValidID(StateID(uid)); err != nil {
		return err
	}
	err := os.Remove(filepath.Join(d.o.CDIDir, cdispec.ClaimFileName(string(uid))))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return state.Remove(d.o.Config.StateDir, StateID(uid))
}

// HandleError implements kubeletplugin.DRAPlugin: recoverable errors
// (ResourceSlice publishing) are logged, others stop the driver.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.o.Log.Warn(msg, "err", err)
		return
	}
	d.o.Log.Error(msg, "err", err)
	if d.stop != nil {
		d.stop(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: every
// HealthInterval a report of every GPU seen since the start, Healthy while
// the inventory lists it, Unhealthy when it does not (or cannot be read).
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	t := time.NewTicker(d.o.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reports <- d.healthReport():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (d *Driver) healthReport() kubeletplugin.DeviceHealthReport {
	gpus, err := d.o.Inventory.GPUs()
	now := time.Now()
	d.knownMu.Lock()
	defer d.knownMu.Unlock()
	present := map[int]bool{}
	for _, g := range gpus {
		d.known[g.Index] = g
		present[g.Index] = true
	}
	idx := make([]int, 0, len(d.known))
	for i := range d.known {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var r kubeletplugin.DeviceHealthReport
	for _, i := range idx {
		h := kubeletplugin.DeviceHealth{PoolName: d.o.NodeName, DeviceName: DeviceName(i), Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now}
		switch {
		case err != nil:
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, "GPU inventory failed: "+err.Error()
		case !present[i]:
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, fmt.Sprintf("GPU %s (index %d) is no longer listed by NVML", d.known[i].UUID, i)
		}
		r.Devices = append(r.Devices, h)
	}
	return r
}
