package shim

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoggerJSON(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log.json")
	if err := os.WriteFile(p, []byte(`{"level":"info","msg":"before","time":"x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	l := &Logger{Path: p, Format: "json", Stderr: &stderr}
	l.Error(`bad "value"`)
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("log: %q", b)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(lines[1]), &m); err != nil || m["level"] != "error" || m["msg"] != `bad "value"` || m["time"] == "" {
		t.Errorf("line %q: %v %v", lines[1], m, err)
	}
	if stderr.String() != "vgpu-runtime: bad \"value\"\n" {
		t.Errorf("stderr %q", stderr.String())
	}
}

func TestLoggerText(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	(&Logger{Path: p, Format: "text"}).Error("no good")
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), `level=error msg="no good"`) {
		t.Errorf("%q", b)
	}
}

func TestFindRuntime(t *testing.T) {
	if _, err := FindRuntime([]string{"/nonexistent/runc", "no-such-runtime-xyz"}); err == nil {
		t.Error("found a missing runtime")
	}
	p, err := FindRuntime([]string{"no-such-runtime-xyz", "/bin/sh"})
	if err != nil || p != "/bin/sh" {
		t.Errorf("%q %v", p, err)
	}
}

// podman runs `delete --force` with no PATH at all: a bare runtime name is
// still found, in the system's directories, and not found when it is in
// none of them.
func TestFindRuntimeWithoutPATH(t *testing.T) {
	t.Setenv("PATH", "")
	p, err := FindRuntime([]string{"sh"})
	if err != nil || !filepath.IsAbs(p) {
		t.Errorf("sh without PATH: %q %v", p, err)
	}
	if _, err := FindRuntime([]string{"no-such-runtime-xyz"}); err == nil || !strings.Contains(err.Error(), "tried no-such-runtime-xyz on PATH /usr/local/sbin:") {
		t.Errorf("a missing runtime without PATH: %v", err)
	}
}
