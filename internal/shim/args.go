// Package shim is the logic of vgpu-runtime: a runc-compatible front that edits the
// OCI spec of containers asking for a GPU on `create`/`run` and otherwise passes
// every command through to the low-level runtime (runc, crun) untouched.
package shim

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Global holds runc's global flags, as runc itself defines them.
type Global struct {
	Root          string
	Log           string
	LogFormat     string // "text" (default) or "json"
	Criu          string
	Rootless      string
	Debug         bool
	SystemdCgroup bool
}

// Invocation is one parsed runc command line. Args is never modified: it is what
// the low-level runtime is executed with.
type Invocation struct {
	Args    []string // argv[1:], exactly as received
	Global  Global
	Command string   // "" when there is none (e.g. --version, --help)
	Bundle  string   // create/run: the bundle directory, absolute (default: cwd)
	ID      string   // create/run/delete/state/...: the first positional argument
	Force   bool     // delete --force
	Unknown []string // global flags we do not know; passed through, ignored here
	Detach  bool     // run --detach
	Keep    bool     // run --keep
	PIDFile string   // create/run --pid-file, absolute ("" = none)
	// CommandAt is the index in Args of the command (len(Args) when none): Args[:CommandAt]
	// is the global section, to repeat for our own calls of the runtime.
	CommandAt int
}

// runcCommands are the subcommands runc (and crun) know. An unknown global flag
// followed by one of these is taken as a boolean flag, otherwise as flag + value.
var runcCommands = map[string]bool{
	"checkpoint": true, "create": true, "delete": true, "events": true, "exec": true,
	"init": true, "kill": true, "list": true, "pause": true, "ps": true, "restore": true,
	"resume": true, "run": true, "spec": true, "start": true, "state": true,
	"update": true, "features": true, "help": true, "h": true, "mounts": true,
}

var (
	globalBool  = map[string]bool{"debug": true, "systemd-cgroup": true, "help": true, "h": true, "version": true, "v": true}
	globalValue = map[string]bool{"root": true, "log": true, "log-format": true, "criu": true, "rootless": true}
)

// splitGlobal walks the global section of args. It returns the known global flags
// (with their values) followed by the command and everything after it, and the
// unknown flags it left out. runc's global flags come before the command.
func splitGlobal(args []string) (known, unknown []string, at int) {
	i := 0
	for i < len(args) {
		a := args[i]
		if a == "--" {
			known = append(known, args[i:]...)
			return known, unknown, i
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case globalBool[name]:
			known = append(known, a)
			i++
		case globalValue[name]:
			known = append(known, a)
			i++
			if !hasValue && i < len(args) {
				known = append(known, args[i])
				i++
			}
		default:
			unknown = append(unknown, a)
			i++
			// --flag value: a following token that is not a command is its value.
			if !hasValue && i < len(args) && !strings.HasPrefix(args[i], "-") && !runcCommands[args[i]] {
				unknown = append(unknown, args[i])
				i++
			}
		}
	}
	return append(known, args[i:]...), unknown, i
}

// globalFlags parses the known global section (what splitGlobal kept) into g.
// The standard library's flag package, not a CLI framework: vgpu-runtime
// starts for every container on a host where it is the default runtime, and
// a framework's package init and command tables cost milliseconds there.
func globalFlags(g *Global) *flag.FlagSet {
	fs := flag.NewFlagSet("vgpu-runtime", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolVar(&g.Debug, "debug", false, "")
	fs.StringVar(&g.Log, "log", "", "")
	fs.StringVar(&g.LogFormat, "log-format", "text", "")
	fs.StringVar(&g.Root, "root", "", "")
	fs.StringVar(&g.Criu, "criu", "", "")
	fs.BoolVar(&g.SystemdCgroup, "systemd-cgroup", false, "")
	fs.StringVar(&g.Rootless, "rootless", "", "")
	var help, version bool
	for _, n := range []string{"help", "h"} {
		fs.BoolVar(&help, n, false, "")
	}
	for _, n := range []string{"version", "v"} {
		fs.BoolVar(&version, n, false, "")
	}
	return fs
}

// createFlags are runc's flags of create (and run, with run's own).
func createFlags(inv *Invocation, run bool) *flag.FlagSet {
	fs := flag.NewFlagSet(map[bool]string{true: "run", false: "create"}[run], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, n := range []string{"bundle", "b"} {
		fs.StringVar(&inv.Bundle, n, "", "")
	}
	fs.StringVar(&inv.PIDFile, "pid-file", "", "")
	var s string
	var b bool
	var i int
	for _, n := range []string{"console-socket", "pidfd-socket"} {
		fs.StringVar(&s, n, "", "")
	}
	for _, n := range []string{"no-pivot", "no-new-keyring"} {
		fs.BoolVar(&b, n, false, "")
	}
	fs.IntVar(&i, "preserve-fds", 0, "")
	if run {
		for _, n := range []string{"detach", "d"} {
			fs.BoolVar(&inv.Detach, n, false, "")
		}
		fs.BoolVar(&inv.Keep, "keep", false, "")
		fs.BoolVar(&b, "no-subreaper", false, "")
	}
	return fs
}

// Parse parses runc's command line (argv[1:]). It never fails for commands other
// than create and run: those are passed through whatever they contain.
func Parse(args []string) (*Invocation, error) {
	inv := &Invocation{Args: args}
	known, unknown, at := splitGlobal(args)
	inv.Unknown, inv.CommandAt = unknown, at

	gfs := globalFlags(&inv.Global)
	if err := gfs.Parse(known); err != nil {
		// Only means we know less: runc reports its own flags' errors.
		inv.Global = Global{LogFormat: "text"}
		return inv, nil
	}
	rest := gfs.Args()
	if len(rest) == 0 {
		return inv, nil
	}
	inv.Command = rest[0]
	if inv.Command == "help" || inv.Command == "h" {
		inv.Command = ""
		return inv, nil
	}
	if inv.Command != "create" && inv.Command != "run" {
		// These commands' flags are not ours to know; the id is the first
		// positional argument after the flags runc defines for them.
		for _, a := range rest[1:] {
			if a == "--force" || a == "-f" || a == "--force=true" || a == "-force" {
				inv.Force = true
				continue
			}
			if strings.HasPrefix(a, "-") {
				continue
			}
			if inv.ID == "" {
				inv.ID = a
			}
		}
		return inv, nil
	}
	cfs := createFlags(inv, inv.Command == "run")
	if err := cfs.Parse(rest[1:]); err != nil {
		return inv, fmt.Errorf("cannot parse %s arguments: %w", inv.Command, err)
	}
	inv.ID = cfs.Arg(0)
	if inv.ID == "" {
		return inv, errors.New(inv.Command + ": container id is required")
	}
	if inv.Bundle == "" {
		wd, err := os.Getwd()
		if err != nil {
			return inv, err
		}
		inv.Bundle = wd
	} else if !filepath.IsAbs(inv.Bundle) {
		abs, err := filepath.Abs(inv.Bundle)
		if err != nil {
			return inv, err
		}
		inv.Bundle = abs
	}
	if inv.PIDFile != "" && !filepath.IsAbs(inv.PIDFile) {
		if abs, err := filepath.Abs(inv.PIDFile); err == nil {
			inv.PIDFile = abs
		}
	}
	return inv, nil
}
