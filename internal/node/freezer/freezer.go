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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Freezer acts on cgroups under Root (default /sys/fs/cgroup).
type Freezer struct {
	// Root of the cgroup filesystem: v1 hosts have the freezer hierarchy at
	// Root/freezer, v2 hosts the unified one at Root.
	Root string
	mu   sync.Mutex
	ours map[string]bool // cgroups we froze and have not thawed
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
	if err := f.write(c, true); err != nil {
		return err
	}
	f.ours[c] = true
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
	delete(f.ours, c)
	if err := f.write(c, false); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
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
		f.Thaw(c)
	}
}
