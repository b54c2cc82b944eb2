//go:build e2e

// Package e2e runs vgpu-runtime and vgpu-hook under the real engines (runc,
// dockerd, containerd, podman) on the simulated GPU. It must run as root (CI
// does); it fails, never skips, when it cannot.
package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/pipeline"
)

// requireRoot fails the test (CI runs as root; a skip would hide that nothing ran).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("test/e2e must run as root (it starts runc, dockerd, containerd and podman); run it as CI does: sudo -E go test ./test/e2e/")
	}
}

// need fails the test when a program the test needs is missing.
func need(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s not found in PATH (.ci/run installs it: apt-get install runc crun podman containerd docker.io busybox-static)", p)
		}
	}
}

// run runs a command with a deadline and returns its combined output.
func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	// A file, not a pipe: a detached container (runc create) keeps its copy of
	// stdout open long after the command is done.
	of, err := os.CreateTemp("", "vgpu-e2e-out-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(of.Name())
	defer of.Close()
	cmd.Stdout, cmd.Stderr = of, of
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s timed out after %s: %w", name, timeout, err)
	}
	out, _ := os.ReadFile(of.Name())
	return string(out), err
}

func mustRun(t *testing.T, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	out, err := run(t, timeout, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// ---- the busybox rootfs and the probe -------------------------------------

var busyboxApplets = []string{"sh", "ls", "cat", "echo", "true", "false", "sleep", "env", "mount", "id", "stat", "grep"}

// probeSource is a static program run inside containers: it reports what the
// container sees as one JSON line.
const probeSource = `package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

type report struct {
	Quota      string            ` + "`json:\"quota\"`" + `
	QuotaErr   string            ` + "`json:\"quotaErr\"`" + `
	QuotaWrite string            ` + "`json:\"quotaWrite\"`" + `
	Devs       map[string]string ` + "`json:\"devs\"`" + `
	Files      map[string]bool   ` + "`json:\"files\"`" + `
	Preload    string            ` + "`json:\"preload\"`" + `
	Driver     []string          ` + "`json:\"driver\"`" + `
	SharedW    string            ` + "`json:\"sharedWrite\"`" + `
}

func errname(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		switch e {
		case syscall.ENXIO:
			return "ENXIO"
		case syscall.EPERM:
			return "EPERM"
		case syscall.EACCES:
			return "EACCES"
		case syscall.ENOENT:
			return "ENOENT"
		case syscall.EROFS:
			return "EROFS"
		case syscall.ENODEV:
			return "ENODEV"
		}
		return fmt.Sprintf("errno%d", int(e))
	}
	return err.Error()
}

func main() {
	r := report{Devs: map[string]string{}, Files: map[string]bool{}}
	if b, err := os.ReadFile("/run/vgpu/quota"); err != nil {
		r.QuotaErr = errname(err)
	} else {
		r.Quota = string(b)
		f, err := os.OpenFile("/run/vgpu/quota", os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.Write([]byte("device 9 GPU-x\n"))
			f.Close()
		}
		r.QuotaWrite = errname(err)
	}
	devs, _ := filepath.Glob("/dev/nvidia*")
	for _, d := range devs {
		fd, err := syscall.Open(d, syscall.O_RDWR, 0)
		if err == nil {
			syscall.Close(fd)
		}
		r.Devs[d] = errname(err)
	}
	for _, f := range []string{"/usr/lib/vgpu/libvgpu-cuda.so", "/usr/lib/vgpu/libvgpu-nvml.so", "/etc/ld.so.preload", "/run/vgpu/shared", "/usr/bin/nvidia-smi"} {
		_, err := os.Stat(f)
		r.Files[f] = err == nil
	}
	if b, err := os.ReadFile("/etc/ld.so.preload"); err == nil {
		r.Preload = string(b)
	}
	if es, err := os.ReadDir("/usr/lib/vgpu/driver"); err == nil {
		for _, e := range es {
			r.Driver = append(r.Driver, e.Name())
		}
		sort.Strings(r.Driver)
	}
	if _, err := os.Stat("/run/vgpu/shared"); err == nil {
		r.SharedW = errname(os.WriteFile("/run/vgpu/shared/.probe", []byte("x"), 0o600))
		os.Remove("/run/vgpu/shared/.probe")
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}
`

type report struct {
	Quota      string            `json:"quota"`
	QuotaErr   string            `json:"quotaErr"`
	QuotaWrite string            `json:"quotaWrite"`
	Devs       map[string]string `json:"devs"`
	Files      map[string]bool   `json:"files"`
	Preload    string            `json:"preload"`
	Driver     []string          `json:"driver"`
	SharedW    string            `json:"sharedWrite"`
}

// parseReport finds the probe's JSON line in output.
func parseReport(t *testing.T, out string) report {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "{\"quota\"") {
			var r report
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("probe output: %v\n%s", err, out)
			}
			return r
		}
	}
	t.Fatalf("no probe report in output:\n%s", out)
	return report{}
}

