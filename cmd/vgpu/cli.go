package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/shim"
	"github.com/vgpu-dev/vgpu/internal/version"
)

// Exit statuses of vgpu (documented in `vgpu --help`): 0 done, 1 the command
// failed, 2 the command line is wrong (unknown command or flag, bad value).
// vgpu exec returns its command's status, or 125 when it could not run it.
const (
	exitFailed = 1
	exitUsage  = 2
)

// exitStatusHelp ends the app's help text.
const exitStatusHelp = `Exit status: 0 done; 1 the command failed; 2 the command line is wrong
(unknown command or flag, bad value); vgpu exec: its command's status, or 125
when vgpu could not start it.`

// versionLines are `vgpu --version` and `vgpu version`: our version, the
// driver the configuration points at and the low-level runtime it names.
func versionLines() string {
	cfg, err := config.Load(shim.ConfigPath())
	rtLine := "runtime: unknown (no configuration)"
	if err == nil {
		rt, ferr := shim.FindRuntime(runtimesOf(cfg))
		rtLine = version.Runtime(rt, ferr)
	}
	return version.Line("vgpu") + "\n" + version.Driver(cfg, err) + "\n" + rtLine + "\n"
}

func runtimesOf(cfg *config.Config) []string {
	if len(cfg.Runtimes) == 0 {
		return shim.DefaultRuntimes
	}
	return cfg.Runtimes
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version and commit of vgpu, the driver's version and the low-level runtime's",
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return cli.Exit("vgpu version: takes no arguments", exitUsage)
			}
			fmt.Fprint(c.App.Writer, versionLines())
			return nil
		},
	}
}

// strictUsage makes every command of app answer a wrong command line with
// one line (what is wrong, where the help is) and exit status 2, instead of
// urfave/cli's defaults: the error, the whole help, the error again, and
// "No help topic for 'x'" with status 3 for an unknown command.
func strictUsage(app *cli.App) {
	app.OnUsageError = usageError
	// `vgpu help bogus`: urfave/cli calls this instead of answering "No help
	// topic" with status 3; it cannot return an error, hence the exit here.
	app.CommandNotFound = func(c *cli.Context, name string) {
		path := "vgpu"
		if c.Command != nil && strings.HasPrefix(c.Command.HelpName, "vgpu ") && c.Command.Name != "help" {
			path = c.Command.HelpName
		}
		fmt.Fprintf(c.App.ErrWriter, "%s: no help topic %q (see %s --help)\n", path, name, path)
		os.Exit(exitUsage)
	}
	app.Action = func(c *cli.Context) error {
		if c.Args().Present() {
			return unknownCommand(c, "vgpu", app.Commands)
		}
		return cli.ShowAppHelp(c)
	}
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			cmd.OnUsageError = usageError
			full := path + " " + cmd.Name
			if len(cmd.Subcommands) > 0 && cmd.Action == nil {
				subs := cmd.Subcommands
				cmd.Action = func(c *cli.Context) error {
					if c.Args().Present() {
						return unknownCommand(c, full, subs)
					}
					return cli.ShowSubcommandHelp(c)
				}
			}
			walk(full, cmd.Subcommands)
		}
	}
	walk("vgpu", app.Commands)
}

func usageError(c *cli.Context, err error, _ bool) error {
	name := "vgpu"
	if c.Command != nil && strings.HasPrefix(c.Command.HelpName, "vgpu ") {
		name = c.Command.HelpName // "vgpu setup docker"
	}
	msg := err.Error()
	// The flag package names a flag with one dash whatever the user typed.
	if f, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		dash := "--"
		if len(f) == 1 {
			dash = "-"
		}
		msg = "unknown flag " + dash + f
	}
	return cli.Exit(fmt.Sprintf("%s: %s (see %s --help)", name, msg, name), exitUsage)
}

func unknownCommand(c *cli.Context, path string, cmds []*cli.Command) error {
	var names []string
	for _, cmd := range cmds {
		if !cmd.Hidden {
			names = append(names, cmd.Name)
		}
	}
	return cli.Exit(fmt.Sprintf("%s: no command %q; commands: %s (see %s --help)", path, c.Args().First(), strings.Join(names, ", "), path), exitUsage)
}
