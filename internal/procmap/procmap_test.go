package procmap

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

type fakeHost struct {
	t           *testing.T
	proc, state string
}

func newFakeHost(t *testing.T) *fakeHost {
	return &fakeHost{t: t, proc: t.TempDir(), state: t.TempDir()}
}

// container writes a container's state; info is container.json's text.
func (h *fakeHost) container(id, info string) string {
	cdir := filepath.Join(h.state, id)
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, "quota"), []byte("vgpu-quota 1\ndriver-cuda /x\ndriver-nvml /y\nshared-dir /run/vgpu/shared\ndevice 0 GPU-a memory=1024\n"), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, "container.json"), []byte(info), 0o644); err != nil {
		h.t.Fatal(err)
	}
	return cdir
}

// proc makes /proc/<pid>: its cgroup (v1 freezer line), its start time, a
// mount namespace of its own, and /run/vgpu/quota in its root linked to
// quota (the host path of a container's quota file; "" for none).
func (h *fakeHost) mkproc(pid int, cg string, start uint64, quota string) {
	d := filepath.Join(h.proc, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(d, "root", "run", "vgpu"), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink("mnt:[4026531999]", filepath.Join(d, "ns", "mnt")); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "cgroup"), []byte("6:freezer:"+cg+"\n0::/\n"), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "stat"), []byte(fmt.Sprintf("%d (sh) S 1 %d %d 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 %d 1 1", pid, pid, pid, start)), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if quota != "" {
		if err := os.Link(quota, filepath.Join(d, "root", "run", "vgpu", "quota")); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *fakeHost) owners(m *Map, want map[int]string) {
	h.t.Helper()
	for pid, w := range want {
		got := ""
		if c := m.Owner(pid); c != nil {
			got = c.ID
		}
		if got != w {
			h.t.Errorf("owner of %d: %q, want %q", pid, got, w)
		}
	}
}

// A fake /proc and state directory: the init's cgroup decides membership,
// a process in a sub-cgroup belongs too, one in a sibling does not. The
// cgroup bound from the init is written back to container.json.
func TestOwnerByCgroup(t *testing.T) {
	h := newFakeHost(t)
	cdir := h.container("c1", `{"id":"c1","created":"2026-01-01T00:00:00Z","pids":[100],"devices":[]}`)
	q := filepath.Join(cdir, "quota")
	h.mkproc(100, "/runc/c1", 5000, q)
	h.mkproc(101, "/runc/c1/sub", 5001, "") // hid its quota file (own mount namespace): still the container's
	h.mkproc(102, "/runc/c10", 5002, q)     // a sibling cgroup
	h.mkproc(103, "/", 5003, "")
	m, err := Load(h.state, h.proc)
	if err != nil || len(m.Containers) != 1 || m.Containers[0].InitPID != 100 || m.Containers[0].Cgroup != "/runc/c1" || !m.Containers[0].Bound {
		t.Fatalf("load: %+v %v", m.Containers[0], err)
	}
	h.owners(m, map[int]string{100: "c1", 101: "c1", 102: "", 103: "", 999: ""})
	if err := m.Bind(h.state); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(cdir, "container.json"))
	if !strings.Contains(string(b), `"cgroup": "/runc/c1"`) || !strings.Contains(string(b), `"initStart": 5000`) {
		t.Errorf("container.json after Bind: %s", b)
	}
	// the init moved into a cgroup of its own making and hid /run/vgpu: the
	// recorded cgroup holds
	os.RemoveAll(filepath.Join(h.proc, "100"))
	h.mkproc(100, "/runc/c1/hidden", 5000, "")
	m, _ = Load(h.state, h.proc)
	if c := m.Containers[0]; c.Cgroup != "/runc/c1" || c.InitPID != 100 || c.Bound {
		t.Errorf("after the move: %+v", c)
	}
	h.owners(m, map[int]string{100: "c1", 101: "c1", 102: ""})
}

// A vgpu exec record binds no cgroup, even when its process runs in a mount
// namespace of its own (a wrapper's unshare): the cgroup is its caller's,
// where the node and other host processes run too.
func TestOwnerExecBindsNoCgroup(t *testing.T) {
	h := newFakeHost(t)
	h.container("exec-100-1", `{"version":2,"id":"exec-100-1","created":"2026-01-01T00:00:00Z","pids":[100],"initStart":5000,"onHost":true,"devices":[]}`)
	h.mkproc(100, "/user.slice/session-1", 5000, "")
	h.mkproc(101, "/user.slice/session-1", 5001, "") // a neighbour in the caller's session
	m, err := Load(h.state, h.proc)
	if err != nil || m.Containers[0].Cgroup != "" || m.Containers[0].Bound {
		t.Fatalf("load: %+v %v", m.Containers[0], err)
	}
	h.owners(m, map[int]string{100: "", 101: ""})
}

