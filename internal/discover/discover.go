// Package discover finds what the host has: the driver's files under the
// configured driver root, the GPUs (go-nvml against the driver's own
// libnvidia-ml; needs cgo) and their device nodes. It decides nothing.
package discover

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/devices"

	"github.com/vgpu-dev/vgpu/internal/config"
)

// GPU is one physical GPU as NVML reports it.
type GPU struct {
	Index       int    `json:"index"` // NVML index on the host
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	Minor       int    `json:"minor"` // /dev/nvidia<Minor>
	MemoryBytes uint64 `json:"memoryBytes"`
	PCIBusID    string `json:"pciBusId,omitempty"`
}

// HostFile is a file found under the driver root.
type HostFile struct {
	Name string `json:"name"` // base name
	Path string `json:"path"` // absolute host path
}

// DeviceNode is a character device on the host, as runc needs it.
type DeviceNode struct {
	Path     string      `json:"path"`     // in the container: /dev/nvidia0
	HostPath string      `json:"hostPath"` // on the host: <dev_root>/dev/nvidia0
	Type     string      `json:"type"`     // "c"
	Major    int64       `json:"major"`
	Minor    int64       `json:"minor"`
	FileMode os.FileMode `json:"fileMode"`
	UID      uint32      `json:"uid"`
	GID      uint32      `json:"gid"`
}

// Host is everything discovered about the host's driver and GPUs.
type Host struct {
	DriverVersion string       `json:"driverVersion"` // from libcuda.so.<version>
	Libraries     []HostFile   `json:"libraries"`     // lib<name>.so.<version> found, config order
	Binaries      []HostFile   `json:"binaries"`
	IPCPaths      []HostIPC    `json:"ipcPaths"` // existing ones
	GPUs          []GPU        `json:"gpus"`     // NVML index order
	Nodes         []DeviceNode `json:"nodes"`    // control nodes, then /dev/nvidia<minor> of every GPU
}

// HostIPC is an existing IPC path, relative to the driver root.
type HostIPC struct {
	Rel string `json:"rel"`
	Dir bool   `json:"dir"`
}

// Lister enumerates GPUs through the driver's NVML library at nvmlPath.
type Lister interface {
	ListGPUs(nvmlPath string) ([]GPU, error)
}

// ControlNodes are the device nodes every GPU container needs, in order;
// the bool says whether a missing node is an error.
var ControlNodes = []struct {
	Name     string
	Required bool
}{{"nvidiactl", true}, {"nvidia-uvm", true}, {"nvidia-uvm-tools", false}}

// Discover finds the driver files under cfg.Driver.Root and lists the GPUs
// with go-nvml against the driver's own libnvidia-ml: in the process with
// cgo, else through the vgpu-discover helper, whose list is remembered in
// the state directory (nvml_nocgo.go, cache.go).
func Discover(cfg *config.Config) (*Host, error) {
	return DiscoverWith(cfg, defaultLister(cfg))
}

// libcudaVersion returns <version> of a name libcuda.so.<version>, where
// the version is two or more dot-separated decimal numbers (580.95.05).
// Not a regexp: vgpu-runtime links this package and starts for every
// container, and regexp brings the unicode tables' package init.
func libcudaVersion(name string) (string, bool) {
	v, ok := strings.CutPrefix(name, "libcuda.so.")
	if !ok || !strings.Contains(v, ".") {
		return "", false
	}
	for _, part := range strings.Split(v, ".") {
		if part == "" || strings.Trim(part, "0123456789") != "" {
			return "", false
		}
	}
	return v, true
}

