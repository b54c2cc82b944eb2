// Package cdispec writes a CDI (Container Device Interface) spec for the
// host's GPUs, kind vgpu.io/gpu, so that engines with CDI support (podman
// --device vgpu.io/gpu=0, containerd/CRI-O with enable_cdi) give a container
// what vgpu-runtime would have put into its spec.
//
// There is one description of what a container gets: internal/plan's Plan.
// The spec is derived from plans for the discovered host:
//
//   - the spec-wide containerEdits (applied once when any vgpu.io/gpu device
//     is asked for) are the host parts common to all GPUs: control nodes,
//     driver libraries, the stand-in libraries, driver tools, IPC paths, the
//     environment (Plan.CommonNodes, Plan.HostMounts, Plan.Env), plus two
//     hooks: `vgpu-hook createContainer --cdi` and `vgpu-hook poststop`;
//   - each device (by index "0", by UUID "GPU-…", and "all") adds the device
//     nodes of its GPUs (Plan.GPUNodes).
//
// A CDI spec is static, but the quota file, the shared accounting directory
// and ld.so.preload belong to one container (Plan.StateMounts). The
// createContainer hook makes them at create time: it reads the container's
// limits from its VGPU_* environment or vgpu.io/* annotations, takes its GPUs
// from the device nodes CDI put in the spec, computes the same plan, writes
// the state directory and mounts those three into the rootfs
// (internal/hook). The poststop hook removes the state directory.
package cdispec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/request"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Names of the spec.
const (
	Vendor = "vgpu.io"
	Class  = "gpu"
	Kind   = Vendor + "/" + Class
	// FileName is the spec's file name in a spec directory.
	FileName = Vendor + "-" + Class + ".yaml"
	// AllDevices names the device that holds every GPU.
	AllDevices = "all"
)

// DefaultSpecDirs are where engines look for CDI specs.
var DefaultSpecDirs = []string{cdi.DefaultStaticDir, cdi.DefaultDynamicDir}

// Options for Generate.
type Options struct {
	HookPath   string // vgpu-hook on the host, absolute
	ConfigPath string // given to the hook as VGPU_CONFIG unless it is the default
}

// planID stands in for a container id in the plans a spec is derived from.
const planID = "cdi"

// Generate returns the CDI spec for host (see the package comment).
func Generate(cfg *config.Config, host *discover.Host, o Options) (*cdispecs.Spec, error) {
	if !filepath.IsAbs(o.HookPath) {
		return nil, fmt.Errorf("vgpu-hook path %q is not absolute", o.HookPath)
	}
	// Limits are the hook's business at create time; the defaults must not
	// make a plan fail here.
	c := *cfg
	c.Defaults = config.Defaults{}
	// The spec-wide edits are the time-sliced host parts; a spatial GPU's
	// device adds its MPS pipe and shm mounts and CUDA_MPS_PIPE_DIRECTORY
	// (the per-container client settings come from the quota file, which
	// the library reads: docs/spatial.md).
	common := c
	common.Spatial.GPUs = nil
	all, err := plan.New(&request.Request{All: true, DeviceSource: "the CDI spec"}, &common, host, planID)
	if err != nil {
		return nil, err
	}
	env, err := config.HookEnv(o.ConfigPath)
	if err != nil {
		return nil, err
	}
	timeout := 30
	raw := &cdispecs.Spec{
		Kind: Kind,
		ContainerEdits: cdispecs.ContainerEdits{
			Env:         append([]string(nil), all.Env...),
			DeviceNodes: nodes(all.CommonNodes()),
			Mounts:      mounts(all.HostMounts()),
			Hooks: []*cdispecs.Hook{
				{HookName: cdi.CreateContainerHook, Path: o.HookPath, Args: []string{"vgpu-hook", "createContainer", config.HookCDIFlag}, Env: env, Timeout: &timeout},
				{HookName: cdi.PoststopHook, Path: o.HookPath, Args: []string{"vgpu-hook", "poststop"}, Env: env, Timeout: &timeout},
			},
		},
	}
	for _, g := range host.GPUs {
		p, err := plan.New(&request.Request{Devices: []request.DeviceRef{{Index: g.Index}}, DeviceSource: "the CDI spec"}, &c, host, planID)
		if err != nil {
			return nil, err
		}
		edits := cdispecs.ContainerEdits{DeviceNodes: nodes(p.GPUNodes())}
		if p.Devices[0].Mode.IsSpatial() {
			var ms []plan.Mount
			for _, m := range p.HostMounts() {
				if m.Destination == contract.MPSPipeDir || m.Destination == plan.ContainerShm {
					ms = append(ms, m)
				}
			}
			edits.Mounts = mounts(ms)
			edits.Env = []string{tenant.EnvMPSPipe + "=" + contract.MPSPipeDir}
		}
		raw.Devices = append(raw.Devices,
			cdispecs.Device{Name: strconv.Itoa(g.Index), ContainerEdits: edits},
			cdispecs.Device{Name: g.UUID, ContainerEdits: edits})
	}
	raw.Devices = append(raw.Devices, cdispecs.Device{Name: AllDevices, ContainerEdits: cdispecs.ContainerEdits{DeviceNodes: nodes(all.GPUNodes())}})
	// The oldest version that has every field used: the most engines read it.
	if raw.Version, err = cdispecs.MinimumRequiredVersion(raw); err != nil {
		return nil, err
	}
	return raw, nil
}