// buildRootfs lays out a busybox-static rootfs with the probe at /bin/probe.
func buildRootfs(t *testing.T, dir string) {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox not found (apt-get install busybox-static)")
	}
	for _, d := range []string{"bin", "dev", "proc", "sys", "etc", "tmp", "run", "usr/lib", "usr/bin", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, bb, filepath.Join(dir, "bin/busybox"), 0o755)
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	writeFile(t, filepath.Join(dir, "etc/group"), []byte("root:x:0:\n"), 0o644)
	// The probe: a static Go program, built by the go that runs this test.
	src := filepath.Join(t.TempDir(), "probe")
	mkdirAll(t, src, 0o755)
	writeFile(t, filepath.Join(src, "go.mod"), []byte("module probe\n\ngo 1.21\n"), 0o644)
	writeFile(t, filepath.Join(src, "main.go"), []byte(probeSource), 0o644)
	gobin := "go"
	if _, err := exec.LookPath("go"); err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(gobin, "build", "-trimpath", "-o", filepath.Join(dir, "bin/probe"), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	addGlibcPrograms(t, dir, gobin)
}

// addGlibcPrograms puts the host's glibc into the rootfs and two dynamically
// linked GPU programs that run under the library in the container:
// /usr/bin/cuda-fill (lib/cudahook/testdata/client.c, reaching the driver as
// cudart 12/13 does: cuGetProcAddress_v2 only) and /usr/bin/nvml-info (go-nvml).
func addGlibcPrograms(t *testing.T, dir, gobin string) {
	t.Helper()
	for _, d := range []string{"lib64", "lib/x86_64-linux-gnu"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, "/lib64/ld-linux-x86-64.so.2", filepath.Join(dir, "lib64/ld-linux-x86-64.so.2"), 0o755)
	for _, l := range []string{"libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libm.so.6"} {
		copyFile(t, filepath.Join("/lib/x86_64-linux-gnu", l), filepath.Join(dir, "lib/x86_64-linux-gnu", l), 0o755)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gcc := exec.Command("gcc", "-O2", "-DROUTE_PROCADDR", "-I"+filepath.Join(repo, "lib/cudahook/include"),
		"-o", filepath.Join(dir, "usr/bin/cuda-fill"), filepath.Join(repo, "lib/cudahook/testdata/client.c"), "-ldl", "-lpthread")
	if out, err := gcc.CombinedOutput(); err != nil {
		t.Fatalf("building cuda-fill: %v\n%s", err, out)
	}
	gb := exec.Command(gobin, "build", "-trimpath", "-o", filepath.Join(dir, "usr/bin/nvml-info"), "./test/e2e/nvmlinfo")
	gb.Dir = repo
	gb.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
	if out, err := gb.CombinedOutput(); err != nil {
		t.Fatalf("building nvml-info: %v\n%s", err, out)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// tarDir writes dir as an uncompressed tar (docker import, podman import, layers).
func tarDir(t *testing.T, dir string, w io.Writer) {
	t.Helper()
	tw := tar.NewWriter(w)
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		h.ModTime = time.Unix(1700000000, 0)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeDockerArchive writes a one-layer image in `docker save` format (what
// `ctr image import` and `podman load` read) with the tag ref.
func writeDockerArchive(t *testing.T, rootfs, path, ref string) {
	t.Helper()
	writeDockerArchiveCmd(t, rootfs, path, ref, []string{"/bin/sh"})
}

// writeDockerArchiveCmd is writeDockerArchive with the image's Cmd.
func writeDockerArchiveCmd(t *testing.T, rootfs, path, ref string, cmd []string) {
	t.Helper()
	var layer bytes.Buffer
	tarDir(t, rootfs, &layer)
	sum := sha256.Sum256(layer.Bytes())
	diffID := "sha256:" + hex.EncodeToString(sum[:])
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config":  map[string]any{"Env": []string{"PATH=/bin:/usr/bin"}, "Cmd": cmd},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"created": "2023-11-14T22:13:20Z",
	})
	csum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(csum[:]) + ".json"
	layerName := hex.EncodeToString(sum[:]) + "/layer.tar"
	manifest, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{ref}, "Layers": []string{layerName}}})
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, b []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(1700000000, 0), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: hex.EncodeToString(sum[:]) + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	add(layerName, layer.Bytes())
	add(cfgName, cfg)
	add("manifest.json", manifest)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// ---- bundles -------------------------------------------------------------

// makeBundle creates a runc bundle (runc spec) whose rootfs is a copy-free bind
// of the shared rootfs: root.path points at it, read-only.
func makeBundle(t *testing.T, dir, rootfs string, args []string, env []string, annotations map[string]string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, 20*time.Second, nil, "runc", "spec", "--bundle", dir)
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	s["root"] = map[string]any{"path": rootfs, "readonly": true}
	proc := s["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = args
	proc["env"] = append([]any{"PATH=/bin:/usr/bin"}, toAny(env)...)
	if annotations != nil {
		s["annotations"] = annotations
	}
	// A /run tmpfs: the rootfs is shared and read-only, mount points under /run
	// and /usr/lib/vgpu must be creatable by the runtime.
	mounts := s["mounts"].([]any)
	mounts = append(mounts, map[string]any{"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": []any{"nosuid", "nodev", "mode=755"}})
	s["mounts"] = mounts
	out, _ := json.MarshalIndent(s, "", "\t")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// ---- daemons ---------------------------------------------------------------

// daemon is a background process started in its own process group and always
// torn down: SIGTERM to the group, then SIGKILL; stragglers that it started
// (shims) are found by the private directory in their command line.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	log    string
	marker string
	done   chan struct{}
}

func startDaemon(t *testing.T, name, logPath, marker string, env []string, prog string, args ...string) *daemon {
	t.Helper()
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	lf.Close()
	d := &daemon{name: name, cmd: cmd, log: logPath, marker: marker, done: make(chan struct{})}
	go func() { cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

func (d *daemon) stop(t *testing.T) {
	pid := d.cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		t.Logf("%s did not stop in 15s; killing", d.name)
		syscall.Kill(-pid, syscall.SIGKILL)
		<-d.done
	}
	killStragglers(d.marker)
	if t.Failed() {
		if b, err := os.ReadFile(d.log); err == nil {
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("%s log (tail):\n%s", d.name, b)
		}
	}
}

// waitFor polls ok until it returns nil or the deadline passes.
func (d *daemon) waitFor(t *testing.T, timeout time.Duration, ok func() error) {
	t.Helper()
	if err := poll(timeout, func() error {
		select {
		case <-d.done:
			return giveUp(fmt.Errorf("%s exited during start-up", d.name))
		default:
		}
		return ok()
	}); err != nil {
		b, _ := os.ReadFile(d.log)
		t.Fatalf("%s not ready: %v\n%s", d.name, err, b)
	}
}

// killStragglers kills, by pid, the processes whose command line names marker
// (a directory private to one test): shims left by a daemon we started.
func killStragglers(marker string) {
	if marker == "" {
		return
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder detaches every mount below dir (daemons leave overlay and shm
// mounts behind when killed), deepest first, so that the directory can go.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mps []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			mp := unescapeMount(f[4])
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				mps = append(mps, mp)
			}
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mps)))
	for _, mp := range mps {
		// Clean-up: a mount that will not go makes the RemoveAll after it
		// fail, which privateDir reports.
		_ = syscall.Unmount(mp, syscall.MNT_DETACH)
	}
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// privateDir is a fresh directory, short enough for unix socket paths, removed
// (after unmounting what is left below it) when the test ends.
func privateDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vgpu-e2e-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			unmountUnder(dir)
			os.RemoveAll(dir)
		}
	})
	return dir
}

