package allocation

import (
	"os/exec"
	"strings"
	"testing"
)

// vgpu-runtime runs on every container start: the allocation channel must not pull
// the device plugin's gRPC and Kubernetes code into it.
func TestRuntimeImportsNoKubernetes(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/vgpu-dev/vgpu/cmd/vgpu-runtime", "github.com/vgpu-dev/vgpu/cmd/vgpu-hook").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "google.golang.org/grpc") || strings.HasPrefix(p, "github.com/fsnotify/") {
			t.Errorf("vgpu-runtime/vgpu-hook import %s", p)
		}
	}
}
