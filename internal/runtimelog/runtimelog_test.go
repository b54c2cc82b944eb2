package runtimelog

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
