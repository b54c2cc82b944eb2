//go:build integration

package cudahook_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nvmlProcessCalls: every NVML entry point that lists processes.
var nvmlProcessCalls = []string{
	"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses_v3",
	"nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v3",
	"nvmlDeviceGetMPSComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses_v2", "nvmlDeviceGetMPSComputeRunningProcesses_v3",
	"nvmlDeviceGetProcessUtilization", "nvmlDeviceGetRunningProcessDetailList",
}

// Every process-listing call of the NVML stand-in shows the container's own
// processes only: a process outside the container, busy on the same GPU
// (memory and kernels), is listed by the driver itself (the client run
// without the stand-ins sees it in the compute list and the utilization
// samples) and by none of the calls through the stand-in, while the
// container's own process is in each compute list. The simulated driver
// has no graphics clients and no detail list, and lists MPS clients only:
// there those calls must list no one, and the foreign process never.
func TestNVMLEveryProcessCallShowsOwnOnly(t *testing.T) {
	bin := simClient(t, "nvmlprocs", "-Wl,--no-as-needed", "-l:libnvidia-ml.so.1", "-ldl")
	e := newEnv(t, []uint64{GiB})
	// the neighbour: no stand-in, launching kernels on device 0 for 3 s
	foreign := &container{vars: append(os.Environ(), e.root.Env()...)}
	r := foreign.start(t, "kernel")
	measure(t, 0, 3*time.Second, r)
	time.Sleep(300 * time.Millisecond)
	other := strconv.Itoa(r.cmd.Process.Pid)

	native := exec.Command(bin)
	native.Env = append(os.Environ(), e.root.Env()...)
	out, err := native.CombinedOutput()
	if err != nil {
		t.Fatalf("%s without the stand-ins: %v\n%s", bin, err, out)
	}
	kv := parseKV(string(out))
	for _, call := range []string{"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetProcessUtilization"} {
		if !hasPID(kv[call+"_pids"], other) {
			t.Fatalf("the driver itself does not list the neighbour %s in %s (%s): the test shows nothing\n%s", other, call, kv[call+"_pids"], out)
		}
	}

	in := e.run(bin)
	if in.kv["error"] != "" {
		t.Fatalf("in the container: %s\n%s", in.kv["error"], in.stderr)
	}
	self := in.kv["self"]
	for _, call := range nvmlProcessCalls {
		pids := in.kv[call+"_pids"]
		if hasPID(pids, other) {
			t.Errorf("%s through the stand-in lists the neighbour %s: %s", call, other, pids)
		}
		switch {
		case strings.HasPrefix(call, "nvmlDeviceGetComputeRunningProcesses"):
			if in.kv[call+"_rc"] != "0" || pids != self {
				t.Errorf("%s: rc %s, pids %q, want the container's own process %s alone", call, in.kv[call+"_rc"], pids, self)
			}
		case call == "nvmlDeviceGetProcessUtilization":
			// the own process launched nothing: no sample, or none but its own
			if in.kv[call+"_rc"] != "0" || pids != "" && pids != self {
				t.Errorf("%s: rc %s, pids %q, want none but the container's own", call, in.kv[call+"_rc"], pids)
			}
		}
	}
	r.wait(t)
}

func hasPID(list, pid string) bool {
	for _, p := range strings.Split(list, ",") {
		if p == pid {
			return true
		}
	}
	return false
}
