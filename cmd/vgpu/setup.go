package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/vgpu-dev/vgpu/internal/cdispec"
	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/setup"
)

// setupCommands are `vgpu setup docker|containerd|podman` and `vgpu cdi
// generate|list` (logic in internal/setup and internal/cdispec).
func setupCommands() []*cli.Command {
	return []*cli.Command{setupCommand(), cdiCommand()}
}

// sibling returns the absolute path of one of our programs: next to this
// one (make install puts them together), else on PATH.
func sibling(name string) (string, error) {
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			p := filepath.Join(filepath.Dir(exe), name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is neither next to this program nor on PATH; say where it is with --%s-path", name, strings.TrimPrefix(name, "vgpu-"))
	}
	return filepath.Abs(p)
}

func absFlag(c *cli.Context, flag, program string) (string, error) {
	if v := c.String(flag); v != "" {
		return filepath.Abs(v)
	}
	return sibling(program)
}

var (
	removeFlag = &cli.BoolFlag{Name: "remove", Usage: "take vgpu out again (undoes what setup added)"}
	dryRunFlag = &cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "print the change as a unified diff; write nothing"}
)

// applyChanges prints (dry run) or writes the changes and says what happened.
func applyChanges(c *cli.Context, what string, changes []setup.Change, hint string) error {
	out := c.App.Writer
	if c.Bool("dry-run") {
		any := false
		for _, ch := range changes {
			if d := ch.Diff(); d != "" {
				fmt.Fprint(out, d)
				any = true
			}
		}
		if !any {
			fmt.Fprintf(c.App.ErrWriter, "%s: no change\n", what)
		}
		return nil
	}
	changed := false
	for _, ch := range changes {
		if !ch.Changed() {
			continue
		}
		bk, err := ch.Apply()
		if err != nil {
			return cli.Exit(fmt.Sprintf("vgpu setup %s: %s: %v", what, ch.Path, err), 1)
		}
		changed = true
		verb := "updated"
		switch {
		case ch.Before == nil:
			verb = "created"
		case ch.After == nil:
			verb = "removed"
		}
		fmt.Fprintf(out, "%s %s", verb, ch.Path)
		if bk != "" {
			fmt.Fprintf(out, " (previous content in %s)", bk)
		}
		fmt.Fprintln(out)
	}
	if !changed {
		if c.Bool("remove") {
			fmt.Fprintf(out, "%s: vgpu is not set up there; nothing to do\n", what)
		} else {
			fmt.Fprintf(out, "%s: vgpu is already set up; nothing to do\n", what)
		}
		return nil
	}
	if hint != "" {
		fmt.Fprintln(out, hint)
	}
	return nil
}

