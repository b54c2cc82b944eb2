// mutants is `make mutants`: it applies each named source mutation of
// test/mutants/list to a copy of the repository, rebuilds what the mutant
// needs, runs only the tests named to catch it, and fails when a mutant
// survives (its tests pass), does not build, names no test, or when the
// source string it changes is not in its file exactly once: a list that
// rots when the code changes says so at once. The working tree is never
// changed. Run from the repository root after make build.
//
//	go run ./test/mutants [-list FILE] [-only REGEXP] [-keep] [-show]
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// mutant is one entry of the list.
type mutant struct {
	name, file, from, to string
	make                 string // make target to rebuild after the change ("" for Go-only mutants)
	tags, run, pkg       string // what catches it: go test -tags tags -run run pkg
	why                  string
	line                 int // of the entry's name in the list
}

// showAll: -show.
var showAll bool

// perMutantTimeout bounds one mutant's build and tests together.
const perMutantTimeout = 5 * time.Minute

func main() {
	list := flag.String("list", "test/mutants/list", "the list of mutants")
	only := flag.String("only", "", "run only the mutants whose name matches this regular expression")
	keep := flag.Bool("keep", false, "keep the temporary copy of the repository")
	flag.BoolVar(&showAll, "show", false, "print the end of the tests' output for killed mutants too (what killed them)")
	flag.Parse()
	if err := run(*list, *only, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(listPath, only string, keep bool) error {
	data, err := os.ReadFile(listPath)
	if err != nil {
		return err
	}
	ms, err := parse(listPath, data)
	if err != nil {
		return err
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return fmt.Errorf("-only %q: %v", only, err)
		}
		var sel []mutant
		for _, m := range ms {
			if re.MatchString(m.name) {
				sel = append(sel, m)
			}
		}
		if len(sel) == 0 {
			return fmt.Errorf("-only %q matches no mutant of %s", only, listPath)
		}
		ms = sel
	}
	// Every source string first: a rotten entry fails before any test runs.
	var rotten []string
	for _, m := range ms {
		b, err := os.ReadFile(m.file)
		if err != nil {
			rotten = append(rotten, fmt.Sprintf("%s:%d %s: %v", listPath, m.line, m.name, err))
			continue
		}
		if n := bytes.Count(b, []byte(m.from)); n != 1 {
			rotten = append(rotten, fmt.Sprintf("%s:%d %s: %q is in %s %d times, want once: the code changed; update the entry (the line it mutates, and what catches it)",
				listPath, m.line, m.name, m.from, m.file, n))
		}
	}
	if len(rotten) > 0 {
		return errors.New(strings.Join(rotten, "\n"))
	}
	build := os.Getenv("BUILD")
	if build == "" {
		build = "build"
	}
	if _, err := os.Stat(filepath.Join(build, "lib", "libvgpu-cuda.so")); err != nil {
		return fmt.Errorf("no build in %s (make build first): %v", build, err)
	}
	tmp, err := os.MkdirTemp("", "vgpu-mutants-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("copy kept in", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	if err := copyTree(tmp, build); err != nil {
		return err
	}
	var failed []string
	for _, m := range ms {
		start := time.Now()
		verdict, out := try(tmp, m)
		fmt.Printf("%-28s %-9s %5.1fs  %s\n", m.name, verdict, time.Since(start).Seconds(), m.why)
		if verdict != "killed" {
			failed = append(failed, fmt.Sprintf("%s (%s:%d) %s: %s %s", m.name, listPath, m.line, verdict, m.file, m.why))
		}
		if verdict != "killed" || showAll {
			fmt.Println(indent(tail(out, 40)))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d mutants not killed:\n%s", len(failed), len(ms), strings.Join(failed, "\n"))
	}
	fmt.Printf("all %d mutants killed\n", len(ms))
	return nil
}

// try applies m in the copy at dir, runs its tests, and puts the source back
// (rebuilt). The verdict: killed, SURVIVED, or ERROR (the mutant does not
// build, or its tests do not run).
func try(dir string, m mutant) (verdict, out string) {
	path := filepath.Join(dir, m.file)
	orig, err := os.ReadFile(path)
	if err != nil {
		return "ERROR", err.Error()
	}
	defer func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			verdict, out = "ERROR", "restoring "+m.file+": "+err.Error()
			return
		}
		if m.make != "" {
			if o, err := makeIn(dir, m.make); err != nil {
				verdict, out = "ERROR", "rebuilding after "+m.name+": "+o
			}
		}
	}()
	mutated := bytes.Replace(orig, []byte(m.from), []byte(m.to), 1)
	if err := os.WriteFile(path, mutated, 0o644); err != nil {
		return "ERROR", err.Error()
	}
	if m.make != "" {
		if o, err := makeIn(dir, m.make); err != nil {
			return "ERROR", "the mutant does not build:\n" + o
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), perMutantTimeout)
	defer cancel()
	args := []string{"test", "-count=1", "-run", m.run}
	if m.tags != "" {
		args = append(args, "-tags", m.tags)
	}
	cmd := exec.CommandContext(ctx, goTool(), append(args, m.pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "VGPU_BUILD="+filepath.Join(dir, "build"))
	b, err := cmd.CombinedOutput()
	out = string(b)
	switch {
	case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]"):
		return "ERROR", "the mutant's package does not compile:\n" + out
	case strings.Contains(out, "no tests to run"):
		return "ERROR", "-run " + m.run + " names no test of " + m.pkg + ":\n" + out
	case err == nil:
		return "SURVIVED", out
	}
	return "killed", out
}