// For memory borrowing, a vgpu exec's command and every process below it
// are the record's, by descent from the recorded vgpu exec (pid and start time): a neighbour in
// the caller's session is not, nor is anything once the vgpu exec is gone
// (its pid reused by another process), and then the record is Gone.
func TestOwnerExecByDescent(t *testing.T) {
	h := newFakeHost(t)
	h.container("exec-100-1", `{"version":2,"id":"exec-100-1","created":"2026-01-01T00:00:00Z","pids":[100],"initStart":5000,"onHost":true,"devices":[]}`)
	h.mkproc(100, "/user.slice/session-1", 5000, "")
	h.mkproc(101, "/user.slice/session-1", 5001, "")
	h.mkproc(102, "/user.slice/session-1", 5002, "")
	h.mkproc(103, "/user.slice/session-1", 5003, "")
	h.reparent(102, 100) // sh, the command
	h.reparent(103, 102) // its two workers
	h.mkproc(104, "/user.slice/session-1", 5004, "")
	h.reparent(104, 102)
	m, err := Load(h.state, h.proc)
	if err != nil || m.Containers[0].Gone {
		t.Fatalf("load: %+v %v", m.Containers[0], err)
	}
	h.owners(m, map[int]string{102: "", 103: "", 104: "", 101: ""}) // enforcement leaves them alone
	h.execOwners(m, map[int]string{102: "exec-100-1", 103: "exec-100-1", 104: "exec-100-1", 101: ""})
	os.RemoveAll(filepath.Join(h.proc, "100"))
	h.mkproc(100, "/user.slice/session-1", 6000, "") // the pid reused
	m, _ = Load(h.state, h.proc)
	if !m.Containers[0].Gone {
		t.Errorf("the vgpu exec gone, its pid reused: the record is not Gone: %+v", m.Containers[0])
	}
	h.execOwners(m, map[int]string{102: "", 103: "", 104: ""})
}

func (h *fakeHost) execOwners(m *Map, want map[int]string) {
	h.t.Helper()
	for pid, w := range want {
		got := ""
		if c := m.ExecOwner(pid); c != nil {
			got = c.ID
		}
		if got != w {
			h.t.Errorf("vgpu exec owner of %d: %q, want %q", pid, got, w)
		}
	}
}

// reparent makes ppid the parent of pid in its stat.
func (h *fakeHost) reparent(pid, ppid int) {
	p := filepath.Join(h.proc, strconv.Itoa(pid), "stat")
	b, _ := os.ReadFile(p)
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), "(sh) S 1 ", fmt.Sprintf("(sh) S %d ", ppid), 1)), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// A container whose cgroup is recorded: every process of the cgroup is its,
// whatever it sees (a tenant that moved /run/vgpu away), and no process
// outside it is, whatever it sees.
func TestOwnerRecordedCgroupNotVisibility(t *testing.T) {
	h := newFakeHost(t)
	cdir := h.container("c1", `{"id":"c1","created":"2026-01-01T00:00:00Z","pids":[100],"initStart":7,"cgroup":"/k/c1","devices":[]}`)
	h.mkproc(100, "/k/c1", 7, "")                              // mv /run/vgpu /run/hidden
	h.mkproc(101, "/k/c1", 9, "")                              // its GPU worker, same
	h.mkproc(102, "/k/other", 9, filepath.Join(cdir, "quota")) // sees the quota file, another cgroup
	m, err := Load(h.state, h.proc)
	if err != nil || m.Containers[0].InitPID != 100 || m.Containers[0].Cgroup != "/k/c1" {
		t.Fatalf("load: %+v %v", m.Containers[0], err)
	}
	h.owners(m, map[int]string{100: "c1", 101: "c1", 102: ""})
	// a reused pid (another start time) is not the init; the cgroup holds
	os.RemoveAll(filepath.Join(h.proc, "100"))
	h.mkproc(100, "/k/c1", 8, "")
	m, _ = Load(h.state, h.proc)
	if c := m.Containers[0]; c.InitPID != 0 || c.Cgroup != "/k/c1" {
		t.Errorf("reused init pid: %+v", c)
	}
}

// A container's /run/vgpu/quota that is an absolute symlink to a
// neighbour's quota file on the host does not make it the neighbour's:
// the path is resolved inside the process's root.
func TestOwnerSymlinkToNeighbourQuota(t *testing.T) {
	h := newFakeHost(t)
	ndir := h.container("neighbour", `{"id":"neighbour","created":"2026-01-01T00:00:00Z","devices":[]}`)
	h.mkproc(200, "/k/neighbour", 1, filepath.Join(ndir, "quota"))
	h.mkproc(300, "/k/tenant", 1, "")
	if err := os.Symlink(filepath.Join(ndir, "quota"), filepath.Join(h.proc, "300", "root", "run", "vgpu", "quota")); err != nil {
		t.Fatal(err)
	}
	m, err := Load(h.state, h.proc)
	if err != nil {
		t.Fatal(err)
	}
	h.owners(m, map[int]string{200: "neighbour", 300: ""})
}
