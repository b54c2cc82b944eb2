package discover

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/vgpu-dev/vgpu/internal/cachefile"
)

// The GPU list of a binary built without cgo (vgpu-runtime) comes from the
// vgpu-discover helper: a second process start and the driver's NVML init
// for every container that asks for a GPU, most of what such a container's
// start cost beyond runc's. The list changes with the hardware and the
// driver, not between two containers, so CachingLister remembers it in a
// private record in the state directory (config.StateGPUs, written and read
// through internal/cachefile: root's own 0600 file, anything else ignored)
// under a key of everything the list depends on; a record for another key
// is listed again and replaced.

// gpuCacheFormat heads every key: bump it when the meaning of a GPU's
// members changes (a new member changes the key by itself: gpuFields).
const gpuCacheFormat = "vgpu gpu list 1"

// Where the key's host facts are read; tests point them elsewhere.
var (
	bootIDPath = "/proc/sys/kernel/random/boot_id" // a new one at every boot
	modulePath = "/sys/module/nvidia"              // a new directory (inode) at every load of the kernel module
)

// CachingLister is Lister with its list remembered in the record at Path,
// valid while the key stays the same: this boot, the same NVML library file
// and listing program (path, size, mtime, inode: a driver or vgpu upgrade),
// the same load of the nvidia kernel module, the same nvidia* entries under
// DevDir (a GPU or node added, removed or made again), the same GPU members.
// A failed listing is never remembered; a record that cannot be written
// costs the next container another listing, nothing else.
type CachingLister struct {
	Lister   Lister
	Path     string // the record (<state_dir>/.gpus); "": no record, Lister every time
	DevDir   string // <dev_root>/dev
	Producer string // the listing program (vgpu-discover), part of the key; "": none
}

type gpuRecord struct {
	Key  string `json:"key"`
	GPUs []GPU  `json:"gpus"`
}

// ListGPUs returns the remembered list when its key is current, else lists
// with Lister and remembers the result.
func (c CachingLister) ListGPUs(nvmlPath string) ([]GPU, error) {
	if c.Path == "" {
		return c.Lister.ListGPUs(nvmlPath)
	}
	// The key is taken before listing: a change during the listing leaves a
	// record under the old key, which the next container does not match.
	key, keyErr := c.key(nvmlPath)
	if keyErr == nil {
		if gpus, ok := readGPURecord(c.Path, key); ok {
			return gpus, nil
		}
	}
	gpus, err := c.Lister.ListGPUs(nvmlPath)
	if err != nil || keyErr != nil || len(gpus) == 0 {
		return gpus, err
	}
	if data, err := json.Marshal(gpuRecord{Key: key, GPUs: gpus}); err == nil {
		_ = cachefile.Write(c.Path, data) // best effort
	}
	return gpus, nil
}

// readGPURecord returns the list recorded at path for key, if there is a
// trusted, well-formed one.
func readGPURecord(path, key string) ([]GPU, bool) {
	data, err := cachefile.Read(path)
	if err != nil {
		return nil, false
	}
	var r gpuRecord
	if json.Unmarshal(data, &r) != nil || r.Key != key || len(r.GPUs) == 0 {
		return nil, false
	}
	for i, g := range r.GPUs {
		if g.Index != i || g.Minor < 0 || g.UUID == "" {
			return nil, false // never written so: not ours
		}
	}
	return r.GPUs, true
}

// key is what the list depends on, one fact a line (CachingLister).
func (c CachingLister) key(nvmlPath string) (string, error) {
	var b strings.Builder
	b.WriteString(gpuCacheFormat + "\nfields " + gpuFields() + "\n")
	boot, err := os.ReadFile(bootIDPath)
	if err != nil {
		return "", err
	}
	b.WriteString("boot " + strings.TrimSpace(string(boot)) + "\n")
	for _, f := range []string{nvmlPath, c.Producer} {
		if f == "" {
			continue
		}
		id, err := cachefile.Identity(f)
		if err != nil {
			return "", err
		}
		b.WriteString("file " + id + "\n")
	}
	var st syscall.Stat_t
	switch err := syscall.Stat(modulePath, &st); {
	case err == nil:
		b.WriteString("module " + strconv.FormatUint(st.Ino, 10) + " " + nsec(st.Ctim) + "\n")
	case errors.Is(err, syscall.ENOENT):
		b.WriteString("module none\n") // not loaded (or a simulated driver)
	default:
		return "", &os.PathError{Op: "stat", Path: modulePath, Err: err}
	}
	d, err := os.Open(c.DevDir)
	if err != nil {
		return "", err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		if !strings.HasPrefix(n, "nvidia") {
			continue
		}
		if err := syscall.Lstat(c.DevDir+"/"+n, &st); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue // gone since the listing: not in the key
			}
			return "", &os.PathError{Op: "lstat", Path: c.DevDir + "/" + n, Err: err}
		}
		b.WriteString("dev " + n + " " + strconv.FormatUint(uint64(st.Mode), 8) + " " + strconv.FormatUint(st.Rdev, 10) + " " +
			strconv.FormatUint(st.Ino, 10) + " " + nsec(st.Mtim) + " " + nsec(st.Ctim) + "\n")
	}
	return b.String(), nil
}

func nsec(t syscall.Timespec) string { return strconv.FormatInt(t.Sec*1e9+t.Nsec, 10) }

// gpuFields names GPU's JSON members in order: a release that adds one reads
// no record of an earlier release.
func gpuFields() string {
	t := reflect.TypeOf(GPU{})
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return strings.Join(names, ",")
}
