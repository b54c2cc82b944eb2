// Package shim is the logic of vgpu-runtime: a runc-compatible front that edits the
// OCI spec of containers asking for a GPU on `create`/`run` and otherwise passes
// every command through to the low-level runtime (runc, crun) untouched.
package shim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
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

func createFlags(run bool) []cli.Flag {
	f := []cli.Flag{
		&cli.StringFlag{Name: "bundle", Aliases: []string{"b"}},
		&cli.StringFlag{Name: "console-socket"},
		&cli.StringFlag{Name: "pidfd-socket"},
		&cli.StringFlag{Name: "pid-file"},
		&cli.BoolFlag{Name: "no-pivot"},
		&cli.BoolFlag{Name: "no-new-keyring"},
		&cli.IntFlag{Name: "preserve-fds"},
	}
	if run {
		f = append(f,
			&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}},
			&cli.BoolFlag{Name: "keep"},
			&cli.BoolFlag{Name: "no-subreaper"},
		)
	}
	return f
}

// Parse parses runc's command line (argv[1:]). It never fails for commands other
// than create and run: those are passed through whatever they contain.
func Parse(args []string) (*Invocation, error) {
	inv := &Invocation{Args: args}
	known, unknown, at := splitGlobal(args)
	inv.Unknown, inv.CommandAt = unknown, at

	var cmdErr error
	setCreate := func(c *cli.Context) error {
		inv.Command = c.Command.Name
		inv.Bundle = c.String("bundle")
		inv.ID = c.Args().First()
		inv.PIDFile = c.String("pid-file")
		if c.Command.Name == "run" {
			inv.Detach, inv.Keep = c.Bool("detach"), c.Bool("keep")
		}
		return nil
	}
	passthrough := func(c *cli.Context) error {
		inv.Command = c.Command.Name
		// These commands' flags are not ours to know; the id is the first
		// positional argument after the flags runc defines for them.
		rest := c.Args().Slice()
		for j := 0; j < len(rest); j++ {
			a := rest[j]
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
		return nil
	}
	app := &cli.App{
		Name:            "vgpu-runtime",
		HideHelp:        true,
		HideVersion:     true,
		Writer:          io.Discard,
		ErrWriter:       io.Discard,
		ExitErrHandler:  func(*cli.Context, error) {},
		OnUsageError:    func(_ *cli.Context, err error, _ bool) error { return err },
		CommandNotFound: func(c *cli.Context, name string) { inv.Command = name },
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "debug"},
			&cli.StringFlag{Name: "log"},
			&cli.StringFlag{Name: "log-format", Value: "text"},
			&cli.StringFlag{Name: "root"},
			&cli.StringFlag{Name: "criu"},
			&cli.BoolFlag{Name: "systemd-cgroup"},
			&cli.StringFlag{Name: "rootless"},
			&cli.BoolFlag{Name: "help", Aliases: []string{"h"}},
			&cli.BoolFlag{Name: "version", Aliases: []string{"v"}},
		},
		Before: func(c *cli.Context) error {
			inv.Global = Global{
				Root: c.String("root"), Log: c.String("log"), LogFormat: c.String("log-format"),
				Criu: c.String("criu"), Rootless: c.String("rootless"),
				Debug: c.Bool("debug"), SystemdCgroup: c.Bool("systemd-cgroup"),
			}
			return nil
		},
		Action: func(c *cli.Context) error { return nil },
	}
	for _, name := range []string{"create", "run"} {
		app.Commands = append(app.Commands, &cli.Command{
			Name: name, Flags: createFlags(name == "run"), HideHelp: true,
			OnUsageError: func(_ *cli.Context, err error, _ bool) error { cmdErr = err; return err },
			Action:       setCreate,
		})
	}
	for name := range runcCommands {
		if name == "create" || name == "run" || name == "help" || name == "h" {
			continue
		}
		app.Commands = append(app.Commands, &cli.Command{
			Name: name, SkipFlagParsing: true, HideHelp: true, Action: passthrough,
		})
	}
	err := app.Run(append([]string{"vgpu-runtime"}, known...))
	if inv.Command == "create" || inv.Command == "run" || cmdErr != nil {
		if cmdErr != nil {
			return inv, fmt.Errorf("cannot parse %s arguments: %w", inv.Command, cmdErr)
		}
		if err != nil {
			return inv, fmt.Errorf("cannot parse arguments: %w", err)
		}
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
	// Anything else passes through; a parse error of the global section only
	// means we know less (runc will report it itself).
	return inv, nil
}
