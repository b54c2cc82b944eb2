package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

// The host daemon and its servers are the program vgpu-node, so that vgpu
// (exec, status) links no Kubernetes, gRPC or Prometheus. `vgpu node`,
// `vgpu metrics` and `vgpu device-plugin` still work, for the units and
// DaemonSets written for them: they exec vgpu-node (same pid, so systemd and
// the kubelet see no difference).
func aliasCommands() []*cli.Command {
	alias := func(name string, hidden bool, sub ...string) *cli.Command {
		target := append([]string{"vgpu-node"}, sub...)
		return &cli.Command{
			Name:            name,
			Usage:           fmt.Sprintf("the host daemon: runs %s with these arguments (see vgpu-node --help)", strings.Join(target, " ")),
			Hidden:          hidden,
			SkipFlagParsing: true, // every argument, --help too, is vgpu-node's
			Action: func(c *cli.Context) error {
				bin, err := nodeBinary()
				if err != nil {
					return cli.Exit("vgpu "+name+": "+err.Error(), exitFailed)
				}
				args := append(append([]string{bin}, sub...), c.Args().Slice()...)
				err = syscall.Exec(bin, args, os.Environ())
				return cli.Exit(fmt.Sprintf("vgpu %s: exec %s: %v", name, bin, err), exitFailed)
			},
		}
	}
	return []*cli.Command{alias("node", false), alias("metrics", true, "metrics"), alias("device-plugin", true, "device-plugin")}
}

// nodeBinary is vgpu-node beside this program (make install puts them
// together), else on PATH.
func nodeBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		if self, err = filepath.EvalSymlinks(self); err == nil {
			p := filepath.Join(filepath.Dir(self), "vgpu-node")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	p, err := exec.LookPath("vgpu-node")
	if err != nil {
		return "", errors.New("no vgpu-node beside vgpu or on PATH (make install puts it beside vgpu)")
	}
	return p, nil
}
