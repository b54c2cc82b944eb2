// coverage is the report of `make coverage`: it reads a Go cover profile
// (go test -coverpkg=./... -coverprofile, every tier) and prints each
// package's statement coverage, lowest first. It fails when a package is
// below the floor (60 %) and test/coverage/reasons does not say why.
//
//	go run ./test/coverage PROFILE [REASONS]
package main

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
)

const floor = 60.0

type block struct {
	stmts int
	hit   bool
}

func main() {
	if len(os.Args) < 2 || len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: coverage PROFILE [REASONS]")
		os.Exit(2)
	}
	reasonsPath := "test/coverage/reasons"
	if len(os.Args) == 3 {
		reasonsPath = os.Args[2]
	}
	blocks, err := readProfile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "coverage:", err)
		os.Exit(1)
	}
	reasons, err := readReasons(reasonsPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coverage:", err)
		os.Exit(1)
	}
	type pkg struct {
		name       string
		stmts, hit int
	}
	byPkg := map[string]*pkg{}
	for k, b := range blocks {
		name := path.Dir(k[:strings.LastIndexByte(k, ':')])
		p := byPkg[name]
		if p == nil {
			p = &pkg{name: name}
			byPkg[name] = p
		}
		p.stmts += b.stmts
		if b.hit {
			p.hit += b.stmts
		}
	}
	var ps []*pkg
	var all, hit int
	for _, p := range byPkg {
		ps = append(ps, p)
		all += p.stmts
		hit += p.hit
	}
	pct := func(h, n int) float64 {
		if n == 0 {
			return 100
		}
		return 100 * float64(h) / float64(n)
	}
	sort.Slice(ps, func(i, j int) bool { return pct(ps[i].hit, ps[i].stmts) < pct(ps[j].hit, ps[j].stmts) })
	var below []string
	for _, p := range ps {
		c := pct(p.hit, p.stmts)
		note := ""
		if c < floor {
			if r, ok := reasons[p.name]; ok {
				note = "  (below " + strconv.Itoa(int(floor)) + " %: " + r + ")"
			} else {
				note = "  BELOW THE FLOOR, no reason in " + reasonsPath
				below = append(below, p.name)
			}
		}
		fmt.Printf("%6.1f %%  %5d statements  %s%s\n", c, p.stmts, p.name, note)
	}
	fmt.Printf("%6.1f %%  %5d statements  all packages\n", pct(hit, all), all)
	if len(below) > 0 {
		fmt.Fprintf(os.Stderr, "coverage: %d package(s) below %.0f %% with no reason written in %s: %s\n", len(below), floor, reasonsPath, strings.Join(below, " "))
		os.Exit(1)
	}
}

// readProfile reads a cover profile; a block listed more than once (one
// entry per test binary) counts as covered when any covered it.
func readProfile(p string) (map[string]block, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	blocks := map[string]block{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") || line == "" {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 3 {
			return nil, fmt.Errorf("%s: not a cover profile line: %q", p, line)
		}
		n, err1 := strconv.Atoi(fs[1])
		c, err2 := strconv.Atoi(fs[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: not a cover profile line: %q", p, line)
		}
		b := blocks[fs[0]]
		b.stmts = n
		b.hit = b.hit || c > 0
		blocks[fs[0]] = b
	}
	return blocks, sc.Err()
}

// readReasons reads "import/path  why it is below the floor" lines; # starts
// a comment.
func readReasons(p string) (map[string]string, error) {
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, why, _ := strings.Cut(l, " ")
		out[name] = strings.TrimSpace(why)
	}
	return out, nil
}
