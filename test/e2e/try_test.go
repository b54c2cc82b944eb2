//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// make try (test/try.sh, docs/try.md) sets up the simulated
// GPU for docker and podman as a user would try it without a GPU. This test
// runs the script and then what it prints, against private engines.
func TestTry(t *testing.T) {
	requireRoot(t)
	need(t, "docker", "dockerd", "podman", "runc", "busybox", "gcc")
	repo := repoRoot(t)
	build := os.Getenv("VGPU_BUILD")
	if build == "" {
		build = filepath.Join(repo, "build")
	}
	dir := privateDir(t, "try")
	try := filepath.Join(dir, "try")
	out := mustRun(t, 5*time.Minute, []string{"BUILD=" + build, "TRY_DIR=" + try, "TRY_IMPORT=0"}, filepath.Join(repo, "test/try.sh"))
	wrapper := filepath.Join(try, "vgpu-runtime")
	for _, want := range []string{
		"vgpu setup docker --runtime-path " + wrapper,
		"docker run --rm --runtime=vgpu -e VGPU_VISIBLE_DEVICES=0 -e VGPU_MEMORY_LIMIT=2Gi vgpu-try nvidia-smi",
		"podman --runtime " + wrapper + " run --rm -e VGPU_VISIBLE_DEVICES=0 -e VGPU_MEMORY_LIMIT=2Gi vgpu-try nvidia-smi",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("make try does not print %q:\n%s", want, out)
		}
	}
	// docs/try.md's engine commands are make try's, verbatim (its build/try
	// is TRY_DIR here): a page that drifts from the script fails.
	page, err := os.ReadFile(filepath.Join(repo, "docs/try.md"))
	if err != nil {
		t.Fatal(err)
	}
	inBlock, n := false, 0
	for _, line := range strings.Split(string(page), "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock || !(strings.HasPrefix(line, "docker run ") || strings.HasPrefix(line, "podman ") || strings.HasPrefix(line, "ctr ")) {
			continue
		}
		n++
		if cmd := strings.ReplaceAll(line, "$PWD/build/try", try); !strings.Contains(out, "  "+cmd+"\n") {
			t.Errorf("docs/try.md's command is not one make try prints:\n%s\nmake try:\n%s", cmd, out)
		}
	}
	if n < 7 {
		t.Errorf("found %d engine commands in docs/try.md, want the docker, podman and containerd ones", n)
	}
	image := filepath.Join(try, "image.tar")
	// What a user sees: nvidia-smi shows the limit; the CUDA client gets
	// 2 GiB less the context's 256 MiB, then CUDA_ERROR_OUT_OF_MEMORY (2).
	check := func(t *testing.T, engine, smi, fill string) {
		t.Helper()
		if !strings.Contains(smi, "0MiB /    2048MiB") {
			t.Errorf("%s: nvidia-smi does not show 2048 MiB:\n%s", engine, smi)
		}
		if !strings.Contains(fill, "\nfirst_bytes=1879048192\nfirst_err=2\n") {
			t.Errorf("%s: cuda-fill did not stop at 1792 MiB with error 2:\n%s", engine, fill)
		}
	}
	req := []string{"-e", "VGPU_VISIBLE_DEVICES=0", "-e", "VGPU_MEMORY_LIMIT=2Gi", "vgpu-try"}

	t.Run("docker", func(t *testing.T) {
		ddir := privateDir(t, "try-docker")
		cfg := filepath.Join(ddir, "daemon.json")
		writeFile(t, cfg, []byte("{}\n"), 0o644)
		d := startDockerdWith(t, ddir, cfg)
		mustVgpu(t, "setup", "docker", "--config", cfg, "--runtime-path", wrapper)
		d.reload(t, "vgpu runtime added", func(info string) bool { return strings.Contains(info, `"vgpu"`) })
		if out, err := d.docker(t, "import", image, "vgpu-try"); err != nil {
			t.Fatalf("docker import: %v\n%s", err, out)
		}
		smi, err := d.docker(t, append([]string{"run", "--rm", "--runtime=vgpu", "--network=none"}, append(req, "nvidia-smi")...)...)
		if err != nil {
			t.Fatalf("docker run nvidia-smi: %v\n%s", err, smi)
		}
		fill, err := d.docker(t, append([]string{"run", "--rm", "--runtime=vgpu", "--network=none"}, append(req, "cuda-fill", "fill", "alloc", "256")...)...)
		if err != nil {
			t.Fatalf("docker run cuda-fill: %v\n%s", err, fill)
		}
		check(t, "docker", smi, fill)
	})
	t.Run("podman", func(t *testing.T) {
		p := newPodman(t)
		if out, err := p.podman(t, "import", image, "vgpu-try"); err != nil {
			t.Fatalf("podman import: %v\n%s", err, out)
		}
		// The runtime by path, as make try prints it (after the harness's --runtime runc).
		smi, err := p.podman(t, append([]string{"--runtime", wrapper, "run", "--rm", "--network=none"}, append(req, "nvidia-smi")...)...)
		if err != nil {
			t.Fatalf("podman run nvidia-smi: %v\n%s", err, smi)
		}
		fill, err := p.podman(t, append([]string{"--runtime", wrapper, "run", "--rm", "--network=none"}, append(req, "cuda-fill", "fill", "alloc", "256")...)...)
		if err != nil {
			t.Fatalf("podman run cuda-fill: %v\n%s", err, fill)
		}
		check(t, "podman", smi, fill)
		// The compute example launches kernels and reports the busy share
		// (its value is timing: only that there is one is checked here).
		busy, err := p.podman(t, append([]string{"--runtime", wrapper, "run", "--rm", "--network=none", "-e", "VGPU_COMPUTE_LIMIT=25"}, append(req, "busy-share")...)...)
		if err != nil || !regexp.MustCompile(`device busy [0-9.]+ % of the window`).MatchString(busy) {
			t.Errorf("podman run busy-share: %v\n%s", err, busy)
		}
		if want := "-e VGPU_COMPUTE_LIMIT=25 vgpu-try busy-share"; !strings.Contains(out, want) {
			t.Errorf("make try does not print %q:\n%s", want, out)
		}
	})
	t.Run("containerd", func(t *testing.T) {
		// The image archive make try writes, imported as it prints.
		if want := "ctr image import " + filepath.Join(try, "image-archive.tar"); !strings.Contains(out, want) {
			t.Errorf("make try does not print %q:\n%s", want, out)
		}
		c := startContainerd(t)
		if o, err := c.ctr(t, "image", "import", filepath.Join(try, "image-archive.tar")); err != nil {
			t.Fatalf("ctr image import: %v\n%s", err, o)
		}
		ref := "docker.io/library/vgpu-try:latest"
		env := []string{"--env", "VGPU_VISIBLE_DEVICES=0", "--env", "VGPU_MEMORY_LIMIT=2Gi"}
		smi, err := c.ctr(t, append(append([]string{"run", "--rm", "--runc-binary", wrapper}, env...), ref, "try-smi", "nvidia-smi")...)
		if err != nil {
			t.Fatalf("ctr run nvidia-smi: %v\n%s", err, smi)
		}
		fill, err := c.ctr(t, append(append([]string{"run", "--rm", "--runc-binary", wrapper}, env...), ref, "try-fill", "cuda-fill", "fill", "alloc", "256")...)
		if err != nil {
			t.Fatalf("ctr run cuda-fill: %v\n%s", err, fill)
		}
		check(t, "containerd", smi, fill)
	})
}

