// Package state is the host's store of running containers: one directory per
// container under state_dir (config.StateDir), created whole or not at all,
// and the lock that serializes creations with slot assignment
// (docs/design.md "State directory").
//
// The directory of container <id> holds config.StateInfo (container.json,
// Info: the container record), config.StateQuota (the quota file, rendered
// from the record for the library), config.StatePreload,
// config.StateShared/ (the library's shared region) and config.StateHost/
// (the grant file). Every reader takes the record from Read or List. It
// carries a format version; a container written by an older release stays
// readable (TestReadPreviousRelease).
//
// Create makes shared/ a plain directory; the shim or the hook then mounts a
// capped tmpfs on it (internal/apply), and Remove unmounts it first.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/borrow"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/slots"
)

// ValidID checks that a container id is usable as the name of its
// directory (config.ValidID).
func ValidID(id string) error { return config.ValidID(id) }

// Create makes <stateDir>/<id>/ with container.json (the record), the
// quota file rendered from it, ld.so.preload (preload), shared/ and host/,
// all at once: under the state directory's lock it admits the record's
// devices beside the other containers' and assigns the slots of its paced
// devices that have no phase (admit), then writes the files into a temp
// directory next to it, syncs them and renames it into place (never
// replacing an existing directory). On error nothing is left behind. It
// returns the record as written.
func Create(stateDir string, info Info, preload []byte) (*Info, error) {
	id := info.ID
	if err := ValidID(id); err != nil {
		return nil, err
	}
	info.Version = InfoVersion
	if info.Created.IsZero() {
		info.Created = time.Now().UTC()
	}
	info.Devices = append([]Device{}, info.Devices...)
	if err := os.MkdirAll(stateDir, 0o711); err != nil {
		return nil, err
	}
	unlock, err := Lock(stateDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := admitMode(stateDir, &info); err != nil {
		return nil, err
	}
	if err := admitMemory(stateDir, &info); err != nil {
		return nil, err
	}
	static, err := admit(stateDir, &info)
	if err != nil {
		return nil, err
	}
	grant, err := arbiter.Encode(static)
	if err != nil {
		return nil, err
	}
	qdata, err := info.Quota().Marshal()
	if err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	idata, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(stateDir, id)
	if _, err := os.Lstat(dir); err == nil {
		return nil, fmt.Errorf("state directory %s already exists (container id in use?)", dir)
	}
	cleanLeftovers(stateDir, id)
	tmp, err := os.MkdirTemp(stateDir, ".tmp-"+id+"-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	// Root only on the host: the container reaches its files through its
	// bind mounts, which do not pass this directory; a local user who could
	// would hang the container's new GPU processes on the lock file or
	// forge a slot in shared/.
	if err := os.Chmod(tmp, 0o700); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{config.StateQuota, qdata}, {config.StatePreload, preload}, {config.StateInfo, append(idata, '\n')}} {
		if err := writeSynced(filepath.Join(tmp, f.name), f.data, 0o644); err != nil {
			return nil, err
		}
	}
	shared := filepath.Join(tmp, config.StateShared)
	if err := os.Mkdir(shared, 0o777); err != nil {
		return nil, err
	}
	// Any user of the container writes the accounting region; sticky like /tmp.
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		return nil, err
	}
	// The host's files for the library (the pid map, internal/hostpids): a
	// directory, mounted read-only, so that the host's renames are seen.
	if err := os.Mkdir(filepath.Join(tmp, config.StateHost), 0o755); err != nil {
		return nil, err
	}
	if err := writeSynced(filepath.Join(tmp, config.StateHost, contract.ShareFile), grant, 0o644); err != nil {
		return nil, err
	}
	if err := syncPath(tmp); err != nil {
		return nil, err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE); err != nil {
		return nil, fmt.Errorf("rename %s to %s: %w", tmp, dir, err)
	}
	ok = true
	return &info, syncPath(stateDir)
}

