// Package hook is vgpu-hook: the OCI hook that gives a container what
// vgpu-runtime would have put in its spec, for engines that take hooks but no
// custom runtime (podman hooks.d, CDI).
//
// Stages (see docs/hook.md):
//   - createContainer: runs in the container's mount namespace before
//     pivot_root, the host's / still visible and the rootfs at the spec's
//     root.path. The hook writes the state dir, creates the device nodes and
//     bind-mounts the libraries, quota file, shared dir and ld.so.preload into
//     the rootfs. Mounts made there stay private to the container.
//   - poststop: removes the state dir.
//
// The device cgroup is the engine's: a hook cannot change the spec, and rules
// written into the cgroup by a hook vanish on `systemctl daemon-reload`. The
// hook therefore never writes cgroup rules; it checks the spec's rules and
// warns when they deny the nodes (grant them with podman --device or CDI).
package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vgpu-dev/vgpu/internal/shim"
	"github.com/vgpu-dev/vgpu/internal/spec"
)

// hookPath is set for the hook and what it runs: runc starts hooks with only the
// environment the hook entry lists.
const hookPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Main is vgpu-hook; args is argv[1:] (the stage), stdin the OCI state.
func Main(args []string, stdin io.Reader, stderr io.Writer) int {
	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", hookPath)
	}
	if err := run(args, stdin); err != nil {
		fmt.Fprintln(stderr, "vgpu-hook: "+err.Error())
		return 1
	}
	return 0
}

func run(args []string, stdin io.Reader) error {
	if len(args) != 1 {
		return errors.New("usage: vgpu-hook createContainer|createRuntime|poststop (OCI state on stdin)")
	}
	var st specs.State
	if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&st); err != nil {
		return fmt.Errorf("reading the OCI state from stdin: %w", err)
	}
	if st.Bundle == "" || st.ID == "" {
		return errors.New("OCI state without id or bundle")
	}
	switch args[0] {
	case "createContainer", "createRuntime", "prestart":
		return create(&st)
	case "poststop":
		return poststop(&st)
	default:
		return fmt.Errorf("unknown stage %q", args[0])
	}
}

func create(st *specs.State) error {
	s, err := spec.LoadBundle(st.Bundle)
	if err != nil {
		return err
	}
	if spec.Injected(s.Annotations()) {
		return nil // vgpu-runtime already put everything in the spec
	}
	req, err := shim.Request(s)
	if err != nil || req == nil {
		return err
	}
	return fmt.Errorf("container %s asks for a GPU, but this build cannot give it one yet (internal/inject missing)", st.ID)
}

func poststop(st *specs.State) error {
	// Only our own state: the id is one path element.
	if st.ID == "." || st.ID == ".." || filepath.Base(st.ID) != st.ID {
		return fmt.Errorf("bad container id %q", st.ID)
	}
	return os.RemoveAll(filepath.Join(shim.StateDir(), st.ID))
}

// DeniedDevices returns the nodes among devs that the spec's device cgroup
// rules do not allow for read+write (the last matching rule wins, as in runc).
func DeniedDevices(rules []specs.LinuxDeviceCgroup, devs []specs.LinuxDevice) []specs.LinuxDevice {
	var denied []specs.LinuxDevice
	for _, d := range devs {
		allowed := false
		for _, r := range rules {
			if r.Type != "" && r.Type != "a" && r.Type != d.Type {
				continue
			}
			if r.Major != nil && *r.Major != d.Major || r.Minor != nil && *r.Minor != d.Minor {
				continue
			}
			if r.Access != "" && !(containsAll(r.Access, "rw")) && r.Allow {
				continue
			}
			allowed = r.Allow
		}
		if !allowed {
			denied = append(denied, d)
		}
	}
	return denied
}

func containsAll(s, chars string) bool {
	for _, c := range chars {
		found := false
		for _, x := range s {
			if x == c {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
