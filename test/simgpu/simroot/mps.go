package simroot

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// MPSControl is the simulated MPS control program of the root
// (test/simgpu/mpsd, laid in by Create once `make go-build` built it).
func (r *Root) MPSControl() (string, error) {
	p := filepath.Join(r.dir, "usr", "bin", "nvidia-cuda-mps-control")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no simulated MPS control program in the root (make go-build builds it): %w", err)
	}
	return p, nil
}

// MPS is a running simulated control daemon.
type MPS struct {
	Pipe string // its pipe directory: a client's CUDA_MPS_PIPE_DIRECTORY
	bin  string
	cmd  *exec.Cmd
}

// StartMPS runs the root's control daemon in the foreground (-f) with pipe
// directory pipe and returns once it answers.
func (r *Root) StartMPS(pipe string) (*MPS, error) {
	bin, err := r.MPSControl()
	if err != nil {
		return nil, err
	}
	logDir := pipe + ".log"
	for _, d := range []string{pipe, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	m := &MPS{Pipe: pipe, bin: bin, cmd: exec.Command(bin, "-f")}
	m.cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_LOG_DIRECTORY="+logDir)
	if err := m.cmd.Start(); err != nil {
		return nil, err
	}
	for i := 0; i < 500; i++ {
		if c, err := net.Dial("unix", filepath.Join(pipe, "control")); err == nil {
			c.Close()
			return m, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.Stop()
	return nil, fmt.Errorf("the simulated MPS control daemon did not answer in %s", pipe)
}

// ClientPriority is the MPS client priority (0 normal, 1 below normal) that
// the client process pid connected with, as the daemon's control log
// records it; -1 when pid never connected.
func (m *MPS) ClientPriority(pid int) (int, error) {
	b, err := os.ReadFile(filepath.Join(m.Pipe+".log", "control.log"))
	if err != nil {
		return -1, err
	}
	prio := -1
	for _, l := range strings.Split(string(b), "\n") {
		var cpid, spid, p int
		if i := strings.Index(l, "] Client "); i >= 0 {
			if n, _ := fmt.Sscanf(l[i+2:], "Client %d connected to server %d with priority %d", &cpid, &spid, &p); n == 3 && cpid == pid {
				prio = p
			}
		}
	}
	return prio, nil
}

// Command sends one line as `echo LINE | nvidia-cuda-mps-control` does.
func (m *MPS) Command(line string) (string, error) {
	cmd := exec.Command(m.bin)
	cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+m.Pipe)
	cmd.Stdin = strings.NewReader(line + "\n")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Stop asks the daemon to quit (its servers go with it), then kills it if it
// has not gone within 5 s.
func (m *MPS) Stop() {
	_, _ = m.Command("quit")
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = m.cmd.Process.Kill()
		<-done
	}
}
