//go:build integration

package apply

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/plan"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// rootfsFixture is a host side (a driver library, a read-write directory,
// a state directory) and an image rootfs whose /usr/lib is an absolute
// symlink out of it, as a hostile image may ship.
type rootfsFixture struct {
	rootfs, outside, lib, rwDir, stateDir string
}

// rootfsChildBase, when set, is the base directory a test made for this
// process, run in a mount namespace of its own (inOwnMountNS).
const rootfsChildBase = "VGPU_TEST_ROOTFS_BASE"

func newRootfsFixture(t *testing.T) *rootfsFixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounts need root (make test runs as root)")
	}
	base := os.Getenv(rootfsChildBase)
	if base == "" {
		base = t.TempDir()
		t.Cleanup(func() { unmountUnder(t, base) }) // before TempDir's removal
	}
	f := &rootfsFixture{
		rootfs:   filepath.Join(base, "rootfs"),
		outside:  filepath.Join(base, "outside"),
		lib:      filepath.Join(base, "host", "libnvidia-fake.so.1"),
		rwDir:    filepath.Join(base, "host", "ipc"),
		stateDir: filepath.Join(base, "state", "c1"),
	}
	// The symlink's target exists both on the host and inside the rootfs:
	// followed on the host, the mounts would land outside.
	for _, d := range []string{f.rootfs, filepath.Join(f.rootfs, "usr"), f.outside, filepath.Join(f.rootfs, f.outside), f.rwDir, filepath.Join(f.stateDir, config.StateShared)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(f.lib, []byte("the host's library"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, filepath.Join(f.rootfs, "usr", "lib")); err != nil {
		t.Fatal(err)
	}
	return f
}

// unmountUnder detaches every mount below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("unmount %s: %v", p, err)
		}
	}
}

// inOwnMountNS runs test name again in a child process in a mount
// namespace of its own, as the hook runs in the container's while its
// parent, the runtime, is in the host's: the share's tmpfs is mounted in
// the parent's namespace (this process's), the rest in the child's, which
// ends with it. It reports whether this process is that child and, if
// not, the base directory the child used.
func inOwnMountNS(t *testing.T, name string) (child bool, base string) {
	if os.Getenv(rootfsChildBase) != "" {
		return true, ""
	}
	if os.Geteuid() != 0 {
		t.Skip("mounts need root (make test runs as root)")
	}
	base = t.TempDir()
	t.Cleanup(func() { unmountUnder(t, base) }) // the share's tmpfs, in this namespace
	args := []string{"-test.run=^" + name + "$", "-test.count=1", "-test.v"}
	// Under make coverage, the child's counters join this test's: go test
	// merges what is in its coverage directory.
	if f := flag.Lookup("test.gocoverdir"); f != nil && f.Value.String() != "" {
		args = append(args, "-test.gocoverdir="+f.Value.String(), "-test.coverprofile="+filepath.Join(t.TempDir(), "child.out"))
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), rootfsChildBase+"="+base)
	// Go makes the new namespace's mounts private, so nothing propagates back.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("%s in a mount namespace of its own: %v\n%s", name, err, out)
	}
	return false, base
}

