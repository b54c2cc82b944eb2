package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/cliutil"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/shim"
	"github.com/vgpu-dev/vgpu/internal/version"
)

// Exit statuses of vgpu (documented in `vgpu --help`): those of cliutil;
// vgpu exec returns its command's status, or 125 when it could not run it.
const (
	exitFailed = cliutil.ExitFailed
	exitUsage  = cliutil.ExitUsage
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
