package setup

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
)

// DefaultHooksDirs are the hooks directories podman reads when its
// containers.conf names none (PodmanHooksDirs): the distribution's, the only
// one podman 4 (Debian 12's 4.3.1) reads, and the administrator's, which
// newer podman and CRI-O also read. A file of the same name in the second
// masks the first, so writing both never runs the hook twice.
var DefaultHooksDirs = []string{"/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d"}

// HookPATH is the PATH given to the hook (runc starts hooks with only the
// environment listed in the hook entry).
const HookPATH = "PATH=" + config.HookPATH

// PodmanOptions say which hooks to install.
type PodmanOptions struct {
	HooksDirs  []string // default PodmanHooksDirs(nil)
	HookPath   string   // vgpu-hook, absolute
	VgpuConfig string   // given to the hook as VGPU_CONFIG unless it is the default
	// Default runs the hooks for every container (when: always), so that a
	// container asks with VGPU_* environment variables alone. Without it they
	// run only for containers with the annotation vgpu.io/visible-devices.
	Default bool
	Remove  bool
}

// HookFiles are the names of the files PodmanHooks writes, one per stage.
var HookFiles = []struct{ Name, Stage string }{
	{"vgpu-createcontainer.json", "createContainer"},
	{"vgpu-poststop.json", "poststop"},
}

// hooksFile is the hooks.d schema 1.0.0 (containers/common pkg/hooks).
type hooksFile struct {
	Version string   `json:"version"`
	Hook    hookSpec `json:"hook"`
	When    hookWhen `json:"when"`
	Stages  []string `json:"stages"`
}

type hookSpec struct {
	Path    string   `json:"path"`
	Args    []string `json:"args"`
	Env     []string `json:"env,omitempty"`
	Timeout int      `json:"timeout"`
}

type hookWhen struct {
	Always      bool              `json:"always,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PodmanHook returns the hooks.d file for one stage.
func PodmanHook(stage string, o PodmanOptions) ([]byte, error) {
	if !filepath.IsAbs(o.HookPath) {
		return nil, fmt.Errorf("hook path %q is not absolute", o.HookPath)
	}
	env := []string{HookPATH}
	if o.VgpuConfig != "" && o.VgpuConfig != config.DefaultPath {
		if !filepath.IsAbs(o.VgpuConfig) {
			return nil, fmt.Errorf("config path %q is not absolute", o.VgpuConfig)
		}
		env = append(env, "VGPU_CONFIG="+o.VgpuConfig)
	}
	h := hooksFile{
		Version: "1.0.0",
		Hook:    hookSpec{Path: o.HookPath, Args: []string{"vgpu-hook", stage}, Env: env, Timeout: 30},
		Stages:  []string{stage},
	}
	if o.Default {
		h.When.Always = true
	} else {
		// hooks.d matches annotations, not environment variables.
		h.When.Annotations = map[string]string{`^vgpu\.io/visible-devices$`: ".+"}
	}
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// PodmanChanges returns the hooks.d files to write (or remove), in every
// directory of o.HooksDirs (default: the ones podman reads, PodmanHooksDirs).
func PodmanChanges(o PodmanOptions) ([]Change, error) {
	dirs := o.HooksDirs
	if len(dirs) == 0 {
		var err error
		if dirs, err = PodmanHooksDirs(nil); err != nil {
			return nil, err
		}
	}
	if !o.Remove && o.HookPath == "" {
		return nil, errors.New("no path for vgpu-hook")
	}
	var out []Change
	for _, dir := range dirs {
		for _, f := range HookFiles {
			p := filepath.Join(dir, f.Name)
			before, err := readOptional(p)
			if err != nil {
				return nil, err
			}
			c := Change{Path: p, Before: before, Mode: 0o644}
			if !o.Remove {
				if c.After, err = PodmanHook(f.Stage, o); err != nil {
					return nil, err
				}
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// PodmanNote is what to tell the user after the hooks changed.
var PodmanNote = "podman reads hooks.d at each container start. A container asks with --annotation vgpu.io/visible-devices=0 --annotation vgpu.io/memory-limit=4Gi and must be given the device nodes: " + discover.DeviceFlags(0) + " (or use CDI: vgpu cdi generate, then --device vgpu.io/gpu=0)"
