//go:build e2e && k8s

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpu-dev/vgpu/internal/setup"
	"github.com/vgpu-dev/vgpu/internal/status"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

const chartDRANode = "vgpu-e2e-chart-dra"

// The chart with the DRA driver, on a node whose containerd the chart
// configures, upgraded from the previous release (its own image and chart,
// built from its commit) to this one:
//   - helm install of the previous release: its installer writes the
//     containerd drop-in and asks for a restart (the node's restart
//     command, served here as systemctl would: the old containerd ends, a
//     new one reads the drop-in); the containers that ran before keep
//     running, the same processes;
//   - a claim from the chart's DeviceClass is prepared by the chart's
//     driver and its pod runs through the installed vgpu-runtime with the
//     claim's limits;
//   - helm upgrade to this release's chart and image: the installer
//     replaces every binary and library by rename (the tenant keeps the
//     library it has, a new tenant gets the new one), keeps a file it did
//     not write, restarts nothing (containerd's configuration did not
//     change); the tenant keeps its limits; this release's vgpu status
//     lists the claims of pods started under either release;
//   - a pod that bypasses the library (the driver called by its path, past
//     its claim) is killed by this release's vgpu-node, which posts a
//     VGPUKilled Event on it with the rights the chart gives;
//   - helm uninstall: the driver's objects (DeviceClasses, ResourceSlice,
//     CDI specs) are gone, containerd's configuration and vgpu's are
//     byte for byte as before (a second restart applies that), and the
//     install root holds only the file the installer did not write.
func TestKubernetesChartDRA(t *testing.T) {
	prev := previousRelease(t)
	cc := startChartCluster(t, "k8s-chart-dra", chartDRANode, []simroot.Device{{MemoryBytes: 80 << 30}})
	e, k, c := cc.e, cc.k, cc.c
	ctx := context.Background()

	// A pod that runs before vgpu is installed (containerd's default
	// runtime), and its processes.
	before := draPod("before", "", "exec sleep 3600")
	before.Spec.ResourceClaims = nil
	before.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	if _, err := c.CoreV1().Pods("default").Create(ctx, before, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cc.podRunning(t, "before")
	tasksBefore := cc.runningTasks(t)
	if len(tasksBefore) < 2 {
		t.Fatalf("running tasks before the install: %v, want the pod's sandbox and container", tasksBefore)
	}
	dropIn := setup.DropInPath(k.containerdCfg)
	nodeFiles := []string{k.containerdCfg, dropIn, e.config}
	filesBefore := readFiles(t, nodeFiles)

	// The chart's configuration: the test's, with the libraries from the
	// install root (the tenants get the files the chart installed).
	libDir := regexp.MustCompile(`(?m)^dir = ".*"$`)
	if n := len(libDir.FindAll(filesBefore[e.config], -1)); n != 1 {
		t.Fatalf("the test's configuration has %d library dir lines, want 1:\n%s", n, filesBefore[e.config])
	}
	cfg := libDir.ReplaceAll(filesBefore[e.config], []byte(fmt.Sprintf("dir = %q", filepath.Join(cc.installRoot, "lib"))))
	chartConfig := filepath.Join(e.dir, "chart-config.toml")
	writeFile(t, chartConfig, cfg, 0o644)
	values := cc.values(t, freePort(t), fmt.Sprintf(`devicePlugin: {enabled: false}
dra: {enabled: true}
host:
  containerdConfig: %q
  containerdRestart: %q
`, k.containerdCfg, cc.restartScript(t)))
	// The previous release's chart with its image; the values are ones it
	// understands too (its schema refuses a key it does not know: where
	// this release adds one, give it only below).
	cc.importImage(t, prev.tar)
	t.Logf("the previous release: %s, image tag %s", prev.commit, prev.tag)
	cc.helm(t, "install", "vgpu", prev.chart, "--create-namespace", "-f", values, "--set-file", "config.override="+chartConfig, "--set", "image.tag="+prev.tag)
	cc.nodePodRunning(t, "dra", prev.tag, func() error { return cc.serveRestart(t) })

	// The drop-in is the installer's, and containerd was restarted once to
	// read it; what ran before runs on, the same processes.
	if b, _ := os.ReadFile(dropIn); !strings.Contains(string(b), filepath.Join(cc.installRoot, "bin", "vgpu-runtime")) {
		t.Errorf("the drop-in %s after the install does not name the installed vgpu-runtime:\n%s", dropIn, b)
	}
	if cc.restarts != 1 {
		t.Errorf("containerd restarts during the install: %d, want 1", cc.restarts)
	}
	tasksAfter := cc.runningTasks(t)
	for id, proc := range tasksBefore {
		if tasksAfter[id] != proc {
			t.Errorf("task %s was %s before containerd's restart, %q after: want the same process running", id, proc, tasksAfter[id])
		}
	}
	if p, err := c.CoreV1().Pods("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the pod that ran before the install: %+v, want running, never restarted", p.Status)
	}
	t.Logf("tasks across containerd's restart (id: pid start time): %v", tasksAfter)

	// The driver's ResourceSlice, and a claim from the chart's DeviceClass.
	waitUntil(t, k, cc.cp, 2*time.Minute, "the chart driver's ResourceSlice", func() error {
		l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range l.Items {
			if s.Spec.Driver == "vgpu.io" && s.Spec.NodeName != nil && *s.Spec.NodeName == chartDRANode {
				return nil
			}
		}
		return fmt.Errorf("%d slices, none of vgpu.io on %s", len(l.Items), chartDRANode)
	})
	var template resourceapi.ResourceClaimTemplate
	readManifest(t, "dra-claimtemplate.yaml", &template)
	if template.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName != "vgpu.io" {
		t.Fatalf("configs/k8s/dra-claimtemplate.yaml names class %q, not the chart's vgpu.io", template.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName)
	}
	if _, err := c.ResourceV1().ResourceClaimTemplates("default").Create(ctx, &template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tenant := func(name string) *corev1.Pod {
		p := draPod(name, template.Name, "exec sleep 3600")
		// A DRA pod needs no runtime class; this one names the class the
		// installer's drop-in defines, to show containerd read it.
		p.Spec.RuntimeClassName = new("vgpu")
		return p
	}
	const quota = "memory=8589934592 memory-request=8589934592 compute=30"
	if _, err := c.CoreV1().Pods("default").Create(ctx, tenant("old"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	oldID := cc.podRunning(t, "old")
	if q := cc.exec(t, oldID, "cat", "/run/vgpu/quota"); !strings.Contains(q, quota) {
		t.Errorf("the chart's claim in pod old: quota %q, want %s", q, quota)
	}
	if got := cc.runtimeOf(t, oldID); !strings.Contains(got, filepath.Join(cc.installRoot, "bin", "vgpu-runtime")) {
		t.Errorf("pod old's container runs %q, not the installed vgpu-runtime", got)
	}
	installedLib := filepath.Join(cc.installRoot, "lib", "libvgpu-cuda.so")
	libPrev := fileSum(t, installedLib)
	if want := fileSum(t, filepath.Join(prev.build, "lib", "libvgpu-cuda.so")); libPrev != want {
		t.Errorf("the installed library %s, the previous release's %s: want the previous release's", libPrev, want)
	}
	if got := fileSum(t, cc.inContainer(t, oldID, "/usr/lib/vgpu/libvgpu-cuda.so")); got != libPrev {
		t.Errorf("pod old's library %s, the installed one %s: want the installed", got, libPrev)
	}
	installedPrev := cc.installedFiles(t)
	if len(installedPrev) < 7 { // five binaries, two libraries
		t.Fatalf("the previous release installed %v, want its binaries and libraries", installedPrev)
	}

	// A file in the install root that the installer did not write.
	notOurs := filepath.Join(cc.installRoot, "lib", "site-local.conf")
	writeFile(t, notOurs, []byte("# the administrator's\n"), 0o644)

	// helm upgrade to this release: its chart, its image (0.1.0-e2e, this
	// build's files).
	cc.helm(t, "upgrade", "vgpu", chartDir(t), "-f", values, "--set-file", "config.override="+chartConfig)
	cc.nodePodRunning(t, "dra", "0.1.0-e2e", func() error { return cc.serveRestart(t) })
	// Every binary and library of the previous release is replaced by this
	// build's, a different file (two releases' files differ: their version
	// and commit are in every binary, their build directory in every
	// library's debug information; were two the same, the replacement
	// checks here would prove nothing for them).
	this := map[string]string{"bin": binaries(t), "lib": filepath.Join(os.Getenv("VGPU_BUILD"), "lib")}
	installed := cc.installedFiles(t)
	for name, sum := range installedPrev {
		want := fileSum(t, filepath.Join(this[filepath.Dir(name)], filepath.Base(name)))
		switch {
		case want == sum:
			t.Errorf("%s is the same file in the previous release (%s) and this build: the upgrade's replacement of it is not shown (is this build of that commit? VGPU_CHART_PREVIOUS_RELEASE names another)", name, prev.commit)
		case installed[name] != want:
			t.Errorf("%s after the upgrade: %s, want this release's %s (the previous release's was %s)", name, installed[name], want, sum)
		}
	}
	if len(installed) != len(installedPrev) {
		t.Errorf("installed after the upgrade: %v; before: %v", installed, installedPrev)
	}
	libNew := fileSum(t, filepath.Join(this["lib"], "libvgpu-cuda.so"))
	if got := fileSum(t, cc.inContainer(t, oldID, "/usr/lib/vgpu/libvgpu-cuda.so")); got != libPrev {
		t.Errorf("pod old's library after the upgrade: %s, want the one it started with, %s (files are replaced by rename, never in place)", got, libPrev)
	}
	if b, err := os.ReadFile(notOurs); err != nil || string(b) != "# the administrator's\n" {
		t.Errorf("the upgrade touched a file it did not install: %v %q", err, b)
	}
	if cc.restarts != 1 {
		t.Errorf("containerd restarts after the upgrade: %d, want still 1 (its configuration did not change)", cc.restarts)
	}
	if q := cc.exec(t, oldID, "cat", "/run/vgpu/quota"); !strings.Contains(q, quota) {
		t.Errorf("pod old after the upgrade: quota %q, want %s", q, quota)
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, tenant("new"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newID := cc.podRunning(t, "new")
	if got := fileSum(t, cc.inContainer(t, newID, "/usr/lib/vgpu/libvgpu-cuda.so")); got != libNew {
		t.Errorf("pod new's library: %s, want this release's %s", got, libNew)
	}
	// This release's vgpu status: the claims of both releases' pods
	// (under DRA the claim is the accounting unit, claim-<uid>, named
	// <namespace>/<claim>).
	cli := filepath.Join(cc.installRoot, "bin", "vgpu")
	r := vgpuStatus(t, cli, e.stateDir)
	for _, pod := range []string{"old", "new"} {
		claim := cc.podClaim(t, pod)
		got := container(r, "claim-"+string(claim.UID))
		if got == nil || got.Name != "default/"+claim.Name || got.State != status.Running || len(got.Devices) != 1 || got.Devices[0].MemoryLimit != 8<<30 {
			t.Errorf("vgpu status of this release on pod %s's claim %s: %+v, want it listed as default/%s, running, with 8 GiB:\n%s", pod, claim.UID, got, claim.Name, statusText(cli, e.stateDir))
		}
	}

	// A pod that bypasses the library, through what this release's chart
	// deployed: killed, and its Event posted.
	draBypassEvent(t, k, cc.cp, e, template.Name, chartDRANode)

	// Uninstall, once no vgpu pod runs.
	for _, n := range []string{"old", "new", "before"} {
		if err := c.CoreV1().Pods("default").Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, k, cc.cp, 2*time.Minute, "the pods gone", func() error {
		l, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 0 {
			return fmt.Errorf("%v: %d pods", err, len(l.Items))
		}
		return nil
	})
	uninstall := cc.helmCmd(t, "uninstall", "vgpu", "--timeout", "4m")
	var out bytes.Buffer
	uninstall.Stdout, uninstall.Stderr = &out, &out
	if err := uninstall.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- uninstall.Wait() }()
	var uerr error
	waitUntil(t, k, cc.cp, 5*time.Minute, "helm uninstall", func() error {
		if err := cc.serveRestart(t); err != nil {
			return err
		}
		select {
		case uerr = <-done:
			return nil
		default:
			return fmt.Errorf("running")
		}
	})
	if uerr != nil {
		t.Fatalf("helm uninstall: %v\n%s", uerr, out.String())
	}
	if cc.restarts != 2 {
		t.Errorf("containerd restarts after the uninstall: %d, want 2 (its configuration restored)", cc.restarts)
	}
	waitUntil(t, k, cc.cp, 2*time.Minute, "the node pods gone", func() error {
		l, err := c.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 0 {
			return fmt.Errorf("%v: %d pods in %s", err, len(l.Items), chartNS)
		}
		return nil
	})
	for _, name := range []string{"vgpu.io", "vgpu.io-share"} {
		if _, err := c.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Errorf("DeviceClass %s is left after uninstall", name)
		}
	}
	waitUntil(t, k, cc.cp, 3*time.Minute, "the driver's ResourceSlice gone", func() error {
		l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range l.Items {
			if s.Spec.Driver == "vgpu.io" {
				return fmt.Errorf("ResourceSlice %s of vgpu.io is left", s.Name)
			}
		}
		return nil
	})
	if specs, _ := filepath.Glob(filepath.Join(k.cdiDir, "vgpu.io-*")); len(specs) != 0 {
		t.Errorf("CDI specs left after uninstall: %v", specs)
	}
	after := readFiles(t, nodeFiles)
	for _, p := range nodeFiles {
		if !bytes.Equal(after[p], filesBefore[p]) {
			t.Errorf("%s after uninstall:\n%s\nwant it as before:\n%s", p, after[p], filesBefore[p])
		}
	}
	var left []string
	if err := filepath.WalkDir(cc.installRoot, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return err
	}); err != nil {
		t.Errorf("the install root after uninstall: %v", err)
	}
	if !slices.Equal(left, []string{notOurs}) {
		t.Errorf("the install root after uninstall holds %v, want only the file the installer did not write, %s", left, notOurs)
	}
}

// installedFiles are the regular files under the install root's bin and
// lib ("bin/vgpu", "lib/libvgpu-cuda.so"), each with its sum, but for a
// file the test put there (site-local.conf).
func (cc *chartCluster) installedFiles(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, d := range []string{"bin", "lib"} {
		ents, err := os.ReadDir(filepath.Join(cc.installRoot, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range ents {
			if ent.Type().IsRegular() && ent.Name() != "site-local.conf" {
				m[d+"/"+ent.Name()] = fileSum(t, filepath.Join(cc.installRoot, d, ent.Name()))
			}
		}
	}
	return m
}

// restartScript is the chart's host.containerdRestart on this node: it asks
// the test to restart containerd (which the test started) and waits until
// it has.
func (cc *chartCluster) restartScript(t *testing.T) string {
	p := filepath.Join(cc.e.dir, "restart-containerd")
	req := filepath.Join(cc.e.dir, "restart-containerd.request")
	writeFile(t, p, []byte(fmt.Sprintf(`#!/bin/sh
touch %[1]q
i=0
while [ -e %[1]q ]; do
	i=$((i + 1))
	[ $i -lt 300 ] || { echo "containerd was not restarted in 5 minutes" >&2; exit 1; }
	sleep 1
done
echo restarted
`, req)), 0o755)
	return p
}

// serveRestart restarts the node's containerd when restartScript asked, as
// systemctl restart containerd does: SIGTERM to containerd alone (its shims
// and their containers are left running), then a new containerd with the
// same configuration and the environment its unit would give it
// (VGPU_CONFIG, read by the vgpu-runtime it runs).
func (cc *chartCluster) serveRestart(t *testing.T) error {
	t.Helper()
	req := filepath.Join(cc.e.dir, "restart-containerd.request")
	if _, err := os.Stat(req); err != nil {
		return nil
	}
	k := cc.k
	old := k.containerd
	syscall.Kill(old.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-old.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("containerd did not stop in 30s on SIGTERM")
	}
	cc.restarts++
	ctrd := startDaemon(t, "containerd", filepath.Join(filepath.Dir(k.containerdCfg), fmt.Sprintf("containerd-%d.log", cc.restarts)), cc.e.dir,
		[]string{"PATH=" + k.tools + ":" + os.Getenv("PATH"), "VGPU_CONFIG=" + cc.e.config}, filepath.Join(k.tools, "containerd"), "--config", k.containerdCfg)
	ctrd.waitFor(t, 90*time.Second, func() error {
		_, err := k.ctr(t, "version")
		return err
	})
	k.containerd = ctrd
	if err := os.Remove(req); err != nil {
		t.Fatal(err)
	}
	return fmt.Errorf("containerd restarted")
}

// runningTasks lists containerd's running tasks: id -> "pid start-time"
// (the start time from /proc, so that a reused pid is not the same).
func (cc *chartCluster) runningTasks(t *testing.T) map[string]string {
	t.Helper()
	out, err := cc.k.ctr(t, "tasks", "ls")
	if err != nil {
		t.Fatalf("ctr tasks ls: %v\n%s", err, out)
	}
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(l)
		if len(f) != 3 || f[2] != "RUNNING" {
			continue
		}
		m[f[0]] = f[1] + " " + procStart(f[1])
	}
	return m
}

// procStart is field 22 of /proc/<pid>/stat, the process's start time.
func procStart(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "gone"
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 19 {
			return f[19]
		}
	}
	return "?"
}

// runtimeOf is the runc options containerd keeps for container id, as
// text: they name the runtime binary (BinaryName) of its runtime class.
func (cc *chartCluster) runtimeOf(t *testing.T, id string) string {
	t.Helper()
	out, err := cc.k.ctr(t, "containers", "info", id)
	if err != nil {
		t.Fatalf("ctr containers info %s: %v\n%s", id, err, out)
	}
	var info struct {
		Runtime struct {
			Options struct {
				Value []byte `json:"value"` // protobuf, base64 in JSON
			}
		}
	}
	if i := strings.IndexByte(out, '{'); i < 0 || json.Unmarshal([]byte(out[i:]), &info) != nil {
		t.Fatalf("ctr containers info %s:\n%s", id, out)
	}
	return string(info.Runtime.Options.Value)
}

// podClaim is the ResourceClaim of pod name's one claim.
func (cc *chartCluster) podClaim(t *testing.T, name string) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	p, err := cc.c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s's claims: %+v, want one", name, p.Status.ResourceClaimStatuses)
	}
	claim, err := cc.c.ResourceV1().ResourceClaims("default").Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}

