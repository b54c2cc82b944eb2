//go:build integration

package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

const hybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
const unified = `29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
`
const legacy = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
`

func TestV2Mount(t *testing.T) {
	for _, c := range []struct{ name, mi, want string }{
		{"hybrid", hybrid, "/sys/fs/cgroup/unified"},
		{"unified", unified, "/sys/fs/cgroup"},
		{"v1 alone", legacy, ""},
		{"escaped", `1 2 0:1 / /mnt/a\040b rw - cgroup2 none rw` + "\n", "/mnt/a b"},
	} {
		if got := V2Mount([]byte(c.mi)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestV2Path(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"9:name=systemd:/x\n4:memory:/x\n0::/x\n", "/x", true},
		{"0::/system.slice/docker-abc.scope\n", "/system.slice/docker-abc.scope", true},
		{"0::/\n", "/", true},
		{"4:memory:/x\n", "", false},        // v1 alone
		{"0::/x/../y\n", "", false},         // not clean
		{"0::x\n", "", false},               // relative
		{"0::/gone (deleted)\n", "", false}, // removed
	} {
		got, ok := V2Path([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("%q: %q %v, want %q %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// This process's own cgroup: the host's v2 mount joined with its "0::" line.
func TestOfSelf(t *testing.T) {
	p, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		t.Errorf("Of(self) = %s: not a directory (%v)", p, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(hybrid), []byte("0::/x\n"))
	f.Add([]byte(unified), []byte("0::/\n"))
	f.Fuzz(func(t *testing.T, mi, pc []byte) {
		if m := V2Mount(mi); m != "" && m[0] != '/' {
			t.Fatalf("mount %q not absolute", m)
		}
		if p, ok := V2Path(pc); ok && (p == "" || p[0] != '/') {
			t.Fatalf("path %q", p)
		}
	})
}

// In the host's cgroup namespace, Self is Of(own pid).
func TestSelf(t *testing.T) {
	a, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := Of(os.Getpid()); err != nil || a != b {
		t.Errorf("Self %q, Of(self) %q (%v)", a, b, err)
	}
}

// A process in a cgroup namespace of its own (as a hook inside a container
// with one) still finds its host path, through its parent's namespace.
func TestSelfInCgroupNamespace(t *testing.T) {
	if os.Getenv("CGROUP_SELF_CHILD") != "" {
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("making a cgroup and a cgroup namespace needs root: run as root, as CI does")
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	dir, err := os.MkdirTemp(V2Mount(mi), "vgpu-cgtest-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSelfChild$")
	cmd.Env = append(os.Environ(), "CGROUP_SELF_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWCGROUP, UseCgroupFD: true, CgroupFD: fd}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SELF "+dir+"\n") || !strings.Contains(string(out), "RAW 0::/\n") {
		t.Errorf("in its own cgroup namespace the child found %q, want SELF %s (and its raw view 0::/)", out, dir)
	}
}

func TestSelfChild(t *testing.T) {
	if os.Getenv("CGROUP_SELF_CHILD") == "" {
		return // only the child of TestSelfInCgroupNamespace
	}
	p, err := Self()
	raw, _ := os.ReadFile("/proc/self/cgroup")
	v, _ := V2Path(raw)
	fmt.Printf("SELF %s\nRAW 0::%s\nERR %v\n", p, v, err)
}
