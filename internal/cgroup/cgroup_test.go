package cgroup

import (
	"os"
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
