//go:build k8s

package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The real containerd (v2.4.2 of test/k8s/tools, VGPU_K8S_TOOLS) reads what
// the installer wrote: from its own `config default`, `config dump` shows the
// runtime class vgpu running the installed vgpu-runtime; after remove,
// config.toml is byte for byte containerd's default again.
func TestKubernetesContainerdReadsInstall(t *testing.T) {
	tools := os.Getenv("VGPU_K8S_TOOLS")
	if tools == "" {
		t.Fatal("VGPU_K8S_TOOLS is not set: run make k8s-test (test/k8s/build.sh prints the directory)")
	}
	containerd := filepath.Join(tools, "containerd")
	def, err := exec.Command(containerd, "config", "default").Output()
	if err != nil {
		t.Fatalf("containerd config default: %v", err)
	}
	f := newFixture(t, string(def))
	before := tree(t, f.host)
	if _, err := Install(f.o); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(f.host, "etc/containerd/config.toml")
	// The drop-in is imported by the node's path; here the node is f.host,
	// so containerd reads a copy whose import names the file under it.
	data, _ := os.ReadFile(cfg)
	copyCfg := filepath.Join(t.TempDir(), "config.toml")
	mustWrite(t, copyCfg, bytes.ReplaceAll(data, []byte("/etc/containerd/conf.d/"), []byte(f.host+"/etc/containerd/conf.d/")), 0o644)
	dump, err := exec.Command(containerd, "--config", copyCfg, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, dump)
	}
	d := string(dump)
	i := strings.Index(d, "runtimes.vgpu]")
	if i < 0 || !strings.Contains(d[i:], "/opt/vgpu/bin/vgpu-runtime") || !strings.Contains(d, "runtimes.runc]") {
		t.Errorf("containerd's merged configuration lacks the runtime class vgpu with the installed runtime (or lost runc):\n%s", d)
	}
	if _, err := Remove(f.o); err != nil {
		t.Fatal(err)
	}
	if diff := diffTrees(before, tree(t, f.host)); len(diff) != 0 {
		t.Errorf("after remove: %v", diff)
	}
}
