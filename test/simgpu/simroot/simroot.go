// Package simroot lays out driver roots for the simulated GPU (test/simgpu).
//
// A root is a directory shaped like a host with the NVIDIA driver installed
// (docs/design.md, "Simulated GPU"):
//
//	usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05 (+ .so.1, .so links)
//	usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05 (+ links)
//	usr/bin/nvidia-smi
//	dev/nvidia0..N-1, dev/nvidiactl, dev/nvidia-uvm, dev/nvidia-uvm-tools
//	run/simgpu/config   (run/simgpu/state appears on first use)
//
// The simulated libraries find run/simgpu relative to their own location, so a
// process that loads <root>/usr/lib/x86_64-linux-gnu/libcuda.so.1 by path uses
// that root without any environment. The built libraries are taken from
// $VGPU_BUILD/simgpu (default: <repo>/build/simgpu; run `make c-build`).
package simroot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DriverVersion is the version the simulated driver reports.
const DriverVersion = "580.95.05"

// DriverR615 is the version of the simulated r615 driver (Options.R615):
// its NVML has the per-cgroup memory limits, nvmlDevice{Set,Get}MemoryLimits_v1.
const DriverR615 = "615.00.00"

// Device describes one simulated GPU. Zero fields get defaults.
type Device struct {
	Name        string // default "NVIDIA H100 (simulated)"; may contain spaces, not '_'
	UUID        string // default GPU-5e3b6a2e-0000-4000-8000-<index as 12 hex digits>
	MemoryBytes uint64 // default 16 GiB
	// ReservedBytes is the memory the driver keeps of its own: NVML's
	// total and its version-1 used figure count it, no process lists it,
	// no allocation gets it (an H200 on driver 580: 616 MiB). Default 0.
	ReservedBytes uint64
	SMs           int    // default 132
	PCIBusID      string // default 0000:<0x19+index>:00.0
}

// Options of a root. No devices means one default device.
type Options struct {
	Devices       []Device
	ContextMemory uint64 // bytes each CUDA context costs; default 256 MiB
	// R615: the driver is the r615 build (DriverR615), whose NVML takes
	// per-cgroup memory limits; else DriverVersion, which has no such call.
	R615 bool
	// CgroupV2Only: the r615 driver refuses limits unless the host's
	// cgroup v2 hierarchy is the one at /sys/fs/cgroup (unified mode), as
	// a driver or toolkit that does not take a hybrid host would.
	CgroupV2Only bool
}

// Root is a created driver root.
type Root struct {
	dir     string
	devices []Device
	version string
}

// Version is the driver version of the root's libraries.
func (r *Root) Version() string { return r.version }

// DefaultUUID is the UUID a device at index i gets when none is given.
func DefaultUUID(i int) string { return fmt.Sprintf("GPU-5e3b6a2e-0000-4000-8000-%012x", i) }

// BuildDir returns the directory holding the built simulator ($VGPU_BUILD/simgpu).
func BuildDir() (string, error) {
	b := os.Getenv("VGPU_BUILD")
	if b == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		for d := wd; ; d = filepath.Dir(d) {
			if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(data), "module github.com/vgpu-dev/vgpu\n") {
				b = filepath.Join(d, "build")
				break
			}
			if filepath.Dir(d) == d {
				return "", errors.New("simroot: VGPU_BUILD not set and repository root not found")
			}
		}
	}
	dir := filepath.Join(b, "simgpu")
	if _, err := os.Stat(filepath.Join(dir, "lib", "libcuda.so."+DriverVersion)); err != nil {
		return "", fmt.Errorf("simroot: simulated driver not built in %s (run make c-build or set VGPU_BUILD): %w", dir, err)
	}
	return dir, nil
}

