//go:build cgo

// Command mpsdiag prints, every interval for a while, what the driver and an
// MPS control daemon say about one GPU's processes: NVML's compute and MPS
// compute process lists (pid and memory) and the daemon's get_server_list
// and get_client_list <server>. It is the record of what a real daemon
// answers (test/gpu/spatial-diag.sh runs it beside vgpu node).
//
//	mpsdiag -control /usr/local/nvidia/bin/nvidia-cuda-mps-control -pipe DIR -gpu 0 -for 20s
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func main() {
	control := flag.String("control", "nvidia-cuda-mps-control", "the MPS control program")
	pipe := flag.String("pipe", "", "the daemon's pipe directory")
	gpu := flag.Int("gpu", 0, "NVML index of the GPU")
	every := flag.Duration("every", 100*time.Millisecond, "interval")
	dur := flag.Duration("for", 20*time.Second, "how long")
	lib := flag.String("nvml", "libnvidia-ml.so.1", "NVML library")
	flag.Parse()
	l := nvml.New(nvml.WithLibraryPath(*lib))
	if r := l.Init(); r != nvml.SUCCESS {
		fmt.Fprintln(os.Stderr, "nvmlInit:", l.ErrorString(r))
		os.Exit(1)
	}
	defer func() { _ = l.Shutdown() }() // the tool exits next, which releases NVML
	d, r := l.DeviceGetHandleByIndex(*gpu)
	if r != nvml.SUCCESS {
		fmt.Fprintln(os.Stderr, "handle:", l.ErrorString(r))
		os.Exit(1)
	}
	ask := func(line string) string {
		cmd := exec.Command(*control)
		cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+*pipe)
		cmd.Stdin = strings.NewReader(line + "\n")
		out, err := cmd.CombinedOutput()
		s := strings.Join(strings.Fields(string(out)), ",")
		if err != nil {
			s += fmt.Sprintf(" (%v)", err)
		}
		return fmt.Sprintf("%q", s)
	}
	list := func(ps []nvml.ProcessInfo, r nvml.Return) string {
		if r != nvml.SUCCESS {
			return l.ErrorString(r)
		}
		var b []string
		for _, p := range ps {
			b = append(b, fmt.Sprintf("%d:%dMiB", p.Pid, p.UsedGpuMemory>>20))
		}
		return "[" + strings.Join(b, " ") + "]"
	}
	start := time.Now()
	for time.Since(start) < *dur {
		t0 := time.Now()
		c, rc := d.GetComputeRunningProcesses()
		m, rm := d.GetMPSComputeRunningProcesses()
		line := fmt.Sprintf("%s +%6.2fs compute=%s mps=%s", t0.UTC().Format("15:04:05.000"), t0.Sub(start).Seconds(), list(c, rc), list(m, rm))
		if *pipe != "" {
			sl := ask("get_server_list")
			line += " servers=" + sl
			for _, s := range strings.Split(strings.Trim(sl, `"`), ",") {
				if s != "" && !strings.Contains(s, " ") {
					line += fmt.Sprintf(" clients(%s)=%s", s, ask("get_client_list "+s))
				}
			}
		}
		line += fmt.Sprintf(" (%dms)", time.Since(t0).Milliseconds())
		fmt.Println(line)
		time.Sleep(time.Until(t0.Add(*every)))
	}
}
