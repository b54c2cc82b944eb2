//go:build e2e

package e2e

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/quota"
)

// `vgpu exec` and containers on one GPU take turns from one
// arbitration, the state directory. An exec at 30 % that runs alone takes the
// slot at 0; a runc container at 70 % created through vgpu-runtime while it
// runs gets the rest of the period (phase=30) in its quota file; once the
// exec has ended, the next exec at 30 gets the free stretch beside the
// container (phase=0 again), not a slot that overlaps it.
func TestExecAndContainerShareOneArbitration(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	e := newEnv(t, "arbitrate")
	f := shared(t)
	cli := vgpuCLI(t)
	env := append(os.Environ(), e.vars()...)

	// The first exec prints its quota file and holds its registration until
	// its stdin closes.
	first := exec.Command(cli, "exec", "--devices", "0", "--compute-limit", "30", "--",
		"sh", "-c", `cat "$VGPU_QUOTA_FILE"; echo quota-end; cat >/dev/null`)
	first.Env = env
	stdin, err := first.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	first.Stderr = os.Stderr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			stdin.Close()
			// Clean-up on a failed path: its error is not this test's.
			_ = first.Wait()
		}
	}()
	quota := readUntil(t, stdout, "quota-end", 30*time.Second)
	if p := phase0(t, quota); p != "0" {
		t.Fatalf("an exec at 30 alone on GPU 0: phase %s, want 0 (quota %q)", p, quota)
	}

	b := makeBundle(t, filepath.Join(e.dir, "bundle"), f.rootfs, []string{"/bin/true"},
		[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=70"}, nil)
	e.runc(t).create(b, "busy")
	q, err := os.ReadFile(filepath.Join(e.stateDir, "busy", "quota"))
	if err != nil {
		t.Fatal(err)
	}
	if p := phase0(t, string(q)); p != "30" {
		t.Errorf("a container at 70 beside the exec holding 0..30: phase %s, want 30 (quota %q)", p, q)
	}

	stdin.Close()
	waited = true
	if err := first.Wait(); err != nil {
		t.Fatalf("first exec: %v", err)
	}
	out, err := run(t, 30*time.Second, e.vars(), cli, "exec", "--devices", "0", "--compute-limit", "30", "--", "sh", "-c", `cat "$VGPU_QUOTA_FILE"`)
	if err != nil {
		t.Fatalf("second exec: %v\n%s", err, out)
	}
	if p := phase0(t, out); p != "0" {
		t.Errorf("an exec at 30 beside the container holding 30..100: phase %s, want 0 (quota %q)", p, out)
	}
	if left := execEntries(t, e.stateDir); len(left) != 0 {
		t.Errorf("exec entries left in the state directory after both ended: %v", left)
	}
}

// phase0 is the phase of a quota file's first device, "none" without one.
func phase0(t *testing.T, data string) string {
	t.Helper()
	q, err := quota.Parse([]byte(data))
	if err != nil {
		t.Fatalf("quota %q: %v", data, err)
	}
	if len(q.Devices) == 0 {
		t.Fatalf("quota %q: no device", data)
	}
	if q.Devices[0].Phase == nil {
		return "none"
	}
	return strconv.Itoa(*q.Devices[0].Phase)
}

// readUntil reads lines from r until one equals marker, and returns what came before.
func readUntil(t *testing.T, r io.Reader, marker string, timeout time.Duration) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if sc.Text() == marker {
				break
			}
			b.WriteString(sc.Text() + "\n")
		}
		got <- b.String()
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(timeout):
		t.Fatalf("no %q within %v", marker, timeout)
		return ""
	}
}

// execEntries are the state directory's `vgpu exec` registrations.
func execEntries(t *testing.T, stateDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ents {
		if strings.HasPrefix(d.Name(), "exec-") {
			out = append(out, d.Name())
		}
	}
	return out
}

// Compute requests through real runc and `vgpu exec`: a request is written
// beside the limit; a request above its limit is refused naming both values,
// and a request that would take a GPU's requests past 100 % is refused
// naming the GPU, the sum and the holders, by vgpu-runtime and by vgpu exec
// alike, with nothing created.
func TestComputeRequestsAdmitted(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	e := newEnv(t, "requests")
	f := shared(t)
	cli := vgpuCLI(t)
	create := admissionCreate(t, e, f)
	if out, err := create("train", "VGPU_COMPUTE_REQUEST=60"); err != nil {
		t.Fatalf("create with a request: %v\n%s", err, out)
	}
	q, err := os.ReadFile(filepath.Join(e.stateDir, "train", "quota"))
	if err != nil || !strings.Contains(string(q), "vgpu-quota 2\n") || !strings.Contains(string(q), " compute-request=60") || strings.Contains(string(q), " compute=") {
		t.Errorf("quota of a request-60 container (limit 100): %q %v", q, err)
	}

	out, err := create("bad", "VGPU_COMPUTE_REQUEST=50", "VGPU_COMPUTE_LIMIT=30")
	if err == nil || !strings.Contains(out, `compute request 50% is above its limit 30%`) || !strings.Contains(out, `VGPU_COMPUTE_REQUEST="50"`) {
		t.Errorf("request above its limit: %v\n%s", err, out)
	}
	out, err = create("over", "VGPU_COMPUTE_REQUEST=50")
	if err == nil || !strings.Contains(out, "compute requests would sum to 110% with this one's 50% (held: train 60%)") {
		t.Errorf("a container past 100 %%: %v\n%s", err, out)
	}
	for _, id := range []string{"bad", "over"} {
		if _, err := os.Stat(filepath.Join(e.stateDir, id)); !os.IsNotExist(err) {
			t.Errorf("refused container %s has state: %v", id, err)
		}
	}

	out, err = run(t, 30*time.Second, e.vars(), cli, "exec", "--devices", "0", "--compute-request", "50", "--", "true")
	if err == nil || !strings.Contains(out, "compute requests would sum to 110% with this one's 50% (held: train 60%)") {
		t.Errorf("vgpu exec past 100 %%: %v\n%s", err, out)
	}
	out, err = run(t, 30*time.Second, e.vars(), cli, "exec", "--devices", "0", "--compute-request", "40", "--", "sh", "-c", `cat "$VGPU_QUOTA_FILE"`)
	if err != nil || !strings.Contains(out, " compute-request=40") {
		t.Errorf("vgpu exec at 40 beside 60: %v\n%s", err, out)
	}
	if left := execEntries(t, e.stateDir); len(left) != 0 {
		t.Errorf("exec entries left: %v", left)
	}
}
