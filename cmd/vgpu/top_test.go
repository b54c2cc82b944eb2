package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets a test run this binary's main (the whole CLI, exit status
// and all) by re-executing the test binary.
func TestMain(m *testing.M) {
	if os.Getenv("VGPU_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"vgpu"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runVgpu(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "VGPU_TEST_RUN_MAIN=1", "VGPU_CONFIG="+filepath.Join(t.TempDir(), "none.toml"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// A state directory that is absent or not a directory: one line naming it
// and the fix, exit status 1, nothing on stdout.
func TestTopBadStateDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(t.TempDir(), "absent"), file} {
		out, errOut, code := runVgpu(t, "top", "--once", "--state-dir", dir)
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, dir) || !strings.Contains(errOut, "--state-dir") {
			t.Errorf("vgpu top --once --state-dir %s: status %d, stdout %q, stderr %q; want one line naming it, status 1", dir, code, out, errOut)
		}
		if strings.Contains(errOut, "goroutine") {
			t.Errorf("stack trace: %s", errOut)
		}
	}
}

func TestTopOnceEmpty(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := runVgpu(t, "top", "--once", "--state-dir", dir)
	if code != 0 || !strings.Contains(out, "no vgpu containers") || strings.Contains(out, "\x1b") {
		t.Errorf("status %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := runVgpu(t, "top", "--once", "--state-dir", dir, "--sort", "size"); code != 2 || !strings.Contains(errOut, "--sort") {
		t.Errorf("--sort size: status %d, %q", code, errOut)
	}
}