// ---- shared fixture --------------------------------------------------------

type fixture struct {
	dir       string
	rootfs    string
	rootfsTar string
	archive   string // docker-archive, tag imageRef
	err       error
}

const imageRef = "localhost/vgpu-e2e/bb:1"

var (
	fixOnce sync.Once
	fix     fixture
)

// shared returns the rootfs, its tar and image archive, built once per run.
func shared(t *testing.T) *fixture {
	t.Helper()
	requireRoot(t)
	fixOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vgpu-e2e-shared-")
		if err != nil {
			fix.err = err
			return
		}
		fix.dir = dir
		fix.rootfs = filepath.Join(dir, "rootfs")
		func() {
			buildRootfs(t, fix.rootfs)
			fix.rootfsTar = filepath.Join(dir, "rootfs.tar")
			f, err := os.Create(fix.rootfsTar)
			if err != nil {
				t.Fatal(err)
			}
			tarDir(t, fix.rootfs, f)
			f.Close()
			fix.archive = filepath.Join(dir, "image.tar")
			writeDockerArchive(t, fix.rootfs, fix.archive, imageRef)
		}()
	})
	if fix.err != nil {
		t.Fatalf("shared fixture: %v", fix.err)
	}
	if fix.rootfs == "" {
		t.Fatal("shared fixture failed in an earlier test")
	}
	return &fix
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fix.dir != "" {
		unmountUnder(fix.dir)
		os.RemoveAll(fix.dir)
	}
	os.Exit(code)
}