// admit takes the record's devices onto their GPUs beside the tenants in
// stateDir (call it with the state directory locked): explicit compute
// requests must fit in 100 on each GPU (arbiter.Admit, an error naming the
// GPU, the sum and the holders); a device with no compute setting on a GPU
// where others hold requests gets request 0 (surplus only: otherwise no
// guarantee holds beside it); every paced device gets the share it holds
// while no arbitration runs (arbiter.Static) and, unless it has a phase
// already, a slot of that width next to the others' (internal/slots). It
// returns the grant file's admission words.
func admit(stateDir string, info *Info) ([]uint64, error) {
	period := info.ComputePeriodMS()
	others := heldOn(stateDir, period)
	static := make([]uint64, len(info.Devices))
	var narrowed []narrowing
	for i := range info.Devices {
		d := &info.Devices[i]
		on := others[d.GPU.UUID]
		var held []arbiter.Held
		explicit := false
		for _, o := range on {
			held = append(held, o.Held)
			explicit = explicit || o.Explicit
		}
		if d.ComputeRequest == nil && d.Compute == contract.ComputeUnlimited && explicit && period > 0 {
			zero := 0
			d.ComputeRequest = &zero
		}
		if err := arbiter.Admit(d.GPU.UUID, d.Request(), d.ComputeRequest != nil, held); err != nil {
			return nil, &AdmissionError{err}
		}
		if !d.Paced() {
			continue
		}
		share := arbiter.Static(d.Request(), held)
		narrowed = append(narrowed, narrowSurplus(on, d.Request())...)
		if d.Phase == nil && period > 0 {
			var taken []slots.Slot
			for _, o := range on {
				if o.slot != nil {
					taken = append(taken, *o.slot)
				}
			}
			ph := slots.Pick(width(share), taken)
			d.Phase = &ph
		}
		ph := -1
		if d.Phase != nil {
			ph = *d.Phase * 100
		}
		static[i] = arbiter.Word(share, ph)
	}
	for _, n := range narrowed {
		n.write()
	}
	return static, nil
}

// admitMode refuses to mix modes on one GPU and users on a spatial one (call
// it with the state directory locked). The mode is the GPU's (config
// spatial.gpus), so a mix means live containers from before the config
// changed; a spatial GPU's MPS control daemon runs one server per user,
// and a second user's clients would wait until the first user's are gone.
func admitMode(stateDir string, info *Info) error {
	on := map[string]bool{}
	for _, d := range info.Devices {
		on[d.GPU.UUID] = d.Spatial
	}
	uid := info.UID
	all, _ := List(stateDir)
	for _, e := range all {
		if e.Err != nil || gone(e.Info) {
			continue
		}
		other := e.Info
		for _, d := range other.Devices {
			spatial, ok := on[d.GPU.UUID]
			switch {
			case !ok:
			case spatial && !d.Spatial:
				return &AdmissionError{fmt.Errorf("GPU %s is spatial (config spatial.gpus) but container %s runs on it time sliced, created before the GPU was made spatial: stop it first, or take the GPU out of spatial.gpus", d.GPU.UUID, other.ID)}
			case !spatial && d.Spatial:
				return &AdmissionError{fmt.Errorf("GPU %s is time sliced (not in config spatial.gpus) but container %s runs on it spatially (MPS), created while the GPU was spatial: stop it first, or put the GPU back in spatial.gpus", d.GPU.UUID, other.ID)}
			case spatial && uid != nil && other.UID != nil && *uid != *other.UID:
				return &AdmissionError{fmt.Errorf("GPU %s is spatial (MPS) and container %s runs on it as user %d: MPS serves one user per GPU at a time (a second user's processes would wait for the first's to end), and this container runs as user %d; run it as user %d, or on another GPU", d.GPU.UUID, other.ID, *other.UID, *uid, *other.UID)}
			}
		}
	}
	return nil
}

// admitMemory checks that info's explicit memory requests fit in their
// GPUs' memory beside those of the live tenants in stateDir (borrow.Admit).
func admitMemory(stateDir string, info *Info) error {
	var held map[string][]borrow.Held
	for _, d := range info.Devices {
		if d.MemoryRequest == 0 {
			continue
		}
		if held == nil {
			held = memoryHeldOn(stateDir)
		}
		if err := borrow.Admit(d.GPU.UUID, d.GPU.MemoryBytes, d.MemoryRequest, held[d.GPU.UUID]); err != nil {
			return &AdmissionError{err}
		}
	}
	return nil
}

// memoryHeldOn returns, per GPU UUID, the explicit memory requests of the
// live containers in stateDir.
func memoryHeldOn(stateDir string) map[string][]borrow.Held {
	out := map[string][]borrow.Held{}
	all, _ := List(stateDir)
	for _, e := range all {
		if e.Err != nil || gone(e.Info) {
			continue
		}
		for _, d := range e.Info.Devices {
			if d.MemoryRequest > 0 {
				out[d.GPU.UUID] = append(out[d.GPU.UUID], borrow.Held{ID: e.Info.ID, Request: d.MemoryRequest})
			}
		}
	}
	return out
}