// Create lays out a fresh root in dir (created if missing; must not already hold a root).
func Create(dir string, opts Options) (*Root, error) {
	src, err := BuildDir()
	if err != nil {
		return nil, err
	}
	devs := opts.Devices
	if len(devs) == 0 {
		devs = []Device{{}}
	}
	devs = append([]Device(nil), devs...)
	for i := range devs {
		d := &devs[i]
		if d.Name == "" {
			d.Name = "NVIDIA H100 (simulated)"
		}
		if strings.ContainsAny(d.Name, "_\t\n") {
			return nil, fmt.Errorf("simroot: device name %q: '_' and control characters cannot be expressed in the config", d.Name)
		}
		if d.UUID == "" {
			d.UUID = DefaultUUID(i)
		}
		if d.MemoryBytes == 0 {
			d.MemoryBytes = 16 << 30
		}
		if d.SMs == 0 {
			d.SMs = 132
		}
		if d.PCIBusID == "" {
			d.PCIBusID = fmt.Sprintf("0000:%02x:00.0", 0x19+i)
		}
	}
	ctxMem := opts.ContextMemory
	if ctxMem == 0 {
		ctxMem = 256 << 20
	}
	r := &Root{dir: dir, devices: devs, version: DriverVersion}
	libSrc := filepath.Join(src, "lib")
	if opts.R615 {
		r.version, libSrc = DriverR615, filepath.Join(src, "r615", "lib")
	}
	for _, d := range []string{r.LibDir(), filepath.Join(dir, "usr", "bin"), r.SimDir(), r.DevDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// containers may run as another user: the state file is created there
	if err := os.Chmod(r.SimDir(), 0o1777); err != nil {
		return nil, err
	}
	for _, lib := range []string{"libcuda", "libnvidia-ml"} {
		real := lib + ".so." + r.version
		if err := copyFile(filepath.Join(libSrc, real), filepath.Join(r.LibDir(), real), 0o755); err != nil {
			return nil, err
		}
		if err := os.Symlink(real, filepath.Join(r.LibDir(), lib+".so.1")); err != nil {
			return nil, err
		}
		if err := os.Symlink(lib+".so.1", filepath.Join(r.LibDir(), lib+".so")); err != nil {
			return nil, err
		}
	}
	if err := copyFile(filepath.Join(src, "bin", "nvidia-smi"), filepath.Join(dir, "usr", "bin", "nvidia-smi"), 0o755); err != nil {
		return nil, err
	}
	// the simulated MPS control program (test/simgpu/mpsd), built by make
	// go-build: a root made before it was built has none
	if mps := filepath.Join(src, "bin", "nvidia-cuda-mps-control"); fileExists(mps) {
		if err := copyFile(mps, filepath.Join(dir, "usr", "bin", "nvidia-cuda-mps-control"), 0o755); err != nil {
			return nil, err
		}
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "simgpu 1\ncontext-memory %d\n", ctxMem)
	// Processes name their cgroup relative to the host's cgroup v2 mount
	// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host).
	if root := CgroupV2Root(); root != "" {
		fmt.Fprintf(&cfg, "cgroup-root %s\n", root)
	}
	if opts.CgroupV2Only {
		cfg.WriteString("cgroup-v2-only\n")
	}
	for i, d := range devs {
		fmt.Fprintf(&cfg, "device name=%s uuid=%s memory=%d sms=%d pci=%s minor=%d",
			strings.ReplaceAll(d.Name, " ", "_"), d.UUID, d.MemoryBytes, d.SMs, d.PCIBusID, i)
		if d.ReservedBytes > 0 {
			fmt.Fprintf(&cfg, " reserved=%d", d.ReservedBytes)
		}
		cfg.WriteString("\n")
	}
	if err := os.WriteFile(filepath.Join(r.SimDir(), "config"), []byte(cfg.String()), 0o644); err != nil {
		return nil, err
	}
	nodes := map[string][2]uint32{"nvidiactl": {60, 255}, "nvidia-uvm": {61, 0}, "nvidia-uvm-tools": {61, 1}}
	for i := range devs {
		nodes[fmt.Sprintf("nvidia%d", i)] = [2]uint32{60, uint32(i)}
	}
	for name, mm := range nodes {
		if err := makeNode(filepath.Join(r.DevDir(), name), mm[0], mm[1]); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// makeNode creates a char node when allowed and usable (open gives ENXIO), else
// a regular file, which the simulator treats the same (reachable).
func makeNode(path string, major, minor uint32) error {
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err == nil {
		_ = os.Chmod(path, 0o666)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			return nil
		}
		if errors.Is(err, unix.ENXIO) {
			return nil
		}
		os.Remove(path) // e.g. EPERM under a device cgroup: fall back
	}
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		return err
	}
	return os.Chmod(path, 0o666)
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Dir is the root directory.
func (r *Root) Dir() string { return r.dir }

// LibDir holds libcuda.so.1 and libnvidia-ml.so.1.
func (r *Root) LibDir() string { return filepath.Join(r.dir, "usr", "lib", "x86_64-linux-gnu") }

// SimDir is run/simgpu (config and shared state).
func (r *Root) SimDir() string { return filepath.Join(r.dir, "run", "simgpu") }

// DevDir holds the device nodes.
func (r *Root) DevDir() string { return filepath.Join(r.dir, "dev") }

// NodePath is the device node of device i (remove it to hide the device).
func (r *Root) NodePath(i int) string { return filepath.Join(r.DevDir(), fmt.Sprintf("nvidia%d", i)) }

// Devices returns the devices with defaults filled in.
func (r *Root) Devices() []Device { return append([]Device(nil), r.devices...) }

// Env is the environment for host-side use of this root: SIMGPU_DIR points
// the libraries at it wherever they are loaded from, LD_LIBRARY_PATH makes
// dlopen("libcuda.so.1") find them. Append to os.Environ().
func (r *Root) Env() []string {
	return []string{"SIMGPU_DIR=" + r.SimDir(), "LD_LIBRARY_PATH=" + r.LibDir()}
}

// CgroupV2Root is where this host mounts its cgroup v2 hierarchy ("" when
// it does not): /sys/fs/cgroup in unified mode, /sys/fs/cgroup/unified on a
// hybrid host (CI's and the development machine's).
func CgroupV2Root() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		for i := 6; i+1 < len(f); i++ {
			if f[i] == "-" {
				if f[i+1] == "cgroup2" {
					return f[4]
				}
				break
			}
		}
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