// stateLeft lists what is left in a state directory besides its lock file
// (internal/state: it serializes slot assignment and stays for good), the
// record of a checked driver (internal/pipeline, internal/drivercheck), the
// record of whether the driver takes per-cgroup limits (internal/driverlimit) and
// vgpu-runtime's record of the GPU list (internal/discover): the host's, not
// a container's.
func stateLeft(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if e.Name() != config.StateLock && e.Name() != pipeline.DriverCheckFile && e.Name() != config.StateGPUs && e.Name() != driverlimit.CacheFile {
			out = append(out, e.Name())
		}
	}
	return out
}

// writeFile is os.WriteFile that fails the test on an error: a set-up file
// not written would make a later "nothing left" or "refused" check pass
// on nothing.
func writeFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// mkdirAll is os.MkdirAll that fails the test on an error.
func mkdirAll(t testing.TB, path string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(path, mode); err != nil {
		t.Fatal(err)
	}
}

// appendConfig adds text to e's config.toml.
func appendConfig(t testing.TB, e *env, text string) {
	t.Helper()
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.config, append(cfg, text...), 0o644)
}

var (
	builtMu sync.Mutex
	built   = map[string]error{} // program name → how its one build ended
)

// buildIntoRootfs compiles a C program of test/e2e (src, relative to it)
// with gcc into the shared rootfs as /usr/bin/<name>, once per run: the
// rootfs is shared by every test, and a program another test built is
// there already. A build that failed fails every test that wants it.
func buildIntoRootfs(t *testing.T, f *fixture, name, src string, ldflags ...string) {
	t.Helper()
	builtMu.Lock()
	defer builtMu.Unlock()
	dst := filepath.Join(f.rootfs, "usr/bin", name)
	err, done := built[name]
	if !done {
		args := append([]string{"-O2", "-o", dst, src}, ldflags...)
		if out, e := exec.Command("gcc", args...).CombinedOutput(); e != nil {
			err = fmt.Errorf("building %s: %v\n%s", name, e, out)
		} else if _, e := os.Stat(dst); e != nil {
			err = e
		}
		built[name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
}
