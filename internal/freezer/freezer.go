// Package freezer freezes and thaws a container's cgroup from the host:
// cgroup v1 (freezer.state in the freezer hierarchy) and v2 (cgroup.freeze).
//
// It is the same freezer `docker pause` and `runc pause` use, so the
// freezer never thaws a cgroup it did not freeze: Thaw of a cgroup this
// Freezer has no record of freezing does nothing, and Freeze of a cgroup
// already frozen (by someone else) records nothing, so that the later Thaw
// leaves it as its owner wants.
package freezer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/google/renameio/v2"
	"golang.org/x/sys/unix"
)

// Freezer acts on cgroups under Root (default /sys/fs/cgroup).
type Freezer struct {
	// Root of the cgroup filesystem: v1 hosts have the freezer hierarchy at
	// Root/freezer, v2 hosts the unified one at Root.
	Root string
	// Record: a file that lists, durably, the cgroups we froze and have not
	// thawed ("" = none), written before each freeze and after each thaw:
	// a daemon killed with SIGKILL, or the host's power, never leaves a
	// container frozen for good: Recover at the next start (and
	// `vgpu node --thaw`, the unit's ExecStopPost) thaws them.
	Record string
	mu     sync.Mutex
	ours   map[string]bool // cgroups we froze and have not thawed
}

// New returns a Freezer over root ("" = /sys/fs/cgroup).
func New(root string) *Freezer {
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	return &Freezer{Root: root, ours: map[string]bool{}}
}

// v1 reports whether the host has a v1 freezer hierarchy.
func (f *Freezer) v1() bool {
	// the hierarchy's root cgroup has no freezer.state: look for the mount
	fi, err := os.Stat(filepath.Join(f.Root, "freezer"))
	return err == nil && fi.IsDir()
}

func clean(cg string) (string, error) {
	if cg == "" || !strings.HasPrefix(cg, "/") || cg == "/" {
		return "", fmt.Errorf("cgroup %q: want an absolute path below the root", cg)
	}
	c := filepath.Clean(cg)
	if c != cg || strings.Contains(cg, "/../") {
		return "", fmt.Errorf("cgroup %q is not a clean path", cg)
	}
	return c, nil
}

// v1State is the v1 freezer.state of the clean cgroup c: THAWED, FREEZING
// or FROZEN.
func (f *Freezer) v1State(c string) (string, error) {
	b, err := os.ReadFile(filepath.Join(f.Root, "freezer", c, "freezer.state"))
	return strings.TrimSpace(string(b)), err
}

// State tells whether cgroup cg is frozen (or freezing) now, by anyone.
func (f *Freezer) State(cg string) (bool, error) {
	c, err := clean(cg)
	if err != nil {
		return false, err
	}
	if f.v1() {
		s, err := f.v1State(c)
		return s == "FROZEN" || s == "FREEZING", err
	}
	// v2: cgroup.freeze is what was asked; cgroup.events "frozen" what holds.
	b, err := os.ReadFile(filepath.Join(f.Root, c, "cgroup.freeze"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == "1", nil
}

// Holds tells whether the freeze of cgroup cg has taken hold: every task
// stopped (v1 freezer.state FROZEN, not FREEZING; v2 "frozen 1" in
// cgroup.events). A freeze asked for that never holds (a task that does not
// stop) is one that failed.
func (f *Freezer) Holds(cg string) (bool, error) {
	c, err := clean(cg)
	if err != nil {
		return false, err
	}
	if f.v1() {
		s, err := f.v1State(c)
		return s == "FROZEN", err
	}
	b, err := os.ReadFile(filepath.Join(f.Root, c, "cgroup.events"))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "frozen "); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	return false, fmt.Errorf("cgroup %s: no \"frozen\" line in cgroup.events", c)
}

func (f *Freezer) write(c string, frozen bool) error {
	if f.v1() {
		v := "THAWED"
		if frozen {
			v = "FROZEN"
		}
		return os.WriteFile(filepath.Join(f.Root, "freezer", c, "freezer.state"), []byte(v), 0)
	}
	v := "0"
	if frozen {
		v = "1"
	}
	return os.WriteFile(filepath.Join(f.Root, c, "cgroup.freeze"), []byte(v), 0)
}

// ErrForeign: the cgroup is frozen by someone else (docker pause).
var ErrForeign = errors.New("frozen by someone else; left alone")

// Freeze freezes cg and records it as ours. A cgroup already frozen that
// we did not freeze is left alone (ErrForeign).
func (f *Freezer) Freeze(cg string) error {
	c, err := clean(cg)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ours[c] {
		return f.write(c, true)
	}
	frozen, err := f.State(c)
	if err != nil {
		return err
	}
	if frozen {
		return ErrForeign
	}
	f.ours[c] = true
	if err := f.save(); err != nil { // recorded before it is frozen
		delete(f.ours, c)
		return fmt.Errorf("recording the freeze: %w", err)
	}
	if err := f.write(c, true); err != nil {
		delete(f.ours, c)
		_ = f.save()
		return err
	}
	return nil
}

// Thaw thaws cg if we froze it; otherwise it does nothing (ErrForeign when
// the cgroup is frozen by someone else).
func (f *Freezer) Thaw(cg string) error {
	c, err := clean(cg)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ours[c] {
		if frozen, _ := f.State(c); frozen {
			return ErrForeign
		}
		return nil
	}
	if err := f.write(c, false); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err // still ours, still recorded: thawed at the next try or start
	}
	delete(f.ours, c)
	if err := f.save(); err != nil {
		return fmt.Errorf("recording the thaw: %w", err)
	}
	return nil
}