// AdmissionError: the container does not fit on a GPU (requests past it, a
// mix of modes).
type AdmissionError struct{ Err error }

func (e *AdmissionError) Error() string { return e.Err.Error() }
func (e *AdmissionError) Unwrap() error { return e.Err }

// narrowSurplus narrows the admission share and slot of the request-0
// tenants in on to what the requests leave once one more of request joins
// them (arbiter.Static). Admitted alone beside the requests, such a tenant
// took all that was left; without `vgpu node` it runs in that slot, so a
// later tenant's slot would overlap it and the shares sum past 100 %. Its
// slot keeps its start and only ends earlier, so it overlaps no one; the
// library reads the word at each period. It does not widen again when the
// newcomer leaves (a restart does). A grant file that cannot be mapped is
// left as it is: a slot shared by mistake costs accuracy, never a limit.
// The words are written once the whole container is admitted (write).
func narrowSurplus(on []Tenant, request int) []narrowing {
	var out []narrowing
	for k := range on {
		t := &on[k]
		if t.Request != 0 || t.slot == nil || t.grant == "" {
			continue
		}
		held := []arbiter.Held{{Request: request}}
		for j, o := range on {
			if j != k {
				held = append(held, o.Held)
			}
		}
		share := arbiter.Static(0, held)
		if width(share) >= t.slot.Width {
			continue
		}
		out = append(out, narrowing{t.grant, t.dev, arbiter.Word(share, t.slot.Start*100)})
		t.slot.Width = width(share)
	}
	return out
}

// narrowing is one admission word narrowSurplus rewrites.
type narrowing struct {
	grant string
	dev   int
	word  uint64
}

func (n narrowing) write() {
	m, err := arbiter.Map(n.grant)
	if err != nil {
		return
	}
	m.SetStatic(n.dev, n.word)
	m.Close()
}

// width is a slot's width in percent for a share in basis points.
func width(share int) int { return min(max((share+99)/100, 1), 100) }

// Tenant is one device of another container on a GPU, as admission sees it.
type Tenant struct {
	arbiter.Held
	slot  *slots.Slot // with the same period only
	grant string      // its grant file, when it has a slot
	dev   int         // its index there
}

// heldOn returns, per GPU UUID, the devices of the live containers in
// stateDir that hold a compute request (paced, or an explicit one).
func heldOn(stateDir string, period int) map[string][]Tenant {
	out := map[string][]Tenant{}
	all, _ := List(stateDir)
	for _, e := range all {
		info := e.Info
		if e.Err != nil || gone(info) {
			continue
		}
		g, _ := arbiter.Read(filepath.Join(stateDir, e.ID, config.StateHost, contract.ShareFile))
		for i, d := range info.Devices {
			if !d.Paced() && d.ComputeRequest == nil {
				continue
			}
			t := Tenant{Held: arbiter.Held{ID: info.ID, Request: d.Request(), Explicit: d.ComputeRequest != nil}}
			if d.Phase != nil && d.Paced() && info.ComputePeriodMS() == period {
				w := d.Compute
				if g != nil && i < len(g.Static) && g.Static[i] != 0 {
					sh, _ := arbiter.Unword(g.Static[i])
					w = width(sh)
				}
				t.slot = &slots.Slot{Start: *d.Phase, Width: w}
				t.grant, t.dev = filepath.Join(stateDir, e.ID, config.StateHost, contract.ShareFile), i
			}
			out[d.GPU.UUID] = append(out[d.GPU.UUID], t)
		}
	}
	return out
}

// Taken returns the slots of the containers in stateDir paced with period, per
// GPU UUID. A sibling whose state cannot be read is passed over: it is either
// being removed or not ours to judge, and a slot shared by mistake costs only
// accuracy, never a limit.
func Taken(stateDir string, period int) map[string][]slots.Slot {
	taken := map[string][]slots.Slot{}
	for uuid, ts := range heldOn(stateDir, period) {
		for _, t := range ts {
			if t.slot != nil {
				taken[uuid] = append(taken[uuid], *t.slot)
			}
		}
	}
	return taken
}

// gone: the container's init process, recorded at start, no longer exists
// (killed and never deleted: `vgpu status` shows it stale). A container not
// started yet has no pid and keeps its slot; a reused pid keeps it too.
func gone(info *Info) bool {
	return len(info.PIDs) > 0 && info.PIDs[0] > 0 && unix.Kill(info.PIDs[0], 0) == unix.ESRCH
}