func makeIn(dir, target string) (string, error) {
	cmd := exec.Command("make", "--no-print-directory", "-C", dir, "BUILD="+filepath.Join(dir, "build"), target)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// copyTree copies the files git knows of (tracked, and untracked but not
// ignored) and the build directory into dir, keeping modification times so
// that make rebuilds only what a mutant changes.
func copyTree(dir, build string) error {
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if err := copyFile(f, filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return filepath.WalkDir(build, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(build, p)
		if err != nil {
			return err
		}
		return copyFile(p, filepath.Join(dir, "build", rel))
	})
}

func copyFile(from, to string) error {
	st, err := os.Lstat(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(target, to)
	}
	if !st.Mode().IsRegular() {
		return nil
	}
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return os.Chtimes(to, st.ModTime(), st.ModTime())
}

// parse reads the list: entries of "key value" lines, separated by blank
// lines; # starts a comment line. A value in double quotes is a Go string
// literal (for leading or trailing spaces, tabs, newlines).
func parse(name string, data []byte) ([]mutant, error) {
	var ms []mutant
	var cur *mutant
	finish := func() error {
		if cur == nil {
			return nil
		}
		m := *cur
		cur = nil
		for k, v := range map[string]string{"name": m.name, "file": m.file, "from": m.from, "run": m.run, "pkg": m.pkg, "why": m.why} {
			if v == "" {
				return fmt.Errorf("%s:%d: entry %q has no %s", name, m.line, m.name, k)
			}
		}
		if m.from == m.to {
			return fmt.Errorf("%s:%d: %s: from and to are the same", name, m.line, m.name)
		}
		for _, o := range ms {
			if o.name == m.name {
				return fmt.Errorf("%s:%d: a second mutant named %s", name, m.line, m.name)
			}
		}
		ms = append(ms, m)
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.TrimSpace(line) == "" {
			if err := finish(); err != nil {
				return nil, err
			}
			continue
		}
		key, val, _ := strings.Cut(line, " ")
		val = strings.TrimLeft(val, " ")
		if strings.HasPrefix(val, `"`) {
			u, err := strconv.Unquote(val)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %s: %v", name, n, key, err)
			}
			val = u
		}
		if cur == nil {
			cur = &mutant{line: n}
		}
		switch key {
		case "name":
			cur.name = val
		case "file":
			cur.file = val
		case "from":
			cur.from = val
		case "to":
			cur.to = val
		case "make":
			cur.make = val
		case "tags":
			cur.tags = val
		case "run":
			cur.run = val
		case "pkg":
			cur.pkg = val
		case "why":
			cur.why = val
		default:
			return nil, fmt.Errorf("%s:%d: unknown key %q (name, file, from, to, make, tags, run, pkg, why)", name, n, key)
		}
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return ms, sc.Err()
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
