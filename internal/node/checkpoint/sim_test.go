//go:build integration && cgo

package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

func TestMain(m *testing.M) {
	if os.Getenv(HelperEnv) != "" {
		os.Exit(HelperMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// a CUDA process holding HOLD bytes until its stdin closes
const targetC = `#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) return 10;
	int (*init)(unsigned) = dlsym(h, "cuInit");
	int (*retain)(void **, int) = dlsym(h, "cuDevicePrimaryCtxRetain");
	int (*cur)(void *) = dlsym(h, "cuCtxSetCurrent");
	int (*alloc)(unsigned long long *, size_t) = dlsym(h, "cuMemAlloc_v2");
	void *ctx; unsigned long long p;
	if (init(0) || retain(&ctx, 0) || cur(ctx) || alloc(&p, strtoull(argv[2], 0, 10))) return 11;
	printf("READY\n"); fflush(stdout);
	while (getchar() != EOF) {}
	return 0;
}
`

func startTarget(t *testing.T, r *simroot.Root, hold uint64) int {
	t.Helper()
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "target.c"), filepath.Join(dir, "target")
	if err := os.WriteFile(src, []byte(targetC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-o", bin, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, filepath.Join(r.LibDir(), "libcuda.so.1"), fmt.Sprint(hold))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if l, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(l) != "READY" {
		t.Fatalf("target: %q", l)
	}
	return cmd.Process.Pid
}

func runner(t *testing.T, r *simroot.Root) Runner {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Runner{Exe: exe, Lib: filepath.Join(r.LibDir(), "libcuda.so.1"), LockTimeout: 5 * time.Second}
}

// Through helper processes, as the daemon will: a process suspended and
// resumed on the simulated driver, which follows driver 580's rules.
func TestRunnerSuspendsAndResumes(t *testing.T) {
	r, err := simroot.Create(t.TempDir(), simroot.Options{Devices: []simroot.Device{{MemoryBytes: 1 << 30}}, ContextMemory: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	pid := startTarget(t, r, 64<<20)
	run := runner(t, r)
	ctx := context.Background()
	res, err := run.Run(ctx, Suspend, pid, 30*time.Second)
	if err != nil || !res.Done || res.State != StateCheckpointed {
		t.Fatalf("suspend: %v, %v; want done, checkpointed", res, err)
	}
	if res, err := run.Run(ctx, Query, pid, 30*time.Second); err != nil || res.State != StateCheckpointed {
		t.Fatalf("state: %v, %v", res, err)
	}
	if res, err := run.Run(ctx, Suspend, pid, 30*time.Second); err != nil || res.Done || res.Step != "lock" {
		t.Errorf("suspend of a checkpointed process: %v, %v; want its lock refused", res, err)
	}
	res, err = run.Run(ctx, Resume, pid, 30*time.Second)
	if err != nil || !res.Done || res.State != StateRunning {
		t.Fatalf("resume: %v, %v; want done, running", res, err)
	}
	// a driver without the API: the helper says so, nothing is done
	bad := run
	bad.Lib = filepath.Join(r.LibDir(), "libnvidia-ml.so.1")
	if _, err := bad.Run(ctx, Suspend, pid, 30*time.Second); !errors.Is(err, ErrNoAPI) {
		t.Errorf("a library without the checkpoint API: %v; want ErrNoAPI", err)
	}
}

// A helper that does not finish is killed at its deadline.
func TestRunnerKillsAHelperAtItsDeadline(t *testing.T) {
	run := Runner{Exe: writeScript(t, "#!/bin/sh\nsleep 30\n"), Lib: "unused"}
	start := time.Now()
	_, err := run.Run(context.Background(), Suspend, 1, 300*time.Millisecond)
	if !errors.Is(err, ErrHelperDeadline) {
		t.Fatalf("a helper that hangs: %v; want ErrHelperDeadline", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the hung helper was waited for %v", d)
	}
}

func writeScript(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "helper")
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
