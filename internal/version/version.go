// Package version is what every vgpu binary answers to --version: its own
// version and git commit (set at build time by the Makefile with
// -ldflags "-X github.com/vgpu-dev/vgpu/internal/version.Version=… -X ….Commit=…"),
// and the versions of what it drives: the driver under the configured driver
// root and, for the runtime and the CLI, the low-level runtime.
package version

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
)

// Unknown is what Version and Commit say when the build did not set them
// (go build without the Makefile's -ldflags).
const Unknown = "unknown"

// Set by the linker (Makefile: VERSION, git rev-parse).
var (
	Version = Unknown
	Commit  = Unknown
)

// Line is the first line of every binary's --version: "prog 0.1.0 (commit
// 0123abc, go1.26.8)".
func Line(prog string) string {
	if Version == "" {
		Version = Unknown
	}
	if Commit == "" {
		Commit = Unknown
	}
	return fmt.Sprintf("%s %s (commit %s, %s)", prog, Version, Commit, runtime.Version())
}

// Driver says which driver the configuration points at, without loading it:
// "driver: 580.95.05 (libcuda.so.580.95.05 under /)", or why there is none.
// cfg nil: the configuration could not be read (err says why).
func Driver(cfg *config.Config, err error) string {
	if err != nil {
		return "driver: unknown (" + err.Error() + ")"
	}
	h, err := discover.DriverFiles(cfg)
	if err != nil {
		return "driver: none found (" + err.Error() + ")"
	}
	return fmt.Sprintf("driver: %s (libcuda.so.%s under driver root %s)", h.DriverVersion, h.DriverVersion, cfg.Driver.Root)
}

// Runtime runs `rt --version` and returns its first line: "runtime: /usr/sbin/runc: runc version 1.1.12".
func Runtime(rt string, err error) string {
	if err != nil {
		return "runtime: none (" + err.Error() + ")"
	}
	out, err := exec.Command(rt, "--version").Output()
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil || first == "" {
		return fmt.Sprintf("runtime: %s (--version failed: %v)", rt, err)
	}
	return "runtime: " + rt + ": " + first
}
