package depcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/vgpu-dev/vgpu/"

// nodeWing is vgpu node's own folder; nodeUsers are the only packages
// outside it that may import from it: what the runtime, the CLI and the
// node share stands on a floor below all three instead.
const nodeWing = "internal/node/"

var nodeUsers = map[string]bool{"cmd/vgpu-node": true, "internal/nodeapp": true}

// TestFloors checks the host packages' imports against the floors of
// docs/design.md ("Floors"): each goes to a lower floor, or to its own
// floor and wing; every package of the module is on a floor; and only
// vgpu node's packages import from internal/node. Test files' imports are
// not checked (go list -deps lists a package's own): a test of the library
// may drive vgpu node's daemon.
func TestFloors(t *testing.T) {
	floors := readFloors(t)
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		from := strings.TrimPrefix(f[0], module)
		pf, ok := floors.of(from)
		if !ok {
			t.Errorf("%s is on no floor: add it to docs/design.md's floor table", from)
			continue
		}
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := strings.TrimPrefix(imp, module)
			if strings.HasPrefix(to, nodeWing) && !strings.HasPrefix(from, nodeWing) && !nodeUsers[from] {
				t.Errorf("%s -> %s: only vgpu node imports from %s: move the shared part out of it, down a floor", from, to, nodeWing)
			}
			pt, ok := floors.of(to)
			if !ok {
				continue // reported as its own package
			}
			if pt.floor < pf.floor || pt.floor == pf.floor && pt.wing == pf.wing {
				continue
			}
			t.Errorf("%s -> %s: floor %d (%s) imports floor %d (%s): move the shared part down a floor", from, to, pf.floor, pf.wing, pt.floor, pt.wing)
		}
	}
}

type place struct {
	floor int
	wing  string
}

type floorTable map[string]place // package, or prefix ending in "/..."

func (ft floorTable) of(pkg string) (place, bool) {
	if p, ok := ft[pkg]; ok {
		return p, true
	}
	best, bp := "", place{}
	for k, p := range ft {
		if pre, ok := strings.CutSuffix(k, "/..."); ok && (pkg == pre || strings.HasPrefix(pkg, pre+"/")) && len(pre) > len(best) {
			best, bp = pre, p
		}
	}
	return bp, best != ""
}

// readFloors reads the floor table of docs/design.md: rows "| floor |
// wing | `pkg`, … |" after the heading "### Floors".
func readFloors(t *testing.T) floorTable {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n### Floors\n")
	if !ok {
		t.Fatal("docs/design.md has no \"### Floors\" section")
	}
	ft := floorTable{}
	for _, line := range strings.Split(rest, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 3 {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(cells[0]))
		if err != nil {
			continue // the header and its rule
		}
		for _, p := range strings.Split(cells[2], ",") {
			p = strings.Trim(strings.TrimSpace(p), "`")
			if _, dup := ft[p]; dup {
				t.Errorf("docs/design.md: %s is on two floors", p)
			}
			ft[p] = place{n, strings.TrimSpace(cells[1])}
		}
	}
	if len(ft) == 0 {
		t.Fatal("docs/design.md: the floor table has no rows")
	}
	return ft
}
