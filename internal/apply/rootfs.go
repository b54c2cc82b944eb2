package apply

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// The hook path (podman hooks.d, or any engine that will not use the shim).
//
// A hook cannot edit config.json after the engine handed it to the runtime,
// so Rootfs does at run time what Spec writes into the spec.
// It must run as a createContainer hook: that stage runs in the container's
// mount namespace before pivot_root, so "/" is still the host (the driver
// files, the state directory) and the rootfs is at root.path. Bind mounts
// made there land in the container; mounts made in createRuntime (the
// runtime's namespace) would not propagate into a private rootfs.
//
// What the hook does:
//   - the pipeline writes the state directory (internal/state) first, as for the shim;
//   - creates each mount target inside the rootfs without following the
//     image's symlinks out of it (pathrs-lite), then attaches a clone of the
//     host path there (open_tree + mount_setattr of the options the shim
//     uses, plan.Mount.Flags + move_mount),
//     so the mount is read-only from its first moment;
//   - mknods the device nodes in <rootfs>/dev (runc has mounted /dev there by then).
//
// What it cannot do: add device cgroup rules. Rules a hook writes itself
// (devices.allow on v1, an eBPF program on v2) are thrown away by systemd on
// `systemctl daemon-reload` ("Failed to initialize NVML: Unknown Error",
// NVIDIA container toolkit #251/#1227). So CheckDeviceRules refuses to go on
// unless the spec's linux.resources.devices already allow every node: with
// podman, pass the nodes (--device /dev/nvidiactl --device /dev/nvidia-uvm
// --device /dev/nvidia0 …), which puts both node and rule into the spec, or
// use the shim. Matching: podman's hooks.d `when` sees annotations, not env,
// so only an annotation (vgpu.io/visible-devices) can trigger the hook; once
// running, the hook parses env and annotations with the same parser as the
// shim (env from config.json, read-only).

// CheckDeviceRules reports the plan's nodes that rules (linux.resources.devices,
// evaluated in order, last match wins) do not allow for rwm.
func CheckDeviceRules(p *plan.Plan, rules []specs.LinuxDeviceCgroup) error {
	return checkRules(rules, p.Nodes, "")
}

// checkRules is the one refusal of both checks: the --device flags missing
// for nodes, then more (what else to pass) if anything is missing.
func checkRules(rules []specs.LinuxDeviceCgroup, nodes []discover.DeviceNode, more string) error {
	var missing []string
	for _, n := range nodes {
		if !allowed(rules, n) {
			missing = append(missing, "--device "+n.Path)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the container's device cgroup does not allow the GPU nodes; a hook cannot add rules that survive a systemd reload, so pass them to the engine: %v%s (or use vgpu-runtime)", missing, more)
	}
	return nil
}

func allowed(rules []specs.LinuxDeviceCgroup, n discover.DeviceNode) bool {
	need := map[rune]bool{'r': true, 'w': true, 'm': true}
	state := map[rune]bool{}
	for _, r := range rules {
		if r.Type != "" && r.Type != "a" && r.Type != n.Type {
			continue
		}
		if r.Major != nil && *r.Major != n.Major || r.Minor != nil && *r.Minor != n.Minor {
			continue
		}
		acc := r.Access
		if acc == "" {
			acc = "rwm"
		}
		for _, c := range acc {
			state[c] = r.Allow
		}
	}
	for c := range need {
		if !state[c] {
			return false
		}
	}
	return true
}

// Rootfs performs the plan inside rootfs (see above). Call it from a
// createContainer hook after the state is written and CheckDeviceRules passed.
func Rootfs(p *plan.Plan, rootfs string) error {
	root, err := os.OpenFile(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, n := range p.Nodes {
		if err := mknodIn(root, n); err != nil {
			return fmt.Errorf("device %s: %w", n.Path, err)
		}
	}
	for _, m := range p.Mounts {
		if m.Dir && !m.ReadOnly && m.Destination == tenant.ContainerShared {
			if err := bindSharedFSIn(root, m); err != nil { // sharedfs_hook.go
				return fmt.Errorf("mount a capped tmpfs on %s: %w", m.Destination, err)
			}
			continue
		}
		if err := bindIn(root, m); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.Source, m.Destination, err)
		}
	}
	return nil
}

func mknodIn(root *os.File, n discover.DeviceNode) error {
	dir, err := pathrs.MkdirAllHandle(root, filepath.Dir(n.Path), 0o755)
	if err != nil {
		return err
	}
	defer dir.Close()
	base := filepath.Base(n.Path)
	err = unix.Mknodat(int(dir.Fd()), base, unix.S_IFCHR|uint32(n.FileMode.Perm()), int(unix.Mkdev(uint32(n.Major), uint32(n.Minor))))
	if errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if err := unix.Fstatat(int(dir.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && int64(unix.Major(st.Rdev)) == n.Major && int64(unix.Minor(st.Rdev)) == n.Minor {
			return nil
		}
		return fmt.Errorf("exists and is not char %d:%d", n.Major, n.Minor)
	}
	if err != nil {
		return err
	}
	return unix.Fchownat(int(dir.Fd()), base, int(n.UID), int(n.GID), unix.AT_SYMLINK_NOFOLLOW)
}

func bindIn(root *os.File, m plan.Mount) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, m.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	return attachIn(root, m, tree)
}

// attachIn creates m's target inside root and moves the detached mount tree
// there, with the options of plan.Mount.Flags.
func attachIn(root *os.File, m plan.Mount, tree int) error {
	dir, err := pathrs.MkdirAllHandle(root, filepath.Dir(m.Destination), 0o755)
	if err != nil {
		return err
	}
	defer dir.Close()
	base := filepath.Base(m.Destination)
	if m.Dir {
		if err := unix.Mkdirat(int(dir.Fd()), base, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
	} else {
		fd, err := unix.Openat(int(dir.Fd()), base, unix.O_CREAT|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o644)
		if err != nil && !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EISDIR) {
			return err
		}
		if err == nil {
			unix.Close(fd)
		}
	}
	target, err := unix.Openat(int(dir.Fd()), base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	attr := &unix.MountAttr{Attr_set: setattrFlags(m.Flags())} // the shim's options too (mountopts.go)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// CheckControlRules is the hook's first check, before discovery: GPU
// discovery opens the control nodes, which the container's device cgroup
// (the hook runs inside it) must already allow. Its error names the flags.
func CheckControlRules(cfg *config.Config, rules []specs.LinuxDeviceCgroup) error {
	var nodes []discover.DeviceNode
	for _, c := range discover.ControlNodes {
		n, err := discover.Node(cfg, c.Name)
		if err != nil {
			if c.Required {
				return err
			}
			continue
		}
		nodes = append(nodes, n)
	}
	return checkRules(rules, nodes, " and --device /dev/nvidiaN for each GPU")
}