func statfs(t *testing.T, path string) unix.Statfs_t {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// The hook's mounts land inside the rootfs even through the image's own
// symlinks, with the shim's options from their first moment: the library
// read-only, nosuid, nodev; the read-write directory the host's own
// directory; the share a capped noexec tmpfs that the host sees at the
// state directory; the nodes character devices of the plan's numbers.
func TestRootfsMountsInsideWithOptions(t *testing.T) {
	if child, base := inOwnMountNS(t, "TestRootfsMountsInsideWithOptions"); !child {
		// The host's side: the share is a tmpfs in this namespace, at the
		// state directory, holding what the container wrote.
		shared := filepath.Join(base, "state", "c1", config.StateShared)
		if st := statfs(t, shared); st.Type != unix.TMPFS_MAGIC {
			t.Errorf("%s: type %#x, want the share's tmpfs mounted in the host's namespace", shared, st.Type)
		}
		if _, err := os.Stat(filepath.Join(shared, "vgpu.region")); err != nil {
			t.Errorf("the host does not see the container's share at the state directory: %v", err)
		}
		return
	}
	f := newRootfsFixture(t)
	const libDest = "/usr/lib/x86_64-linux-gnu/libnvidia-fake.so.1"
	p := &plan.Plan{
		ContainerID: "c1",
		StateDir:    f.stateDir,
		// /dev/null's numbers: a node that is harmless to have made.
		Nodes: []discover.DeviceNode{{Path: "/dev/nvidiactl", Type: "c", Major: 1, Minor: 3, FileMode: 0o666}},
		Mounts: []plan.Mount{
			{Source: f.lib, Destination: libDest, ReadOnly: true},
			{Source: f.rwDir, Destination: "/run/nvidia-ipc", Dir: true},
			{Source: filepath.Join(f.stateDir, config.StateShared), Destination: tenant.ContainerShared, Dir: true},
		},
	}
	if err := Rootfs(p, f.rootfs); err != nil {
		t.Fatal(err)
	}

	// The image's /usr/lib -> <outside> is resolved inside the rootfs: the
	// host directory it names gets nothing.
	if ents, err := os.ReadDir(f.outside); err != nil || len(ents) != 0 {
		t.Errorf("the image's symlink led the mount out of the rootfs: %s holds %v (%v)", f.outside, ents, err)
	}
	lib := filepath.Join(f.rootfs, f.outside, "x86_64-linux-gnu", "libnvidia-fake.so.1")
	if b, err := os.ReadFile(lib); err != nil || string(b) != "the host's library" {
		t.Fatalf("the library inside the rootfs (%s): %q %v, want the host's bytes", lib, b, err)
	}
	if _, err := os.OpenFile(lib, os.O_WRONLY, 0); !errors.Is(err, unix.EROFS) {
		t.Errorf("the library opened for writing: %v, want EROFS", err)
	}
	const want = unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NODEV
	if fl := statfs(t, lib).Flags; fl&want != want {
		t.Errorf("the library's mount flags %#x, want ro, nosuid, nodev (%#x)", fl, want)
	}

	rw := filepath.Join(f.rootfs, "run", "nvidia-ipc")
	if err := os.WriteFile(filepath.Join(rw, "sock"), []byte("x"), 0o644); err != nil {
		t.Fatalf("the read-write directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.rwDir, "sock")); err != nil {
		t.Errorf("a file made in the container's directory is not in the host's: %v", err)
	}
	if fl := statfs(t, rw).Flags; fl&unix.ST_RDONLY != 0 || fl&(unix.ST_NOSUID|unix.ST_NODEV) != unix.ST_NOSUID|unix.ST_NODEV {
		t.Errorf("the read-write directory's mount flags %#x, want rw, nosuid, nodev", fl)
	}

	shared := filepath.Join(f.rootfs, tenant.ContainerShared)
	st := statfs(t, shared)
	if st.Type != unix.TMPFS_MAGIC || uint64(st.Blocks)*uint64(st.Bsize) != SharedFSSize || st.Files != SharedFSInodes {
		t.Errorf("the share: type %#x, %d bytes, %d inodes; want a tmpfs of %d bytes, %d inodes", st.Type, uint64(st.Blocks)*uint64(st.Bsize), st.Files, SharedFSSize, SharedFSInodes)
	}
	if st.Flags&unix.ST_NOEXEC == 0 || st.Flags&unix.ST_RDONLY != 0 {
		t.Errorf("the share's mount flags %#x, want rw, noexec", st.Flags)
	}
	if err := os.WriteFile(filepath.Join(shared, "vgpu.region"), []byte("r"), 0o644); err != nil {
		t.Fatal(err)
	}

	var dev unix.Stat_t
	if err := unix.Lstat(filepath.Join(f.rootfs, "dev", "nvidiactl"), &dev); err != nil {
		t.Fatal(err)
	}
	if dev.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(dev.Rdev) != 1 || unix.Minor(dev.Rdev) != 3 {
		t.Errorf("/dev/nvidiactl: mode %#o rdev %d:%d, want char 1:3", dev.Mode, unix.Major(dev.Rdev), unix.Minor(dev.Rdev))
	}
}

// A node path the image already holds as something else is refused, naming
// the node, before anything is mounted.
func TestRootfsRefusesImpostorNode(t *testing.T) {
	f := newRootfsFixture(t)
	if err := os.MkdirAll(filepath.Join(f.rootfs, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.rootfs, "dev", "nvidia0"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{
		StateDir: f.stateDir,
		Nodes:    []discover.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 1, Minor: 3, FileMode: 0o666}},
		Mounts:   []plan.Mount{{Source: f.lib, Destination: "/lib/libnvidia-fake.so.1", ReadOnly: true}},
	}
	err := Rootfs(p, f.rootfs)
	if err == nil || !strings.Contains(err.Error(), "/dev/nvidia0") || !strings.Contains(err.Error(), "not char 1:3") {
		t.Fatalf("err %v, want /dev/nvidia0 refused as not char 1:3", err)
	}
	if _, err := os.Stat(filepath.Join(f.rootfs, "lib", "libnvidia-fake.so.1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a mount was made after the refusal: %v", err)
	}
}