// save writes the record of what we hold frozen (f.mu held).
func (f *Freezer) save() error {
	if f.Record == "" {
		return nil
	}
	list := make([]string, 0, len(f.ours))
	for c := range f.ours {
		list = append(list, c)
	}
	sort.Strings(list)
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return renameio.WriteFile(f.Record, append(b, '\n'), 0o600)
}

// Recover thaws every cgroup the record lists (frozen by a daemon that
// ended without thawing them: SIGKILL, a crash) and clears it. Those
// thawed meanwhile, or gone, are passed over; those it cannot thaw stay
// recorded and are returned in the error.
func (f *Freezer) Recover() (thawed []string, err error) {
	if f.Record == "" {
		return nil, nil
	}
	b, err := os.ReadFile(f.Record)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w (remove it once every container is thawed)", f.Record, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, cg := range list {
		c, err := clean(cg)
		if err != nil {
			continue
		}
		if err := f.write(c, false); err != nil && !errors.Is(err, os.ErrNotExist) {
			f.ours[c] = true // kept in the record
			errs = append(errs, fmt.Errorf("thawing %s: %w", c, err))
			continue
		}
		thawed = append(thawed, c)
	}
	if err := f.save(); err != nil {
		errs = append(errs, err)
	}
	return thawed, errors.Join(errs...)
}

// dir is the directory of cgroup c in the hierarchy the freezer acts on.
func (f *Freezer) dir(c string) string {
	if f.v1() {
		return filepath.Join(f.Root, "freezer", c)
	}
	return filepath.Join(f.Root, c)
}

// ThawBelow thaws every cgroup strictly below cg that is frozen: a tenant
// able to make cgroups (its own user and cgroup namespace) may freeze its
// own processes so that a SIGKILL never lands (on v1; on v2 a fatal signal
// ends a frozen task, but the memory it holds stays charged until it
// runs). cg itself is left as it is (ours, or paused by its owner). It
// returns the cgroups it thawed.
func (f *Freezer) ThawBelow(cg string) ([]string, error) {
	c, err := clean(cg)
	if err != nil {
		return nil, err
	}
	top := f.dir(c)
	v1 := f.v1()
	var thawed []string
	var errs []error
	walkErr := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == top {
				return err
			}
			return nil // gone meanwhile
		}
		if !d.IsDir() || path == top {
			return nil
		}
		file, frozenVal, thawVal := "cgroup.freeze", "1", "0"
		if v1 {
			file, frozenVal, thawVal = "freezer.state", "FROZEN", "THAWED"
		}
		b, err := os.ReadFile(filepath.Join(path, file))
		if err != nil {
			return nil
		}
		v := strings.TrimSpace(string(b))
		if v == frozenVal || (v1 && v == "FREEZING") {
			if err := os.WriteFile(filepath.Join(path, file), []byte(thawVal), 0); err != nil {
				errs = append(errs, err)
			} else {
				rel, _ := filepath.Rel(top, path)
				thawed = append(thawed, filepath.Join(c, rel))
			}
		}
		return nil
	})
	if walkErr != nil {
		return thawed, walkErr
	}
	return thawed, errors.Join(errs...)
}

// KillAll kills every process of cgroup cg and below it: cgroup.kill on
// v2 (the kernel kills them all, frozen ones too, and any forked
// meanwhile); else, cgroups below thawed first, SIGKILL to every pid of
// each cgroup.procs, a few passes for those forked meanwhile. It returns
// the number of pids signalled (0 with cgroup.kill: the kernel's count is
// not known).
func (f *Freezer) KillAll(cg string) (int, error) {
	c, err := clean(cg)
	if err != nil {
		return 0, err
	}
	if !f.v1() {
		err := os.WriteFile(filepath.Join(f.Root, c, "cgroup.kill"), []byte("1"), 0)
		if err == nil {
			return 0, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
		// a kernel before 5.14: no cgroup.kill
	}
	_, _ = f.ThawBelow(c) // best effort: the kill below ends what stays frozen
	// the container goes whole: its own cgroup thawed too, whoever froze it
	f.mu.Lock()
	if frozen, _ := f.State(c); frozen {
		_ = f.write(c, false)
	}
	if f.ours[c] {
		delete(f.ours, c)
		_ = f.save()
	}
	f.mu.Unlock()
	n := 0
	for pass := 0; pass < 5; pass++ {
		found := 0
		_ = filepath.WalkDir(f.dir(c), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			for _, l := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(l); err == nil && pid > 0 {
					if unix.Kill(pid, unix.SIGKILL) == nil {
						found++
					}
				}
			}
			return nil
		})
		n += found
		if found == 0 {
			break
		}
	}
	return n, nil
}

// Ours tells whether we hold cg frozen.
func (f *Freezer) Ours(cg string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ours[filepath.Clean(cg)]
}

// Forget drops our record of cg (someone else thawed it, or it is gone).
func (f *Freezer) Forget(cg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ours, filepath.Clean(cg))
}

// ThawAll thaws every cgroup we froze (the daemon's exit: never leave a
// container frozen behind us).
func (f *Freezer) ThawAll() {
	f.mu.Lock()
	cgs := make([]string, 0, len(f.ours))
	for c := range f.ours {
		cgs = append(cgs, c)
	}
	f.mu.Unlock()
	for _, c := range cgs {
		_ = f.Thaw(c) // best effort, every one: a cgroup gone is thawed
	}
}
