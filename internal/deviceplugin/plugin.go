// Package deviceplugin serves the kubelet's device-plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1) for vgpu: the resources
// vgpu.io/memory (device memory in units, 1 GiB by default) and vgpu.io/cores
// (percent of one GPU), each advertised per healthy GPU. Allocate writes an
// allocation record (internal/allocation) that vgpu-runtime trusts, and
// returns the annotation that names it; the pod itself can forge neither.
//
// Each resource is its own gRPC server on its own socket in the kubelet's
// plugin directory, registered with the kubelet's Registration service; when
// the kubelet restarts (it recreates kubelet.sock and deletes every plugin
// socket) the plugin serves and registers again.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-dev/vgpu/internal/allocation"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
)

// Inventory lists the node's GPUs (in production discover.Discover through
// NVML). An error, or a GPU missing from a later list, marks units Unhealthy.
type Inventory interface {
	GPUs() ([]discover.GPU, error)
}

// Options configure the plugin.
type Options struct {
	PluginDir      string        // the kubelet's device-plugin directory (holds kubelet.sock)
	GrantDir       string        // where allocation records are written (root-only; config kubernetes.grant_dir)
	UnitBytes      uint64        // bytes per vgpu.io/memory unit
	HealthInterval time.Duration // how often the inventory is read again
	Inventory      Inventory
	Log            *slog.Logger
	// Placement is config.PlacementBinpack (the default) or
	// config.PlacementSpread: where a container's first resource goes.
	Placement string
	// Now is the clock of the pairing of a container's two resources
	// (time.Now if nil).
	Now func() time.Time
	// PodClasses lists the PriorityClass of each pod bound to this node
	// (pod UID -> spec.priorityClassName, from the API server); nil: no
	// priority table is configured. Each Allocate writes them beside the
	// records (allocation.PodClassesFile) for vgpu-runtime to read.
	PodClasses func(ctx context.Context) (map[string]string, error)
}

// Plugin is the device plugin of both resources.
type Plugin struct {
	o         Options
	resources []*server
	place     *placer

	mu      sync.Mutex
	gpus    []discover.GPU  // every GPU seen, in the order first seen
	healthy map[string]bool // by UUID
	version uint64          // bumped on every inventory change
	changed chan struct{}   // closed and replaced on every change
}

