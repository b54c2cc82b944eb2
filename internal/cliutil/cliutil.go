// Package cliutil is what vgpu and vgpu-node answer alike: the exit statuses
// and one line for a wrong command line.
package cliutil

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

// Exit statuses (documented in each program's --help): 0 done, 1 the command
// failed, 2 the command line is wrong (unknown command or flag, bad value).
const (
	ExitFailed = 1
	ExitUsage  = 2
)

// Strict makes every command of app answer a wrong command line with one
// line (what is wrong, where the help is) and exit status 2, instead of
// urfave/cli's defaults: the error, the whole help, the error again, and
// "No help topic for 'x'" with status 3 for an unknown command. An app with
// its own Action (vgpu-node runs the daemon) keeps it for a command line
// without arguments; one without shows its help.
func Strict(app *cli.App) {
	prog := app.Name
	app.OnUsageError = usageError(prog)
	// `vgpu help bogus`: urfave/cli calls this instead of answering "No help
	// topic" with status 3; it cannot return an error, hence the exit here.
	app.CommandNotFound = func(c *cli.Context, name string) {
		path := prog
		if c.Command != nil && strings.HasPrefix(c.Command.HelpName, prog+" ") && c.Command.Name != "help" {
			path = c.Command.HelpName
		}
		fmt.Fprintf(c.App.ErrWriter, "%s: no help topic %q (see %s --help)\n", path, name, path)
		os.Exit(ExitUsage)
	}
	run := app.Action
	if run == nil {
		run = cli.ShowAppHelp
	}
	app.Action = func(c *cli.Context) error {
		if c.Args().Present() {
			return unknownCommand(c, prog, app.Commands)
		}
		return run(c)
	}
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			cmd.OnUsageError = usageError(prog)
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
	walk(prog, app.Commands)
}

func usageError(prog string) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, _ bool) error {
		name := prog
		if c.Command != nil && strings.HasPrefix(c.Command.HelpName, prog+" ") {
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
		return cli.Exit(fmt.Sprintf("%s: %s (see %s --help)", name, msg, name), ExitUsage)
	}
}

func unknownCommand(c *cli.Context, path string, cmds []*cli.Command) error {
	var names []string
	for _, cmd := range cmds {
		if !cmd.Hidden {
			names = append(names, cmd.Name)
		}
	}
	return cli.Exit(fmt.Sprintf("%s: no command %q; commands: %s (see %s --help)", path, c.Args().First(), strings.Join(names, ", "), path), ExitUsage)
}