// Lock takes the state directory's lock file, config.StateLock (flock, released when
// the process dies too).
func Lock(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, config.StateLock), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("state lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

func writeSynced(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Remove removes <stateDir>/<id>; a missing directory is not an error.
func Remove(stateDir, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	dir := filepath.Join(stateDir, id)
	if err := unmountShared(dir); err != nil { // the capped tmpfs (apply/sharedfs.go)
		return fmt.Errorf("unmount %s: %w", filepath.Join(dir, config.StateShared), err)
	}
	// Rename first so that a half-removed directory is never seen under the id.
	gone := filepath.Join(stateDir, fmt.Sprintf(".rm-%s-%d", id, time.Now().UnixNano()))
	if err := os.Rename(dir, gone); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			cleanLeftovers(stateDir, id)
			return nil
		}
		return err
	}
	cleanLeftovers(stateDir, id)
	return os.RemoveAll(gone)
}

// cleanLeftovers removes what an interrupted Create of id left behind (a
// .tmp-<id>-* directory: the creator was killed between MkdirTemp and the
// rename). Create holds the state directory's lock, so none of them is
// being written now; a Remove of id runs once its container is gone.
func cleanLeftovers(stateDir, id string) {
	for _, dir := range leftovers(stateDir, id) {
		_ = unmountShared(dir) // the capped tmpfs, if the create got that far
		_ = os.RemoveAll(dir)
	}
}

// HasLeftovers says whether an interrupted Create of id left a directory
// behind (Remove removes it).
func HasLeftovers(stateDir, id string) bool {
	return ValidID(id) == nil && len(leftovers(stateDir, id)) > 0
}

func leftovers(stateDir, id string) []string {
	ents, _ := os.ReadDir(stateDir)
	prefix := ".tmp-" + id + "-"
	var out []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		// MkdirTemp's suffix is digits only: ".tmp-a-1" is not a leftover of "a-1"
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		out = append(out, filepath.Join(stateDir, e.Name()))
	}
	return out
}

// SetPIDs records host pids in container.json (atomically).
func SetPIDs(stateDir, id string, pids []int) error {
	return update(stateDir, id, func(info *Info) { info.PIDs = pids })
}

// SetInit records the container's init (host pid and start time) and its
// cgroup in container.json (atomically). A cgroup recorded already is kept:
// it was read before the container's own code ran, and a later look could
// see the init moved into a cgroup the tenant made below it.
func SetInit(stateDir, id string, pid int, start uint64, cgroup string) error {
	return update(stateDir, id, func(info *Info) {
		info.PIDs, info.InitStart = []int{pid}, start
		if info.Cgroup == "" {
			info.Cgroup = cgroup
		}
	})
}

// SetDriverLimits records what holds the container's memory limits.
func SetDriverLimits(stateDir, id string, d *DriverLimits) error {
	return update(stateDir, id, func(info *Info) { info.DriverLimits = d })
}

// update edits container.json as it is on disk: a record of an older
// version keeps its version and members.
func update(stateDir, id string, edit func(*Info)) error {
	if err := ValidID(id); err != nil {
		return err
	}
	info, err := readInfo(filepath.Join(stateDir, id))
	if err != nil {
		return err
	}
	edit(info)
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(stateDir, id)
	tmp, err := os.CreateTemp(dir, ".container.json-")
	if err != nil {
		return err
	}
	name := tmp.Name()
	tmp.Close()
	os.Remove(name)
	if err := writeSynced(name, append(data, '\n'), 0o644); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Rename(name, filepath.Join(dir, config.StateInfo)); err != nil {
		os.Remove(name)
		return err
	}
	return syncPath(dir)
}

// unmountShared takes the capped tmpfs the shim or the hook mounted
// (internal/apply) off <dir>/shared, if one is there.
func unmountShared(dir string) error {
	shared := filepath.Join(dir, config.StateShared)
	var d, sh unix.Stat_t
	if unix.Lstat(dir, &d) != nil || unix.Lstat(shared, &sh) != nil || d.Dev == sh.Dev {
		return nil // no mount point there: nothing to ask the kernel (which refuses a non-root caller)
	}
	err := unix.Unmount(shared, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // not a mount point (vgpu exec, a state of an older release, or never mounted)
	}
	return err
}
