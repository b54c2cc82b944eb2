//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// Borrowing with the shapes users have: `vgpu exec` tenants of several
// processes, owners whose request is their limit asking 2 GiB at a time,
// an allocator that sizes itself from cuMemGetInfo, a finished owner. The
// simulated GPU has 16 GiB; each CUDA context holds 256 MiB, which the
// library counts.

const shapesGiB = 1 << 30

// execTenant is one `vgpu exec` of sh -c script in a process group of its
// own, its output read line by line.
type execTenant struct {
	cmd   *exec.Cmd
	lines chan string
	seen  []string
}

// shapesEnv is a state directory on the simulated GPU with vgpu node
// running (memory_borrow = "free" when free), and the path of cuda-fill
// with the driver it reaches.
func shapesEnv(t *testing.T, name string, free bool) (*env, string) {
	t.Helper()
	requireRoot(t)
	e := newEnv(t, name)
	f := shared(t)
	if free {
		setBorrowFree(t, e)
	}
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	startNode(t, e)
	return e, "LD_LIBRARY_PATH=" + e.sim.LibDir() + " " + filepath.Join(f.rootfs, "usr/bin/cuda-fill")
}

func startExec(t *testing.T, e *env, request, limit, script string) *execTenant {
	t.Helper()
	cmd := exec.Command(vgpuCLI(t), "exec", "--devices", "0", "--memory-request", request, "--memory-limit", limit, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), e.vars()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	x := &execTenant{cmd: cmd, lines: make(chan string, 256)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			x.lines <- s.Text()
		}
		close(x.lines)
	}()
	t.Cleanup(func() { x.stop(syscall.SIGTERM) })
	return x
}