func setupCommand() *cli.Command {
	return &cli.Command{
		Name:  "setup",
		Usage: "register vgpu with a container engine on this host (docker, containerd, podman)",
		Description: `Edits the engine's configuration minimally and atomically, keeping everything
else in it (a copy of the previous content is kept as <file>` + setup.BackupSuffix + `).
Running it twice changes nothing the second time; --remove takes vgpu out again;
--dry-run prints the change as a unified diff and writes nothing.

   vgpu setup docker       runtime "vgpu" in /etc/docker/daemon.json
   vgpu setup containerd   runtime class "vgpu" in /etc/containerd/config.toml
   vgpu setup podman       OCI hooks in podman's hooks directories

For CDI (podman --device vgpu.io/gpu=0, containerd/CRI-O with CDI enabled) see
vgpu cdi generate.`,
		Subcommands: []*cli.Command{{
			Name:  "docker",
			Usage: "add the runtime \"vgpu\" (vgpu-runtime) to dockerd's daemon.json",
			Description: `Adds "runtimes": {"vgpu": {"path": "<vgpu-runtime>"}} to daemon.json (and
"default-runtime": "vgpu" with --default) without re-encoding the rest of the
file. A daemon.json that is not valid JSON is reported with its line and left
untouched. dockerd picks the change up on SIGHUP. --remove that takes out the
last runtime (and so the "runtimes" key) needs a restart of dockerd instead:
dockerd keeps a key that is no longer in the file when it reloads (it says so).
Then:

   docker run --runtime=vgpu -e VGPU_VISIBLE_DEVICES=0 -e VGPU_MEMORY_LIMIT=4Gi IMAGE`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "config", Value: setup.DefaultDockerConfig, Usage: "dockerd's configuration file"},
				&cli.StringFlag{Name: "runtime-path", Usage: "the runtime docker runs (default: vgpu-runtime next to this program, else on PATH)"},
				&cli.BoolFlag{Name: "default", Usage: "also make vgpu the default runtime (default-runtime), so that --runtime=vgpu is not needed"},
				removeFlag, dryRunFlag,
			},
			Action: func(c *cli.Context) error {
				o := setup.DockerOptions{Default: c.Bool("default"), Remove: c.Bool("remove")}
				if !o.Remove {
					p, err := absFlag(c, "runtime-path", "vgpu-runtime")
					if err != nil {
						return cli.Exit("vgpu setup docker: "+err.Error(), 1)
					}
					o.RuntimePath = p
				}
				ch, err := setup.DockerChange(c.String("config"), o)
				if err != nil {
					return cli.Exit("vgpu setup docker: "+err.Error(), 1)
				}
				return applyChanges(c, "docker", []setup.Change{ch}, setup.DockerHint(ch, o))
			},
		}, {
			Name:  "containerd",
			Usage: "add the runtime class \"vgpu\" (runc v2 shim running vgpu-runtime) to containerd, in a drop-in file",
			Description: `Writes the runtime class "vgpu" (runtime_type "io.containerd.runc.v2" with
options.BinaryName = <vgpu-runtime>) into the drop-in conf.d/` + setup.DropInName + ` beside
config.toml, and names the drop-in in config.toml's imports; nothing else of
config.toml changes. containerd 2.x (config version 3) merges the drop-in into
its settings; containerd 1.x (version 2) takes a plugin's section from an
import whole, so there the drop-in carries config.toml's whole CRI section
(change CRI settings in the drop-in, or run this again after changing them in
config.toml). A missing config.toml is created from ` + "`containerd config default`" + `.
Restart containerd; Kubernetes pods then select it with runtimeClassName: vgpu.`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "config", Value: setup.DefaultContainerdConfig, Usage: "containerd's configuration file"},
				&cli.StringFlag{Name: "drop-in", Usage: "the drop-in file (default: conf.d/" + setup.DropInName + " beside --config)"},
				&cli.StringFlag{Name: "runtime-path", Usage: "the binary the runc shim runs (default: vgpu-runtime next to this program, else on PATH)"},
				&cli.StringFlag{Name: "containerd", Value: "containerd", Usage: "containerd binary, to run \"containerd config default\" when the file is missing"},
				&cli.BoolFlag{Name: "default", Usage: "also make vgpu the CRI default runtime (default_runtime_name)"},
				&cli.BoolFlag{Name: "kubernetes", Usage: "also pass the vgpu device plugin's grants (container_annotations grant.vgpu.io/*); refuses a pod_annotations pattern that would let a pod forge one"},
				removeFlag, dryRunFlag,
			},
			Action: func(c *cli.Context) error {
				o := setup.ContainerdOptions{Default: c.Bool("default"), Remove: c.Bool("remove"), Kubernetes: c.Bool("kubernetes"), DefaultConfig: setup.ContainerdDefault(c.String("containerd")), DropIn: c.String("drop-in")}
				if !o.Remove {
					p, err := absFlag(c, "runtime-path", "vgpu-runtime")
					if err != nil {
						return cli.Exit("vgpu setup containerd: "+err.Error(), 1)
					}
					o.RuntimePath = p
				}
				if o.DropIn != "" {
					p, err := filepath.Abs(o.DropIn)
					if err != nil {
						return cli.Exit("vgpu setup containerd: "+err.Error(), 1)
					}
					o.DropIn = p
				}
				chs, err := setup.ContainerdChanges(c.String("config"), o)
				if err != nil {
					return cli.Exit("vgpu setup containerd: "+err.Error(), 1)
				}
				return applyChanges(c, "containerd", chs, setup.ContainerdRestart)
			},
		}, {
			Name:  "podman",
			Usage: "install the OCI hooks (vgpu-hook) into podman's hooks.d",
			Description: `Writes ` + setup.HookFiles[0].Name + ` and ` + setup.HookFiles[1].Name + ` into each hooks
directory podman reads: engine.hooks_dir of its containers.conf when set, else
both ` + strings.Join(setup.DefaultHooksDirs, " and ") + `
(podman 4, Debian 12's, reads only the first; a file in the second masks the
first's of the same name). They run for containers with the annotation
vgpu.io/visible-devices (with --default: for every container, so that VGPU_*
environment variables alone ask for GPUs). The engine must allow the device nodes:

   podman run --annotation vgpu.io/visible-devices=0 --annotation vgpu.io/memory-limit=4Gi \
     ` + discover.DeviceFlags(0) + ` IMAGE`,
			Flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "hooks-dir", Usage: "a hooks directory to write (repeat for several; default: the ones podman reads)"},
				&cli.StringFlag{Name: "hook-path", Usage: "vgpu-hook (default: next to this program, else on PATH)"},
				&cli.StringFlag{Name: "vgpu-config", EnvVars: []string{"VGPU_CONFIG"}, Value: config.DefaultPath, Usage: "vgpu configuration the hook reads (written into the hook's env when not the default)"},
				&cli.BoolFlag{Name: "default", Usage: "run the hooks for every container, not only annotated ones"},
				removeFlag, dryRunFlag,
			},
			Action: func(c *cli.Context) error {
				o := setup.PodmanOptions{HooksDirs: c.StringSlice("hooks-dir"), Default: c.Bool("default"), Remove: c.Bool("remove")}
				if !o.Remove {
					p, err := absFlag(c, "hook-path", "vgpu-hook")
					if err != nil {
						return cli.Exit("vgpu setup podman: "+err.Error(), 1)
					}
					o.HookPath = p
					if o.VgpuConfig, err = filepath.Abs(c.String("vgpu-config")); err != nil {
						return cli.Exit("vgpu setup podman: "+err.Error(), 1)
					}
				}
				chs, err := setup.PodmanChanges(o)
				if err != nil {
					return cli.Exit("vgpu setup podman: "+err.Error(), 1)
				}
				return applyChanges(c, "podman", chs, setup.PodmanNote)
			},
		}},
	}
}

