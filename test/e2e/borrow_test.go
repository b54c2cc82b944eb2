//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Memory requests through real runc: explicit requests on a GPU must fit in
// its memory (the simulated GPU has 16 GiB); the one that does not is refused
// at create naming the GPU, the sum and the holders, with nothing created; a
// limit-only container is not refused; a request alone gets the GPU's memory
// as its limit.
func TestMemoryRequestsAdmitted(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	e := newEnv(t, "memreq")
	f := shared(t)
	root := filepath.Join(e.dir, "runc")
	create := func(id string, env ...string) (string, error) {
		b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/true"}, append([]string{"VGPU_VISIBLE_DEVICES=0"}, env...), nil)
		return run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "create", "--bundle", b, id)
	}
	del := func(id string) { run(t, 30*time.Second, e.vars(), e.runtime, "--root", root, "delete", "--force", id) }
	if out, err := create("train", "VGPU_MEMORY_REQUEST=10Gi"); err != nil {
		t.Fatalf("create with a request: %v\n%s", err, out)
	}
	defer del("train")
	q, err := os.ReadFile(filepath.Join(e.stateDir, "train", "quota"))
	if err != nil || !strings.Contains(string(q), " memory=17179869184") || !strings.Contains(string(q), " memory-request=10737418240") {
		t.Errorf("quota of a request-only container (16 GiB GPU): %q %v", q, err)
	}
	out, err := create("over", "VGPU_MEMORY_REQUEST=7Gi", "VGPU_MEMORY_LIMIT=8Gi")
	if err == nil || !strings.Contains(out, "memory requests would sum to 17 GiB with this one's 7 GiB, more than its 16 GiB (held: train 10 GiB)") {
		t.Errorf("a request past the GPU: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "over")); !os.IsNotExist(err) {
		t.Errorf("refused container has state: %v", err)
	}
	if out, err := create("plain", "VGPU_MEMORY_LIMIT=12Gi"); err != nil {
		t.Errorf("a limit-only container beside the request: %v\n%s", err, out)
	}
	defer del("plain")
	if out, err := create("fits", "VGPU_MEMORY_REQUEST=6Gi"); err != nil {
		t.Errorf("10 + 6 GiB of 16: %v\n%s", err, out)
	}
	defer del("fits")
}
