//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runtimeRoot runs containers as an engine does: vgpu-runtime in place of
// runc, with the env's configuration in VGPU_CONFIG and one runc --root.
// Every container it creates is deleted when the test ends.
type runtimeRoot struct {
	t      *testing.T
	e      *env
	root   string
	global []string // flags after --root, before the command
}

// runc is the runtime for e's containers (runc state in <e.dir>/runc).
func (e *env) runc(t *testing.T) *runtimeRoot {
	return &runtimeRoot{t: t, e: e, root: filepath.Join(e.dir, "runc")}
}

// jsonLog is the runtime logging as JSON to <e.dir>/runtime.log, as
// containerd runs it.
func (r *runtimeRoot) jsonLog() *runtimeRoot {
	c := *r
	c.global = []string{"--log", filepath.Join(r.e.dir, "runtime.log"), "--log-format", "json"}
	return &c
}

// cmd runs `vgpu-runtime --root <root> args...` and returns its output.
func (r *runtimeRoot) cmd(timeout time.Duration, args ...string) (string, error) {
	r.t.Helper()
	return run(r.t, timeout, r.e.vars(), r.e.runtime, append(append([]string{"--root", r.root}, r.global...), args...)...)
}

// must is cmd failing the test on an error.
func (r *runtimeRoot) must(timeout time.Duration, args ...string) string {
	r.t.Helper()
	out, err := r.cmd(timeout, args...)
	if err != nil {
		r.t.Fatalf("vgpu-runtime %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// run runs bundle b as id in the foreground (`run -b`) and returns what it
// printed and how it ended: a container that must be refused is asked so.
// runc deletes a foreground container when its process exits.
func (r *runtimeRoot) run(b, id string) (string, error) {
	r.t.Helper()
	return r.cmd(60*time.Second, "run", "-b", b, id)
}

// detach runs bundle b as id in the background (`run --detach`).
func (r *runtimeRoot) detach(b, id string) {
	r.t.Helper()
	r.deleteAtEnd(id)
	r.must(30*time.Second, "run", "--detach", "--bundle", b, id)
}

// createStart creates bundle b as id with a pid file (<e.dir>/<id>.pid),
// starts it and returns its init's pid.
func (r *runtimeRoot) createStart(b, id string) int {
	r.t.Helper()
	pidFile := filepath.Join(r.e.dir, id+".pid")
	r.create(b, id, "--pid-file", pidFile)
	r.start(id)
	pb, err := os.ReadFile(pidFile)
	if err != nil {
		r.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil {
		r.t.Fatalf("%s: %v", pidFile, err)
	}
	return pid
}

// create creates bundle b as id (`create --bundle`), flags before the id.
func (r *runtimeRoot) create(b, id string, flags ...string) {
	r.t.Helper()
	r.deleteAtEnd(id)
	r.must(30*time.Second, append(append([]string{"create", "--bundle", b}, flags...), id)...)
}

// tryCreate is create for a container that may be refused: its output
// and error.
func (r *runtimeRoot) tryCreate(b, id string) (string, error) {
	r.t.Helper()
	r.deleteAtEnd(id)
	return r.cmd(30*time.Second, "create", "--bundle", b, id)
}

// start starts created container id.
func (r *runtimeRoot) start(id string) {
	r.t.Helper()
	r.must(30*time.Second, "start", id)
}

// deleteAtEnd deletes container id (vgpu-runtime delete --force, else
// runc's own) when the test ends, whether it still exists or not.
func (r *runtimeRoot) deleteAtEnd(id string) {
	r.t.Cleanup(func() {
		if _, err := r.cmd(30*time.Second, "delete", "--force", id); err != nil {
			// Clean-up: the container may be gone already (runc then
			// fails too); what is left fails the next assertion of
			// state, not this one.
			_, _ = run(r.t, 10*time.Second, nil, "runc", "--root", r.root, "delete", "--force", id)
		}
	})
}

// state is runc's state of container id: its status ("running",
// "stopped", ...) and init pid; status "" when runc does not know it.
func (r *runtimeRoot) state(id string) (status string, pid int) {
	r.t.Helper()
	out, err := exec.Command("runc", "--root", r.root, "state", id).Output()
	if err != nil {
		return "", 0
	}
	var st struct {
		Status string `json:"status"`
		Pid    int    `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		r.t.Fatalf("runc state %s: %v\n%s", id, err, out)
	}
	return st.Status, st.Pid
}

// containerRecord is what a test reads of a container's record
// (<state_dir>/<id>/container.json): its name, recorded init and cgroup.
type containerRecord struct {
	Name      string `json:"name"`
	PIDs      []int  `json:"pids"`
	InitStart uint64 `json:"initStart"`
	Cgroup    string `json:"cgroup"`
}

// readRecord reads container id's record in stateDir; the raw bytes too,
// for a failure's message.
func readRecord(t *testing.T, stateDir, id string) (containerRecord, []byte, error) {
	t.Helper()
	var rec containerRecord
	data, err := os.ReadFile(filepath.Join(stateDir, id, "container.json"))
	if err != nil {
		return rec, data, err
	}
	return rec, data, json.Unmarshal(data, &rec)
}

// newNodeHost is an env whose state directory exists (vgpu status reads
// it before the first create makes it) with vgpu node running on it.
func newNodeHost(t *testing.T, name string) *env {
	t.Helper()
	e := newEnv(t, name)
	mkStateDir(t, e)
	startNode(t, e)
	return e
}

// mkStateDir makes e's state directory, as the runtime's first create would.
func mkStateDir(t *testing.T, e *env) {
	t.Helper()
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
}

// statusText is `vgpu status` of stateDir as a user reads it (for
// assertions on its text and for failure messages).
func statusText(cli, stateDir string) string {
	out, err := exec.Command(cli, "status", "--state-dir", stateDir).CombinedOutput()
	if err != nil {
		return string(out) + "\n(vgpu status: " + err.Error() + ")"
	}
	return string(out)
}