// New checks the options and reads the inventory once.
func New(o Options) (*Plugin, error) {
	if o.PluginDir == "" || o.GrantDir == "" || o.Inventory == nil {
		return nil, errors.New("device plugin: PluginDir, GrantDir and Inventory are required")
	}
	if o.UnitBytes == 0 {
		o.UnitBytes = 1 << 30
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Placement != "" && o.Placement != config.PlacementBinpack && o.Placement != config.PlacementSpread {
		return nil, fmt.Errorf("device plugin: placement %q: use %q or %q", o.Placement, config.PlacementBinpack, config.PlacementSpread)
	}
	p := &Plugin{o: o, healthy: map[string]bool{}, changed: make(chan struct{})}
	res := []resource{memoryResource(o.UnitBytes), coresResource()}
	for _, r := range res {
		p.resources = append(p.resources, &server{p: p, res: r})
	}
	p.place = newPlacer(o.Placement, res, o.Now)
	p.refresh()
	return p, nil
}

// refresh reads the inventory and reports whether anything changed.
func (p *Plugin) refresh() bool {
	gpus, err := p.o.Inventory.GPUs()
	p.mu.Lock()
	defer p.mu.Unlock()
	now := map[string]bool{}
	if err != nil {
		p.o.Log.Warn("GPU inventory failed; every GPU is reported Unhealthy", "err", err)
	}
	for _, g := range gpus {
		now[g.UUID] = true
		known := false
		for _, k := range p.gpus {
			known = known || k.UUID == g.UUID
		}
		if !known {
			p.gpus = append(p.gpus, g)
		}
	}
	change := false
	for _, g := range p.gpus {
		if p.healthy[g.UUID] != now[g.UUID] {
			change = true
			p.healthy[g.UUID] = now[g.UUID]
			p.o.Log.Info("GPU health", "gpu", g.UUID, "index", g.Index, "healthy", now[g.UUID])
		}
	}
	if change {
		p.version++
		close(p.changed)
		p.changed = make(chan struct{})
	}
	return change
}

// snapshot returns the GPUs, their health and a channel closed on the next change.
func (p *Plugin) snapshot() ([]discover.GPU, map[string]bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := make(map[string]bool, len(p.healthy))
	for k, v := range p.healthy {
		h[k] = v
	}
	return append([]discover.GPU(nil), p.gpus...), h, p.changed
}

// Run serves both resources and registers them with the kubelet until ctx
// ends, serving and registering again whenever kubelet.sock is created anew.
func (p *Plugin) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(p.o.PluginDir); err != nil {
		return fmt.Errorf("watch plugin directory %s: %w (is it the kubelet's --root-dir/device-plugins?)", p.o.PluginDir, err)
	}
	kubeletSock := filepath.Join(p.o.PluginDir, filepath.Base(pluginapi.KubeletSocket))
	tick := time.NewTicker(p.o.HealthInterval)
	defer tick.Stop()
	// Served resources whose registration failed with kubelet.sock present.
	// Without the socket the kubelet is not up: it will create it, and the
	// watch below starts again then. With it, the kubelet may not accept yet
	// (register waits for that, up to its timeout) or fail otherwise, and no
	// event would come again: a retry every second.
	unregistered := map[*server]bool{}
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	register := func(s *server) {
		delete(unregistered, s)
		if _, err := os.Stat(kubeletSock); err != nil {
			p.o.Log.Warn("register with the kubelet: no kubelet.sock yet; registering when it appears", "resource", s.res.name)
			return
		}
		if err := s.register(ctx, kubeletSock); err != nil {
			p.o.Log.Warn("register with the kubelet; trying again in 1s", "resource", s.res.name, "err", err)
			unregistered[s] = true
		}
	}
	start := func() {
		for _, s := range p.resources {
			s.stop()
			if err := s.start(); err != nil {
				p.o.Log.Error("serve", "resource", s.res.name, "err", err)
				continue
			}
			register(s)
		}
	}
	start()
	defer func() {
		for _, s := range p.resources {
			s.stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			p.refresh()
		case <-retry.C:
			for _, s := range p.resources {
				if unregistered[s] {
					register(s)
				}
			}
		case ev := <-w.Events:
			switch {
			case ev.Name == kubeletSock && ev.Has(fsnotify.Create):
				p.o.Log.Info("kubelet.sock created: the kubelet (re)started; registering again")
				start()
			case ev.Has(fsnotify.Remove):
				for _, s := range p.resources {
					if ev.Name == s.socket() {
						p.o.Log.Info("plugin socket removed (kubelet restart); serving again once kubelet.sock is back", "socket", ev.Name)
						s.stop()
					}
				}
			}
		case err := <-w.Errors:
			p.o.Log.Warn("watch plugin directory", "err", err)
		}
	}
}

// server is one resource's gRPC service.
type server struct {
	pluginapi.UnimplementedDevicePluginServer
	p   *Plugin
	res resource

	mu   sync.Mutex
	grpc *grpc.Server
}

func (s *server) socket() string {
	return filepath.Join(s.p.o.PluginDir, "vgpu-"+filepath.Base(s.res.name)+".sock")
}

func (s *server) start() error {
	sock := s.socket()
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s)
	s.mu.Lock()
	s.grpc = g
	s.mu.Unlock()
	go func() { _ = g.Serve(l) }()
	return nil
}

func (s *server) stop() {
	s.mu.Lock()
	g := s.grpc
	s.grpc = nil
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

func (s *server) register(ctx context.Context, kubeletSock string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	// WaitForReady: a kubelet that has just created its socket may not accept
	// yet; wait for it (up to the timeout) instead of failing at once.
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.socket()),
		ResourceName: s.res.name,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	}, grpc.WaitForReady(true))
	if err == nil {
		s.p.o.Log.Info("registered with the kubelet", "resource", s.res.name, "endpoint", s.socket())
	}
	return err
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// devices lists every unit of every GPU seen, with its GPU's health.
func (s *server) devices() ([]*pluginapi.Device, <-chan struct{}) {
	gpus, healthy, changed := s.p.snapshot()
	var out []*pluginapi.Device
	for _, g := range gpus {
		h := pluginapi.Unhealthy
		if healthy[g.UUID] {
			h = pluginapi.Healthy
		}
		for n := 0; n < s.res.unitsOf(g); n++ {
			out = append(out, &pluginapi.Device{ID: unitID(g.UUID, n), Health: h})
		}
	}
	return out, changed
}

