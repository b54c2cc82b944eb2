package hook

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func cgroupTree(t *testing.T, procs map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for dir, list := range procs {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "cgroup.procs"), []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The host cgroup is the one whose cgroup.procs lists our pid: the path
// /proc/self/cgroup gives when it does, else found by a search (a private
// cgroup namespace shows "/"), never a cgroup listing a longer pid that
// merely starts with ours.
func TestHostCgroup(t *testing.T) {
	root := cgroupTree(t, map[string]string{
		"/":                        "1\n",
		"/system.slice":            "420\n",
		"/system.slice/other":      "4200\n 42x\n",
		"/machine.slice/ctr-1":     "7\n  42 \n",
		"/machine.slice/ctr-1/sub": "",
	})
	for _, c := range []struct{ seen, want string }{
		{"/machine.slice/ctr-1", "/machine.slice/ctr-1"},
		{"/", "/machine.slice/ctr-1"},
		{"/system.slice", "/machine.slice/ctr-1"},
		{"/no/such", "/machine.slice/ctr-1"},
	} {
		got, err := hostCgroup(root, c.seen, 42)
		if err != nil || got != c.want {
			t.Errorf("seen %s: %q, %v; want %s", c.seen, got, err, c.want)
		}
	}
	_, err := hostCgroup(root, "/", 43)
	if err == nil || !strings.Contains(err.Error(), "not found under "+root) {
		t.Errorf("pid in no cgroup: %v; want not found under the root", err)
	}
}

// The root cgroup is never the container's, even if it lists the pid.
func TestHostCgroupNotRoot(t *testing.T) {
	root := cgroupTree(t, map[string]string{"/": "42\n", "/a": "42\n"})
	if got, err := hostCgroup(root, "/", 42); err != nil || got != "/a" {
		t.Errorf("%q, %v; want /a", got, err)
	}
}

// recordInit never fails the container: where it cannot find the cgroup
// it warns once, naming the container and what vgpu node does instead.
func TestRecordInitWarns(t *testing.T) {
	old := cgroupRoot
	cgroupRoot = t.TempDir() // no cgroup lists us
	t.Cleanup(func() { cgroupRoot = old })
	var warn bytes.Buffer
	recordInit(t.TempDir(), "c1", &warn)
	w := warn.String()
	if !strings.Contains(w, "container c1: init and cgroup not recorded") || !strings.Contains(w, "vgpu node attributes") || strings.Count(w, "\n") != 1 {
		t.Errorf("warning %q", w)
	}
}
