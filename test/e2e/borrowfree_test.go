//go:build e2e

package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
)

// proc is a container's process run through the runtime in the
// background (runtimeRoot.startProc: vgpu-runtime args...), its stdout
// read line by line and its stdin held open.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
	stdin *os.File
}

func (r *runtimeRoot) startProc(args ...string) *proc {
	t, e := r.t, r.e
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ir, iw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.runtime, append([]string{"--root", r.root}, args...)...)
	cmd.Env = append(os.Environ(), e.vars()...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = pw, pw, ir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	ir.Close()
	p := &proc{cmd: cmd, lines: make(chan string, 256), stdin: iw}
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
		pr.Close()
	}()
	t.Cleanup(func() { iw.Close() })
	return p
}

// line waits for a line starting with prefix; "" if the output ended first
// or after d.
func (p *proc) line(prefix string, d time.Duration, seen *[]string) string {
	deadline := time.After(d)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return ""
			}
			*seen = append(*seen, l)
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			return ""
		}
	}
}

// memory_borrow = "free" and memory_reclaim = "kill", real runc on the
// simulated GPU (16 GiB), vgpu node running: two containers requesting 6 GiB up to 12. The borrower
// takes 11 GiB alone; the owner, asking 5 GiB within its request with 4.5
// free on the GPU (each CUDA context holds 256 MiB), waits in the library
// while vgpu node kills the borrower's process, with an event naming owner,
// request, borrower and bytes; then its allocation succeeds. (Under the
// default rule the owner's allocation fails at once: nothing is taken back.)
func TestMemoryBorrowFreeReclaim(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	e := newBorrowFreeHost(t, "borrowfree")
	f := shared(t)
	cli := vgpuCLI(t)
	rt := e.runc(t)
	env := []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_REQUEST=6Gi", "VGPU_MEMORY_LIMIT=12Gi"}
	startBorrower(t, e, f, rt, env)

	// the owner asks 5 GiB
	op := startOwnerWithCeiling(t, e, f, rt, cli, env, "cuda-fill hold 5120")
	var oout []string
	if l := op.line("hold_rc=", 90*time.Second, &oout); l != "hold_rc=0" {
		t.Errorf("the owner's 5 GiB within its request: %q, want success\n%s", l, strings.Join(oout, "\n"))
	}
	evs, err := events.Read(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	var kill *events.Event
	for i, ev := range evs {
		if ev.Kind == "kill" && ev.Reason == "borrow" {
			kill = &evs[i]
		}
	}
	want := "above its request 6 GiB; owner needs 5 GiB under its request 6 GiB"
	switch {
	case kill == nil:
		t.Errorf("no borrow kill event: %+v", evs)
	case kill.Container != "borrower" || !strings.HasPrefix(kill.Detail, "borrower borrows ") || !strings.Contains(kill.Detail, want):
		t.Errorf("kill event %+v, want the borrower's, saying %q", *kill, want)
	case pidAlive(kill.PID):
		t.Errorf("the borrower's pid %d still lives", kill.PID)
	}
}

// setBorrowFree puts memory_borrow = "free" into e's config, with
// memory_reclaim = "kill": the borrower is killed, as before suspension.
func setBorrowFree(t *testing.T, e *env) {
	t.Helper()
	setTopKeys(t, e, "memory_borrow = \"free\"\nmemory_reclaim = \"kill\"\n")
}

// setTopKeys puts top-level keys (TOML lines) at the head of e's config.
func setTopKeys(t *testing.T, e *env, keys string) {
	t.Helper()
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.config, append([]byte(keys), cfg...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newBorrowFreeHost is a state directory under memory_borrow = "free" with
// vgpu node running on it.
func newBorrowFreeHost(t *testing.T, name string) *env {
	t.Helper()
	e := newEnv(t, name)
	setBorrowFree(t, e)
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	startNode(t, e)
	return e
}

// startBorrower runs the runc container "borrower" (deleted at the test's
// end): it waits for vgpu node's first ceiling (the node sees a new
// container at its next round), then takes 11 GiB and holds it; its output
// is read from the returned process.
// startOwnerWithCeiling creates the container "owner" running cmd and
// starts it once vgpu node keeps its memory ceiling fresh (the library
// waits for room only while it does). runc create hands its stdio to the
// container's process: the owner's output comes through the returned proc.
func startOwnerWithCeiling(t *testing.T, e *env, f *fixture, rt *runtimeRoot, cli string, env []string, cmd string) *proc {
	t.Helper()
	b := makeBundle(t, filepath.Join(e.dir, "bundle-owner"), f.rootfs, []string{"/bin/sh", "-c", cmd}, env, nil)
	rt.deleteAtEnd("owner")
	op := rt.startProc("create", "--bundle", b, "owner")
	if err := op.cmd.Wait(); err != nil {
		t.Fatalf("create owner: %v", err)
	}
	eventuallyTrue(t, 60*time.Second, "vgpu node's ceiling for the owner", func() bool {
		for _, c := range vgpuStatus(t, cli, e.stateDir).Containers {
			for _, d := range c.Devices {
				if c.ID == "owner" && d.MemoryCeiling > 0 && !d.MemoryHeldToRequest {
					return true
				}
			}
		}
		return false
	})
	rt.start("owner")
	return op
}

func startBorrower(t *testing.T, e *env, f *fixture, rt *runtimeRoot, env []string) *proc {
	t.Helper()
	rt.deleteAtEnd("borrower")
	b := makeBundle(t, filepath.Join(e.dir, "bundle-borrower"), f.rootfs, []string{"/bin/sh", "-c",
		`i=0; while [ $i -lt 600 ]; do out=$(cuda-fill info); v=${out#*now_free=}; v=${v%%[!0-9]*}; ` +
			`[ "${v:-0}" -gt 11811160064 ] && break; i=$((i+1)); sleep 0.1; done; cuda-fill hold 11264`}, env, nil)
	bp := rt.startProc("run", "-b", b, "borrower")
	var out []string
	if l := bp.line("hold_rc=", 90*time.Second, &out); l != "hold_rc=0" {
		t.Fatalf("the borrower could not take 11 GiB under free: %q\n%s", l, strings.Join(out, "\n"))
	}
	return bp
}
