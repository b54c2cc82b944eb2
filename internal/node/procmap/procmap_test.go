package procmap

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestParseCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, in      string
		unified, frzr string
		path          string
	}{
		{"v1", "12:freezer:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n", "", "/docker/abc", "/docker/abc"},
		{"v1 with combined controllers", "6:cpu,cpuacct,freezer:/x/y\n0::/\n", "/", "/x/y", "/x/y"},
		{"v2", "0::/system.slice/docker-abc.scope\n", "/system.slice/docker-abc.scope", "", "/system.slice/docker-abc.scope"},
		{"hybrid", "6:freezer:/runc/c1\n0::/user.slice\n", "/user.slice", "/runc/c1", "/runc/c1"},
		{"path with colon", "0::/a:b/c\n", "/a:b/c", "", "/a:b/c"},
	} {
		cg, err := ParseCgroup([]byte(tc.in))
		if err != nil || cg.Unified != tc.unified || cg.Freezer != tc.frzr || cg.Path() != tc.path {
			t.Errorf("%s: %+v %v, want unified %q freezer %q", tc.name, cg, err, tc.unified, tc.frzr)
		}
	}
	for _, bad := range []string{"", "garbage", "x:freezer:/a", "1:freezer:relative"} {
		if _, err := ParseCgroup([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestUnder(t *testing.T) {
	for _, tc := range []struct {
		p, cg string
		want  bool
	}{{"/a/b", "/a/b", true}, {"/a/b/c", "/a/b", true}, {"/a/bc", "/a/b", false}, {"/a", "/", false}, {"/a", "", false}} {
		if got := Under(tc.p, tc.cg); got != tc.want {
			t.Errorf("Under(%q, %q) = %v", tc.p, tc.cg, got)
		}
	}
}

func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("12:freezer:/docker/abc\n0::/x\n"))
	f.Add([]byte("0::/\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cg, err := ParseCgroup(b)
		if err == nil && cg.Path() != "" && cg.Path()[0] != '/' {
			t.Fatalf("relative path %q", cg.Path())
		}
	})
}

// A fake /proc and state directory: the init's cgroup decides membership,
// a process in a sub-cgroup belongs too, one in a sibling does not.
func TestOwnerByCgroup(t *testing.T) {
	proc, state := t.TempDir(), t.TempDir()
	cdir := filepath.Join(state, "c1")
	os.MkdirAll(cdir, 0o755)
	os.WriteFile(filepath.Join(cdir, "quota"), []byte("vgpu-quota 1\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\ndevice 0 GPU-a memory=1024\n"), 0o644)
	os.WriteFile(filepath.Join(cdir, "container.json"), []byte(`{"id":"c1","created":"2026-01-01T00:00:00Z","pids":[100],"devices":[]}`), 0o644)
	mk := func(pid int, cg string, seesQuota bool) {
		d := filepath.Join(proc, strconv.Itoa(pid))
		os.MkdirAll(filepath.Join(d, "root", "run", "vgpu"), 0o755)
		os.WriteFile(filepath.Join(d, "cgroup"), []byte("6:freezer:"+cg+"\n0::/\n"), 0o644)
		if seesQuota {
			os.Link(filepath.Join(cdir, "quota"), filepath.Join(d, "root", "run", "vgpu", "quota"))
		}
	}
	mk(100, "/runc/c1", true)
	mk(101, "/runc/c1/sub", false) // hid its quota file (own mount namespace): still the container's
	mk(102, "/runc/c10", true)     // a sibling cgroup
	mk(103, "/", false)
	m, err := Load(state, proc)
	if err != nil || len(m.Containers) != 1 || m.Containers[0].InitPID != 100 || m.Containers[0].Cgroup.Freezer != "/runc/c1" {
		t.Fatalf("load: %+v %v", m, err)
	}
	for pid, want := range map[int]string{100: "c1", 101: "c1", 102: "", 103: "", 999: ""} {
		got := ""
		if c := m.Owner(pid); c != nil {
			got = c.ID
		}
		if got != want {
			t.Errorf("owner of %d: %q, want %q", pid, got, want)
		}
	}
}