func cdiCommand() *cli.Command {
	return &cli.Command{
		Name:  "cdi",
		Usage: "write or list CDI specs (kind " + cdispec.Kind + ": devices by index, UUID and \"all\")",
		Subcommands: []*cli.Command{{
			Name:  "generate",
			Usage: "write the CDI spec for this host's GPUs",
			Description: `Discovers the driver and GPUs as vgpu-runtime does and writes a CDI spec whose
edits give a container what vgpu-runtime gives it: device nodes, driver
libraries, the stand-in libraries, and two hooks (vgpu-hook createContainer
--cdi, poststop) that write the container's quota file and ld.so.preload from its
VGPU_* environment or vgpu.io/* annotations. The spec is validated with the CDI
library and written atomically. Run it again after a driver upgrade.

   podman run --device vgpu.io/gpu=0 -e VGPU_MEMORY_LIMIT=4Gi IMAGE`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the spec to this file (.yaml or .json), or - for standard output"},
				&cli.StringFlag{Name: "spec-dir", Value: cdispec.DefaultSpecDirs[0], Usage: "directory to write " + cdispec.FileName + " into, when no --output (engines read " + strings.Join(cdispec.DefaultSpecDirs, " and ") + ")"},
				&cli.StringFlag{Name: "hook-path", Usage: "vgpu-hook (default: next to this program, else on PATH)"},
				&cli.StringFlag{Name: "vgpu-config", EnvVars: []string{"VGPU_CONFIG"}, Value: config.DefaultPath, Usage: "vgpu configuration: read here, and given to the hook"},
			},
			Action: func(c *cli.Context) error {
				fail := func(err error) error { return cli.Exit("vgpu cdi generate: "+err.Error(), 1) }
				hook, err := absFlag(c, "hook-path", "vgpu-hook")
				if err != nil {
					return fail(err)
				}
				cfgPath, err := filepath.Abs(c.String("vgpu-config"))
				if err != nil {
					return fail(err)
				}
				cfg, err := config.Load(cfgPath)
				if err != nil {
					return fail(err)
				}
				// The spec mounts the stand-ins from library.dir: a missing
				// one would fail every container later, in the runtime.
				for _, l := range []string{plan.LibCuda, plan.LibNvml} {
					if _, err := os.Stat(filepath.Join(cfg.Library.Dir, l)); err != nil {
						return fail(fmt.Errorf("library.dir = %q (%s): %w; make install puts the stand-in libraries in /usr/lib/vgpu, or set library.dir to where they are", cfg.Library.Dir, cfgPath, err))
					}
				}
				host, err := discover.Discover(cfg)
				if err != nil {
					return fail(err)
				}
				raw, err := cdispec.Generate(cfg, host, cdispec.Options{HookPath: hook, ConfigPath: cfgPath})
				if err != nil {
					return fail(err)
				}
				switch out := c.String("output"); out {
				case "-":
					b, err := cdispec.Marshal(raw)
					if err != nil {
						return fail(err)
					}
					_, err = c.App.Writer.Write(b)
					return err
				case "":
					p, err := cdispec.WriteDir(raw, c.String("spec-dir"), cdispec.FileName)
					if err != nil {
						return fail(err)
					}
					fmt.Fprintf(c.App.Writer, "wrote %s: %d GPU(s), devices %s=0 … and %s=%s\n", p, len(host.GPUs), cdispec.Kind, cdispec.Kind, cdispec.AllDevices)
				default:
					p, err := cdispec.WriteDir(raw, filepath.Dir(out), filepath.Base(out))
					if err != nil {
						return fail(err)
					}
					fmt.Fprintf(c.App.Writer, "wrote %s\n", p)
				}
				return nil
			},
		}, {
			Name:  "list",
			Usage: "list the CDI devices in the spec directories",
			Flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "spec-dir", Value: cli.NewStringSlice(cdispec.DefaultSpecDirs...), Usage: "spec directories, lowest priority first"},
			},
			Action: func(c *cli.Context) error {
				entries, err := cdispec.List(c.StringSlice("spec-dir"))
				listEntries(c.App.Writer, entries)
				if err != nil {
					fmt.Fprintln(c.App.ErrWriter, "vgpu cdi list: specs with errors:\n"+err.Error())
					return cli.Exit("", 1)
				}
				if len(entries) == 0 {
					fmt.Fprintf(c.App.ErrWriter, "no CDI devices in %s (write one: vgpu cdi generate)\n", strings.Join(c.StringSlice("spec-dir"), ", "))
				}
				return nil
			},
		}},
	}
}

func listEntries(w io.Writer, entries []cdispec.Entry) {
	width := 0
	for _, e := range entries {
		if len(e.Name) > width {
			width = len(e.Name)
		}
	}
	for _, e := range entries {
		fmt.Fprintf(w, "%-*s  %s\n", width, e.Name, e.Spec)
	}
}
