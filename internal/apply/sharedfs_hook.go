package apply

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/plan"
)

// The hook path's capped share. The createContainer hook runs in the
// container's mount namespace: a tmpfs it mounted on <state_dir>/<id>/shared
// there would be invisible to the host's tools. So the hook mounts it in the
// runtime's mount namespace (the first ancestor process in another mount
// namespace than the hook's: runc's parent), from a thread of its own that
// enters that namespace, clones the mount there (open_tree) and hands the
// clone back; the clone, a detached tree, is then attached in the
// container's rootfs like every other mount. Host and container see one
// tmpfs; the poststop hook (runtime namespace) unmounts it (state.Remove).

// bindSharedFSIn mounts the capped tmpfs on m.Source in the runtime's mount
// namespace and attaches it at m.Destination inside root.
func bindSharedFSIn(root *os.File, m plan.Mount) error {
	ns, err := runtimeMountNS()
	if err != nil {
		return err
	}
	tree, undo, err := inMountNS(ns, func() (int, error) {
		if err := mountSharedFS(strings.TrimSuffix(m.Source, "/"+config.StateShared)); err != nil {
			return -1, err
		}
		tree, err := unix.OpenTree(unix.AT_FDCWD, m.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			unix.Unmount(m.Source, unix.MNT_DETACH)
			return -1, fmt.Errorf("open_tree: %w", err)
		}
		return tree, nil
	}, func() { unix.Unmount(m.Source, unix.MNT_DETACH) })
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	err = attachIn(root, m, tree)
	undo(err != nil)
	return err
}

// runtimeMountNS returns /proc/<pid>/ns/mnt of the nearest ancestor in
// another mount namespace than this process ("" when there is none: this
// process is in the runtime's namespace already).
func runtimeMountNS() (string, error) {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return "", err
	}
	pid := os.Getpid()
	if p, err := os.Readlink("/proc/self"); err == nil { // the pid as this /proc counts
		if n, err := strconv.Atoi(p); err == nil {
			pid = n
		}
	}
	for i := 0; i < 64 && pid > 1; i++ {
		pid, err = parentPID(pid)
		if err != nil {
			return "", err
		}
		if pid <= 0 {
			break
		}
		path := fmt.Sprintf("/proc/%d/ns/mnt", pid)
		ns, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if ns != self {
			return path, nil
		}
	}
	return "", nil
}

func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("no PPid in /proc/" + strconv.Itoa(pid) + "/status")
}

// inMountNS runs do in the mount namespace ns ("" = this one) on a thread
// of its own, and then finish(undo) there: undo runs first when asked for.
// The thread is never given back to the Go scheduler (it leaves with its
// goroutine).
func inMountNS(ns string, do func() (int, error), undo func()) (int, func(bool), error) {
	finishHere := func(u bool) {
		if u {
			undo()
		}
	}
	if ns == "" {
		fd, err := do()
		return fd, finishHere, err
	}
	type result struct {
		fd  int
		err error
	}
	res := make(chan result)
	finishReq := make(chan bool)
	finished := make(chan struct{})
	go func() {
		runtime.LockOSThread() // no Unlock: the thread dies with this goroutine
		fail := func(err error) { res <- result{-1, err} }
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			fail(fmt.Errorf("unshare(CLONE_FS): %w", err))
			return
		}
		nsfd, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fail(err)
			return
		}
		err = unix.Setns(nsfd, unix.CLONE_NEWNS)
		unix.Close(nsfd)
		if err != nil {
			fail(fmt.Errorf("setns %s: %w", ns, err))
			return
		}
		fd, err := do()
		res <- result{fd, err}
		if err != nil {
			return
		}
		finishHere(<-finishReq)
		close(finished)
	}()
	r := <-res
	if r.err != nil {
		return -1, nil, r.err
	}
	return r.fd, func(u bool) { finishReq <- u; <-finished }, nil
}
