//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	create := admissionCreate(t, e, f)
	if out, err := create("train", "VGPU_MEMORY_REQUEST=10Gi"); err != nil {
		t.Fatalf("create with a request: %v\n%s", err, out)
	}
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
	if out, err := create("fits", "VGPU_MEMORY_REQUEST=6Gi"); err != nil {
		t.Errorf("10 + 6 GiB of 16: %v\n%s", err, out)
	}
}

// admissionCreate returns create: a container of /bin/true on GPU 0 with
// env, created through the runtime (deleted at the test's end), its output
// and error; a refusal is the test's to check.
func admissionCreate(t *testing.T, e *env, f *fixture) func(id string, env ...string) (string, error) {
	rt := e.runc(t)
	return func(id string, env ...string) (string, error) {
		t.Helper()
		b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/true"}, append([]string{"VGPU_VISIBLE_DEVICES=0"}, env...), nil)
		return rt.tryCreate(b, id)
	}
}

// kvOf is the key=value lines of a program's output.
func kvOf(out string) map[string]string {
	kv := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// Borrowing by default, real runc on the simulated GPU (16 GiB): beside a
// container holding an 8 GiB limit (its limit is its request), a container
// with request 4 GiB and limit 12 GiB is held to its request without `vgpu
// node` (cuMemGetInfo's free says 4 GiB less its CUDA context; `vgpu
// status` says why), and with it borrows only what no request needs:
// 16 - 8 - 4 = 4 GiB more, never the 12 of its limit.
func TestMemoryBorrowByDefault(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	e := newEnv(t, "borrow")
	f := shared(t)
	cli := vgpuCLI(t)
	rt := e.runc(t)
	mkStateDir(t, e)
	b := makeBundle(t, filepath.Join(e.dir, "bundle-holder"), f.rootfs, []string{"/bin/sleep", "3600"},
		[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=8Gi"}, nil)
	rt.detach(b, "holder")
	fill := func(id, wait string) map[string]string {
		t.Helper()
		b := makeBundle(t, filepath.Join(e.dir, "bundle-"+id), f.rootfs, []string{"/bin/sh", "-c", wait + "cuda-fill fill alloc 256"},
			[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_REQUEST=4Gi", "VGPU_MEMORY_LIMIT=12Gi"}, nil)
		out, err := rt.run(b, id)
		if err != nil {
			t.Fatalf("%s: %v\n%s", id, err, out)
		}
		return kvOf(out)
	}
	kv := fill("alone", "")
	const ctx = 256 << 20 // the simulated GPU's CUDA context, which the library counts
	if kv["first_bytes"] != fmt.Sprint(4<<30-ctx) || kv["before_free"] != fmt.Sprint(4<<30-ctx) || kv["before_total"] != fmt.Sprint(12<<30) {
		t.Errorf("without vgpu node: filled %s bytes, free %s of %s; want the request less its context, 3.75 GiB of 12: %v", kv["first_bytes"], kv["before_free"], kv["before_total"], kv)
	}
	// status, while a borrower is created and no node runs, says it is held to its request
	b = makeBundle(t, filepath.Join(e.dir, "bundle-idle"), f.rootfs, []string{"/bin/sleep", "3600"},
		[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_REQUEST=4Gi", "VGPU_MEMORY_LIMIT=12Gi"}, nil)
	rt.detach(b, "idle")
	if text := statusText(cli, e.stateDir); !strings.Contains(text, "held to its request (no vgpu node)") {
		t.Errorf("status of a borrower without vgpu node:\n%s", text)
	}
	rt.must(30*time.Second, "delete", "--force", "idle")

	startNode(t, e)
	// vgpu node sees the new container at its next round: until then it is
	// held to its request; wait (at most a minute) until it may take more
	kv = fill("borrower", `i=0; while [ $i -lt 600 ]; do out=$(cuda-fill info); v=${out#*now_free=}; v=${v%%[!0-9]*}; `+
		`[ "${v:-0}" -gt 4026531840 ] && break; i=$((i+1)); sleep 0.1; done; `)
	got, _ := strconv.ParseUint(kv["first_bytes"], 10, 64)
	if got <= 4<<30 || got > 8<<30 {
		t.Errorf("with vgpu node: filled %d bytes, want more than the 4 GiB request and at most the 8 GiB no request needs: %v", got, kv)
	}
	free, _ := strconv.ParseUint(kv["before_free"], 10, 64)
	if free <= 4<<30 || free > 8<<30 {
		t.Errorf("with vgpu node: cuMemGetInfo free %d before filling, want what the tenant can take now (4..8 GiB)", free)
	}
}