func nodes(ns []discover.DeviceNode) []*cdispecs.DeviceNode {
	var out []*cdispecs.DeviceNode
	for _, n := range ns {
		mode, uid, gid := n.FileMode, n.UID, n.GID
		d := &cdispecs.DeviceNode{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor, FileMode: &mode, UID: &uid, GID: &gid}
		if n.HostPath != n.Path {
			d.HostPath = n.HostPath
		}
		out = append(out, d)
	}
	return out
}

func mounts(ms []plan.Mount) []*cdispecs.Mount {
	var out []*cdispecs.Mount
	for _, m := range ms {
		out = append(out, &cdispecs.Mount{HostPath: m.Source, ContainerPath: m.Destination, Type: "bind", Options: m.Options()})
	}
	return out
}

// WriteDir validates raw with the CDI library and writes it atomically as
// dir/name (name ends in .yaml or .json, which picks the encoding).
func WriteDir(raw *cdispecs.Spec, dir, name string) (string, error) {
	if ext := filepath.Ext(name); ext != ".yaml" && ext != ".json" {
		return "", fmt.Errorf("%s: a CDI spec file name ends in .yaml or .json", name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err := cache.WriteSpec(raw, name); err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	// The library writes 0600; engines read as root, but `vgpu cdi list`
	// and people may not.
	if err := os.Chmod(p, 0o644); err != nil {
		return "", err
	}
	return p, nil
}

// Marshal returns raw as the CDI library writes it (YAML), after validating it.
func Marshal(raw *cdispecs.Spec) ([]byte, error) {
	dir, err := os.MkdirTemp("", "vgpu-cdi-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p, err := WriteDir(raw, dir, FileName)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// Validate reads the spec file at path with the CDI library.
func Validate(path string) (*cdi.Spec, error) {
	return cdi.ReadSpec(path, 0)
}

// Entry is one device found in the spec directories.
type Entry struct {
	Name string // qualified: vendor/class=name
	Spec string // the file
}

// List returns the devices in dirs (later dirs take precedence, as in the
// engines) and the errors of the specs that could not be read.
func List(dirs []string) ([]Entry, error) {
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	var out []Entry
	for _, name := range cache.ListDevices() {
		e := Entry{Name: name}
		if d := cache.GetDevice(name); d != nil && d.GetSpec() != nil {
			e.Spec = d.GetSpec().GetPath()
		}
		out = append(out, e)
	}
	var errs []error
	paths := make([]string, 0)
	bad := cache.GetErrors()
	for p := range bad {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		var msgs []string
		for _, e := range bad[p] {
			msgs = append(msgs, e.Error())
		}
		errs = append(errs, fmt.Errorf("%s: %s", p, strings.Join(msgs, "; ")))
	}
	return out, errors.Join(errs...)
}

// The per-claim specs of the DRA driver (internal/dra): kind vgpu.io/claim,
// one device named by the claim's UID.
const (
	ClaimClass = "claim"
	ClaimKind  = Vendor + "/" + ClaimClass
)

// ClaimFileName is the file of claim uid's spec in a spec directory.
func ClaimFileName(uid string) string { return Vendor + "-" + ClaimClass + "-" + uid + ".json" }

// ClaimDeviceID is the qualified CDI name of claim uid's device.
func ClaimDeviceID(uid string) string { return ClaimKind + "=" + uid }

// ForPlan returns a CDI spec with one device, name, that gives a container
// everything p plans: every device node, every mount (the host's files and
// the state directory's quota (read-only), shared/ and ld.so.preload) and
// the environment. Unlike Generate's static spec it needs no hook: the
// caller ran the pipeline, so the state directory exists before any
// container that names the device is created.
func ForPlan(p *plan.Plan, kind, name string) (*cdispecs.Spec, error) {
	raw := &cdispecs.Spec{
		Kind: kind,
		Devices: []cdispecs.Device{{Name: name, ContainerEdits: cdispecs.ContainerEdits{
			Env:         append([]string(nil), p.Env...),
			DeviceNodes: nodes(p.Nodes),
			Mounts:      mounts(p.Mounts),
		}}},
	}
	var err error
	if raw.Version, err = cdispecs.MinimumRequiredVersion(raw); err != nil {
		return nil, err
	}
	return raw, nil
}