// podRunning waits until pod name (in default) runs, and returns its
// container's id.
func (cc *chartCluster) podRunning(t *testing.T, name string) string {
	t.Helper()
	var id string
	waitUntil(t, cc.k, cc.cp, 4*time.Minute, "pod "+name+" running", func() error {
		p, err := cc.c.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("phase %s %+v", p.Status.Phase, p.Status.Conditions)
		}
		id = strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
		return nil
	})
	return id
}

// exec runs argv in the container id, returning its output.
func (cc *chartCluster) exec(t *testing.T, id string, argv ...string) string {
	t.Helper()
	cc.execs++
	out, err := cc.k.ctr(t, append([]string{"tasks", "exec", "--exec-id", fmt.Sprintf("e2e-%d", cc.execs), id}, argv...)...)
	if err != nil {
		t.Errorf("in container %s: %v: %v\n%s", id, argv, err, out)
	}
	return out
}

// inContainer is path as container id sees it, from the host.
func (cc *chartCluster) inContainer(t *testing.T, id, path string) string {
	t.Helper()
	if proc, ok := cc.runningTasks(t)[id]; ok {
		return filepath.Join("/proc", strings.Fields(proc)[0], "root", path)
	}
	t.Fatalf("container %s is not running", id)
	return ""
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	s := sha256.Sum256(readFile(t, p))
	return hex.EncodeToString(s[:8])
}

func readFiles(t *testing.T, paths []string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	for _, p := range paths {
		m[p] = readFile(t, p)
	}
	return m
}
