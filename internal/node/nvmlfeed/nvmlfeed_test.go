//go:build cgo && integration

package nvmlfeed

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// The feed against the simulated driver's NVML: a process in a pid
// namespace of its own (as in a container) that allocates through the
// driver is listed under its host pid, with its memory (context included).
func TestFeedReportsHostPIDsAcrossPIDNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (unshare --pid), as CI runs it: sudo -E go test ./internal/node/nvmlfeed/")
	}
	for _, p := range []string{"gcc", "unshare"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s not found", p)
		}
	}
	sim, err := simroot.Create(filepath.Join(t.TempDir(), "driver"), simroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tenant := filepath.Join(t.TempDir(), "vgpu-attack")
	if out, err := exec.Command("gcc", "-O2", "-o", tenant, "../../../test/e2e/attack/attack.c", "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", tenant, "honest", "512")
	cmd.Env = append(os.Environ(), sim.Env()...)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "held_mib=") {
		if strings.HasPrefix(sc.Text(), "error=") {
			t.Fatal(sc.Text())
		}
	}
	t.Setenv("SIMGPU_DIR", sim.SimDir())
	f, err := Open(filepath.Join(sim.LibDir(), "libnvidia-ml.so."+simroot.DriverVersion))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []Sample
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, err = f.Read(); err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 {
			break
		}
	}
	if len(got) != 1 || got[0].UsedBytes != 512<<20+256<<20 || got[0].GPU != simroot.DefaultUUID(0) {
		t.Fatalf("samples %+v, want one of 768 MiB on %s", got, simroot.DefaultUUID(0))
	}
	comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(got[0].HostPID), "comm"))
	if strings.TrimSpace(string(comm)) != "vgpu-attack" {
		t.Fatalf("pid %d is %q, not the tenant: not a host pid", got[0].HostPID, comm)
	}
}