// make demo on the simulated GPU says what a user checks: memory in MiB, the
// context's cost, a compute limit at work, a refused request with its message.
// (The busy shares are timing; their presence is checked, not their values.)
func TestDemo(t *testing.T) {
	requireRoot(t)
	need(t, "runc", "busybox", "gcc")
	repo := repoRoot(t)
	build := os.Getenv("VGPU_BUILD")
	if build == "" {
		build = filepath.Join(repo, "build")
	}
	out := mustRun(t, 5*time.Minute, []string{"BUILD=" + build, "VGPU_DEMO_SIM=1"}, filepath.Join(repo, "test/demo.sh"))
	for _, want := range []string{
		"0MiB /    2048MiB",
		"\nfirst_bytes        1792 MiB\nfirst_err             2   (CUDA_ERROR_OUT_OF_MEMORY)\n",
		"\nthe context took 256 MiB of the 2048 MiB before any allocation",
		"\nno compute limit:        device busy ",
		"\nVGPU_COMPUTE_LIMIT=25:   device busy ",
		"\nvgpu-runtime: bad GPU request: VGPU_MEMORY_LIMIT=\"lots\": not a size",
		"(vgpu-runtime exit status 1: the container was not created)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("make demo does not show %q:\n%s", want, out)
		}
	}
}
