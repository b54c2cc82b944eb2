//go:build k8s

package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// nvidiaDropIn is the drop-in NVIDIA's container toolkit writes for
// containerd 2.x (`nvidia-ctk runtime configure --runtime=containerd
// --set-as-default`, as the GPU Operator's toolkit runs it): the runtime
// class nvidia, made the default.
const nvidiaDropIn = `version = 3

[plugins]
  [plugins."io.containerd.cri.v1.runtime"]
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "nvidia"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes]
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
`

// Beside the GPU Operator's toolkit on one node: the real containerd
// (v2.4.2, VGPU_K8S_TOOLS) reads both drop-ins; the toolkit's runtime
// class and its choice of default runtime stay, vgpu adds its class and
// changes no default (pods choose vgpu with runtimeClassName: vgpu);
// remove leaves the toolkit's drop-in and the config as they were.
func TestKubernetesContainerdBesideNVIDIAToolkit(t *testing.T) {
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
	mustMkdir(t, filepath.Join(f.host, "etc/containerd/conf.d"))
	mustWrite(t, filepath.Join(f.host, "etc/containerd/conf.d/99-nvidia.toml"), []byte(nvidiaDropIn), 0o644)
	before := tree(t, f.host)
	if _, err := Install(f.o); err != nil {
		t.Fatal(err)
	}
	// The imports name the node's paths; containerd reads a copy whose
	// imports name the files under f.host.
	data, _ := os.ReadFile(filepath.Join(f.host, "etc/containerd/config.toml"))
	copyCfg := filepath.Join(t.TempDir(), "config.toml")
	mustWrite(t, copyCfg, bytes.ReplaceAll(data, []byte("/etc/containerd/conf.d/"), []byte(f.host+"/etc/containerd/conf.d/")), 0o644)
	dump, err := exec.Command(containerd, "--config", copyCfg, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, dump)
	}
	d := string(dump)
	runtime := func(name string) string {
		i := strings.Index(d, "runtimes."+name+"]")
		if i < 0 {
			return ""
		}
		rest := d[i:]
		if j := regexp.MustCompile(`\n\s*\[[^\n]*runtimes\.[a-z]+\]`).FindStringIndex(rest[1:]); j != nil {
			return rest[:j[0]+1]
		}
		return rest
	}
	if !strings.Contains(runtime("vgpu"), "/opt/vgpu/bin/vgpu-runtime") {
		t.Errorf("containerd's merged configuration lacks the runtime class vgpu with the installed runtime:\n%s", d)
	}
	if !strings.Contains(runtime("nvidia"), "/usr/local/nvidia/toolkit/nvidia-container-runtime") {
		t.Errorf("containerd's merged configuration lost the toolkit's runtime class nvidia:\n%s", d)
	}
	if m := regexp.MustCompile(`default_runtime_name = ['"]([^'"]*)['"]`).FindAllStringSubmatch(d, -1); len(m) == 0 || m[0][1] != "nvidia" {
		t.Errorf("containerd's default runtime after the install: %v, want the toolkit's nvidia (vgpu is a class pods choose)", m)
	}
	if b, _ := os.ReadFile(filepath.Join(f.host, "etc/containerd/conf.d/99-nvidia.toml")); string(b) != nvidiaDropIn {
		t.Errorf("the install changed the toolkit's drop-in:\n%s", b)
	}
	if _, err := Remove(f.o); err != nil {
		t.Fatal(err)
	}
	if diff := diffTrees(before, tree(t, f.host)); len(diff) != 0 {
		t.Errorf("after remove: %v", diff)
	}
}