// stop signals the whole group (vgpu exec forwards it and removes its
// entry once its command ends) and waits.
func (x *execTenant) stop(sig syscall.Signal) {
	if x.cmd.ProcessState != nil {
		return
	}
	syscall.Kill(-x.cmd.Process.Pid, sig)
	done := make(chan struct{})
	go func() { x.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-x.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// values waits for n lines key=V and returns the values as numbers.
func (x *execTenant) values(t *testing.T, key string, n int, d time.Duration) []uint64 {
	t.Helper()
	var got []uint64
	deadline := time.After(d)
	for len(got) < n {
		select {
		case l, ok := <-x.lines:
			if !ok {
				t.Fatalf("output ended with %d of %d %s lines:\n%s", len(got), n, key, strings.Join(x.seen, "\n"))
			}
			x.seen = append(x.seen, l)
			if v, ok := strings.CutPrefix(l, key+"="); ok {
				u, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: %v", l, err)
				}
				got = append(got, u)
			}
		case <-deadline:
			t.Fatalf("%d of %d %s lines after %s:\n%s", len(got), n, key, d, strings.Join(x.seen, "\n"))
		}
	}
	return got
}

func sum(vs []uint64) (s uint64) {
	for _, v := range vs {
		s += v
	}
	return s
}

// whenFree is a shell prefix that waits (at most 60 s) until cuMemGetInfo
// says more than gib GiB are free: vgpu node's first round over the new
// tenant (until then the library holds it to its request).
func whenFree(fill string, gib int) string {
	return fmt.Sprintf(`i=0; while [ $i -lt 600 ]; do out=$(%s info); v=${out#*now_free=}; v=${v%%%%[!0-9]*}; `+
		`[ "${v:-0}" -gt %d ] && break; i=$((i+1)); sleep 0.1; done; `, fill, uint64(gib)*shapesGiB)
}

// fillWithBorrower starts a two-process borrower (request 2 GiB, limit 12)
// under "free" and waits until its processes took 1 GiB at a time until
// refused: together 11 GiB, its limit less their two contexts, with no
// other tenant on the GPU.
func fillWithBorrower(t *testing.T, e *env, fill string) *execTenant {
	t.Helper()
	one := fill + " grab alloc 1024 0 hold"
	b := startExec(t, e, "2Gi", "12Gi", whenFree(fill, 8)+one+" & "+one+" & wait")
	if got := sum(b.values(t, "grab_bytes", 2, 90*time.Second)); got != 11*shapesGiB {
		t.Fatalf("the two-process borrower took %d bytes, want 11 GiB (its limit less two contexts; the GPU has room):\n%s", got, strings.Join(b.seen, "\n"))
	}
	return b
}

// An owner admitted after a two-process borrower filled the GPU, with its
// request its limit (8 GiB), asks 2 GiB at a time: the first two fit in
// the 4.5 GiB left, the third is refused by the driver, waits in the
// library, and vgpu node kills a borrower process, with an event naming
// both; on cuMemAlloc and on a memory pool alike. An owner that sizes
// itself from cuMemGetInfo sees the rest of its request as free (it is
// owed it), not only the room left, and reaches it the same way.
func TestBorrowOwnerAtLimitTakesBackFromProcesses(t *testing.T) {
	for _, tc := range []struct{ name, route, max string }{
		{"alloc", "alloc", "6144"}, {"pool", "pool", "6144"}, {"sized", "alloc", "free"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, fill := shapesEnv(t, "shapes-"+tc.name, true)
			b := fillWithBorrower(t, e, fill)
			text := mustRun(t, 30*time.Second, e.vars(), vgpuCLI(t), "status", "--state-dir", e.stateDir)
			if !strings.Contains(text, "above its request, which vgpu node takes back") || strings.Contains(text, "may hold") {
				t.Errorf("vgpu status does not say what the borrower would lose:\n%s", text)
			}
			o := startExec(t, e, "8Gi", "8Gi", whenFree(fill, 6)+fill+" grab "+tc.route+" 2048 "+tc.max+" exit")
			got := o.values(t, "grab_bytes", 1, 90*time.Second)[0]
			if got != 6*shapesGiB {
				t.Errorf("the owner took %d bytes in 2 GiB steps, want 6 GiB (within its 8 GiB request, less its context)\nowner:\n%s\nborrower:\n%s",
					got, strings.Join(o.seen, "\n"), strings.Join(b.seen, "\n"))
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
			switch {
			case kill == nil:
				t.Errorf("no borrow kill event: %+v", evs)
			case !strings.Contains(kill.Detail, "needs 2 GiB under its request 8 GiB") || !strings.Contains(kill.Detail, "above its request 2 GiB"):
				t.Errorf("kill event %+v, want it to name the borrower over its 2 GiB and the owner's 2 GiB under its 8", *kill)
			case pidAlive(kill.PID):
				t.Errorf("the borrower's pid %d still lives", kill.PID)
			}
		})
	}
}

// A borrower of four processes (request 2 GiB, limit 12), each taking
// 2.5 GiB in 512 MiB steps at once (300 ms apart, so that vgpu node's
// rounds see them grow), reaches 10 GiB (11 with the contexts)
// on a GPU with room: its ceiling counts all its processes' memory as its
// own, never as memory held outside vgpu.
func TestBorrowFourProcessesReachLimit(t *testing.T) {
	e, fill := shapesEnv(t, "shapes-four", true)
	one := "GRAB_PAUSE_MS=300 " + fill + " grab alloc 512 2560 hold"
	b := startExec(t, e, "2Gi", "12Gi", whenFree(fill, 8)+one+" & "+one+" & "+one+" & "+one+" & wait")
	for _, v := range b.values(t, "grab_bytes", 4, 90*time.Second) {
		if v != 2560<<20 {
			t.Errorf("a process of the four took %d bytes, want 2.5 GiB each (11 GiB of the 12 with the contexts):\n%s", v, strings.Join(b.seen, "\n"))
		}
	}
}

// An owner's reservation ends with it: after one `vgpu exec` owner (request
// = limit = 8 GiB) ended and another was killed with its command (its
// record left behind, holding nothing: its init is gone), a borrower under
// the default rule (request 2 GiB, limit 14) takes 13 GiB in 1 GiB steps
// (14 less its context): no request of the ended owners is kept from it.
// vgpu status shows what a user checks: the owner that ended is gone for
// good (vgpu node's rounds that listed it before it ended do not bring its
// directory back), and so is the killed one once a round of vgpu node
// removed the entry it could not.
func TestBorrowAfterOwnerEnded(t *testing.T) {
	e, fill := shapesEnv(t, "shapes-ended", false)
	cli := vgpuCLI(t)
	ended := startExec(t, e, "8Gi", "8Gi", fill+" grab alloc 1024 4096 exit")
	if got := ended.values(t, "grab_bytes", 1, 60*time.Second)[0]; got != 4*shapesGiB {
		t.Fatalf("the first owner took %d bytes, want 4 GiB", got)
	}
	if err := ended.cmd.Wait(); err != nil {
		t.Fatalf("the first owner's vgpu exec: %v", err)
	}
	endedAt := time.Now()
	// Rounds are one after another: once a round begun after the owner
	// ended has beaten, none that listed it is still running.
	eventually(t, 60*time.Second, "a vgpu node round begun after the first owner ended", func() error {
		last := vgpuStatus(t, cli, e.stateDir).HostEnforcement.LastBeat
		return holds(last.After(endedAt), "last beat %v, the owner ended %v", last, endedAt)
	})
	if got := execStatus(t, cli, e, ended); len(got) != 0 {
		t.Fatalf("vgpu status lists the ended owner's entry %+v after it returned and vgpu node's rounds since", got)
	}
	killed := startExec(t, e, "8Gi", "8Gi", fill+" grab alloc 1024 4096 hold")
	killed.values(t, "grab_bytes", 1, 60*time.Second)
	killed.stop(syscall.SIGKILL)
	if got := execStatus(t, cli, e, ended); len(got) != 0 {
		t.Fatalf("vgpu status lists the ended owner's entry %+v", got)
	}
	eventually(t, 60*time.Second, "vgpu node removing the killed owner's entry", func() error {
		got := execStatus(t, cli, e, killed)
		return holds(len(got) == 0, "vgpu status lists the killed owner's entries %+v", got)
	})
	b := startExec(t, e, "2Gi", "14Gi", whenFree(fill, 8)+fill+" grab alloc 1024 0 hold")
	if got := b.values(t, "grab_bytes", 1, 90*time.Second)[0]; got != 13*shapesGiB {
		t.Errorf("the borrower after the owners ended took %d bytes, want 13 GiB:\n%s", got, strings.Join(b.seen, "\n"))
	}
}

// execStatus is what vgpu status lists for x's vgpu exec (its
// entry is named by its pid).
func execStatus(t *testing.T, cli string, e *env, x *execTenant) []status.Container {
	t.Helper()
	var out []status.Container
	for _, c := range vgpuStatus(t, cli, e.stateDir).Containers {
		if strings.HasPrefix(c.ID, fmt.Sprintf("exec-%d-", x.cmd.Process.Pid)) {
			out = append(out, c)
		}
	}
	return out
}