// DriverFiles finds the driver version, libraries, binaries and IPC paths.
func DriverFiles(cfg *config.Config) (*Host, error) {
	h := &Host{}
	var searched []string
	for _, d := range cfg.Driver.LibDirs {
		dir := cfg.DriverPath(d)
		searched = append(searched, dir)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		var vers []string
		for _, e := range ents {
			if v, ok := libcudaVersion(e.Name()); ok {
				vers = append(vers, v)
			}
		}
		if len(vers) > 1 {
			sort.Strings(vers)
			return nil, fmt.Errorf("%s holds libcuda.so of several driver versions (%s); remove the stale ones", dir, strings.Join(vers, ", "))
		}
		if len(vers) == 1 {
			h.DriverVersion = vers[0]
			break
		}
	}
	if h.DriverVersion == "" {
		return nil, fmt.Errorf("no libcuda.so.<version> under driver root %s (searched %s); set driver.root / driver.lib_dirs in %s", cfg.Driver.Root, strings.Join(searched, ", "), config.Path())
	}
	for _, lib := range cfg.Driver.Libraries {
		name := lib + ".so." + h.DriverVersion
		for _, d := range cfg.Driver.LibDirs {
			p := filepath.Join(cfg.DriverPath(d), name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				h.Libraries = append(h.Libraries, HostFile{Name: name, Path: p})
				break
			}
		}
	}
	for _, need := range []string{"libcuda", "libnvidia-ml"} {
		if h.Library(need) == nil {
			return nil, fmt.Errorf("driver %s: %s.so.%s not found in %s", h.DriverVersion, need, h.DriverVersion, strings.Join(searched, ", "))
		}
	}
	for _, b := range cfg.Driver.Binaries {
		for _, d := range cfg.Driver.BinDirs {
			p := filepath.Join(cfg.DriverPath(d), b)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				h.Binaries = append(h.Binaries, HostFile{Name: b, Path: p})
				break
			}
		}
	}
	for _, p := range cfg.Driver.IPCPaths {
		if fi, err := os.Stat(cfg.DriverPath(p)); err == nil {
			h.IPCPaths = append(h.IPCPaths, HostIPC{Rel: filepath.Clean(p), Dir: fi.IsDir()})
		}
	}
	return h, nil
}

// Library returns the library lib<name>.so.<version>, or nil.
func (h *Host) Library(name string) *HostFile {
	for i := range h.Libraries {
		if h.Libraries[i].Name == name+".so."+h.DriverVersion {
			return &h.Libraries[i]
		}
	}
	return nil
}

// DiscoverWith is Discover with another GPU lister (tests, other backends).
func DiscoverWith(cfg *config.Config, l Lister) (*Host, error) {
	h, err := DriverFiles(cfg)
	if err != nil {
		return nil, err
	}
	gpus, err := l.ListGPUs(h.Library("libnvidia-ml").Path)
	if err != nil {
		return nil, err
	}
	if len(gpus) == 0 {
		return nil, errors.New("NVML reports no GPU")
	}
	h.GPUs = gpus
	for _, c := range ControlNodes {
		n, err := Node(cfg, c.Name)
		if errors.Is(err, os.ErrNotExist) && !c.Required {
			continue
		}
		if err != nil {
			if c.Name == "nvidia-uvm" && errors.Is(err, os.ErrNotExist) {
				err = fmt.Errorf("%w (load the nvidia-uvm module and create its nodes: nvidia-modprobe -u -c=0)", err)
			}
			return nil, err
		}
		h.Nodes = append(h.Nodes, n)
	}
	for _, g := range gpus {
		n, err := Node(cfg, fmt.Sprintf("nvidia%d", g.Minor))
		if err != nil {
			return nil, fmt.Errorf("GPU %d (%s): %w", g.Index, g.UUID, err)
		}
		h.Nodes = append(h.Nodes, n)
	}
	return h, nil
}

// Node reads the device node /dev/<name> under the configured dev root.
func Node(cfg *config.Config, name string) (DeviceNode, error) {
	hp := cfg.DevPath(name)
	d, err := devices.DeviceFromPath(hp, "rwm")
	if err != nil {
		if errors.Is(err, devices.ErrNotADevice) {
			return DeviceNode{}, fmt.Errorf("%s is not a device node", hp)
		}
		if errors.Is(err, os.ErrNotExist) {
			return DeviceNode{}, fmt.Errorf("device node %s: %w (is the NVIDIA driver loaded? nvidia-smi on the host creates its nodes; nvidia-modprobe -c=0 too)", hp, err)
		}
		return DeviceNode{}, fmt.Errorf("device node %s: %w", hp, err)
	}
	if d.Type != 'c' {
		return DeviceNode{}, fmt.Errorf("%s is not a character device", hp)
	}
	return DeviceNode{
		Path: "/dev/" + name, HostPath: hp, Type: "c",
		Major: d.Major, Minor: d.Minor, FileMode: d.FileMode, UID: d.Uid, GID: d.Gid,
	}, nil
}