func (s *server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		devs, changed := s.devices()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

func (s *server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	gpus, healthy, _ := s.p.snapshot()
	var ok []discover.GPU
	for _, g := range gpus {
		if healthy[g.UUID] {
			ok = append(ok, g)
		}
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		avail, err := byGPU(cr.AvailableDeviceIDs)
		if err != nil {
			return nil, err
		}
		must, err := byGPU(cr.MustIncludeDeviceIDs)
		if err != nil {
			return nil, err
		}
		s.p.place.offered(s.res.name, avail)
		ids := preferred(s.p.place, s.res.name, ok, avail, must, int(cr.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (s *server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	s.p.writePodClasses(ctx)
	gpus, healthy, _ := s.p.snapshot()
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		r, err := s.allocate(gpus, healthy, cr.DevicesIds)
		if err != nil {
			s.p.o.Log.Error("allocate", "resource", s.res.name, "devices", cr.DevicesIds, "err", err)
			return nil, err
		}
		if err := allocation.Write(s.p.o.GrantDir, r); err != nil {
			return nil, fmt.Errorf("%s: write allocation record: %w", s.res.name, err)
		}
		s.p.place.allocated(s.res.name, r.GPUUUID, r.Units, gpus)
		s.p.o.Log.Info("granted", "resource", s.res.name, "grant", r.ID, "gpu", r.GPUUUID, "units", r.Units)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Annotations: map[string]string{allocation.AnnotationKey(s.res.name): r.ID},
		})
	}
	return resp, nil
}

// writePodClasses refreshes the pod classes file: the pod being allocated
// is bound to this node before the kubelet calls Allocate, so the list
// holds it. A failure is logged and leaves the last file: vgpu-runtime
// then gives a pod it does not find defaults.priority, never more.
func (p *Plugin) writePodClasses(ctx context.Context) {
	if p.o.PodClasses == nil {
		return
	}
	classes, err := p.o.PodClasses(ctx)
	if err == nil {
		err = allocation.WritePodClasses(p.o.GrantDir, classes)
	}
	if err != nil {
		p.o.Log.Warn("pod priority classes not refreshed: pods not found get defaults.priority", "err", err)
	}
}

// allocate checks that ids are units of one healthy GPU and builds its record.
func (s *server) allocate(gpus []discover.GPU, healthy map[string]bool, ids []string) (*allocation.Record, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: allocation of no units", s.res.name)
	}
	groups, err := byGPU(ids)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.res.name, err)
	}
	if len(groups) != 1 {
		return nil, fmt.Errorf("%s: %d units span %d GPUs; no GPU of this node has that many free: a container's units must fit on one GPU (the DRA driver places by each GPU's free memory and cores: docs/kubernetes-dra.md)", s.res.name, len(ids), len(groups))
	}
	uuid, _ := unitGPU(ids[0])
	var gpu *discover.GPU
	for i := range gpus {
		if gpus[i].UUID == uuid {
			gpu = &gpus[i]
		}
	}
	if gpu == nil {
		return nil, fmt.Errorf("%s: unit %s names GPU %s, which this node does not have", s.res.name, ids[0], uuid)
	}
	if !healthy[uuid] {
		return nil, fmt.Errorf("%s: GPU %s is unhealthy", s.res.name, uuid)
	}
	id, err := allocation.NewID()
	if err != nil {
		return nil, err
	}
	r := &allocation.Record{
		ID: id, Resource: s.res.name, GPUUUID: uuid, GPUIndex: gpu.Index, Units: len(ids),
		DeviceIDs: append([]string(nil), ids...), Created: time.Now().UTC(),
	}
	s.res.fill(r, len(ids))
	return r, nil
}

// HostInventory lists the GPUs exactly as vgpu-runtime resolves them
// (discover.Discover: the driver under cfg's driver root, NVML).
type HostInventory struct{ Config *config.Config }

// GPUs implements Inventory.
func (h HostInventory) GPUs() ([]discover.GPU, error) {
	host, err := discover.Discover(h.Config)
	if err != nil {
		return nil, err
	}
	return host.GPUs, nil
}
