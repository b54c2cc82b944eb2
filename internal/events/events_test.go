package events

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vgpu-dev/vgpu/internal/config"
)

func TestAppendReadRotate(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0).UTC()
	for i := 0; i < 6000; i++ { // > MaxFileBytes of lines: one rotation at least
		if err := w.Append(Event{Time: now, Kind: "kill", Container: "c", PID: i, Detail: "over limit + tolerance for 600ms, process holds 4 GiB of device memory"}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := Read(dir)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].PID != 5999 {
		t.Fatalf("read %d events, %v", len(evs), err)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].PID != evs[i-1].PID+1 {
			t.Fatalf("events out of order or torn at %d: %d after %d", i, evs[i].PID, evs[i-1].PID)
		}
	}
	if err := w.Beat(Heartbeat{PID: 1, Beat: now}); err != nil {
		t.Fatal(err)
	}
	h, err := ReadHeartbeat(dir)
	if err != nil || !h.On(now.Add(time.Second)) || h.On(now.Add(Stale)) {
		t.Fatalf("heartbeat %+v %v", h, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"time":"2026-01-01T00:00:00Z","kind":"kill","container":"c","pid":3}` + "\n" + `{"kind":` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, e := range Parse(b) {
			if e.Kind == "" {
				t.Fatal("event without kind")
			}
		}
	})
}

// Pod names are the tenant's: stored as valid UTF-8 and at most
// MaxPodField bytes, whole runes.
func TestPodsClean(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("é", 200) // 400 bytes
	if err := WritePods(dir, map[string]Pod{"c1": {Namespace: "a\xffb", Name: long, Container: "main"}}); err != nil {
		t.Fatal(err)
	}
	pods, err := ReadPods(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := pods["c1"]
	if p.Namespace != "a\uFFFDb" || p.Container != "main" || len(p.Name) > MaxPodField || !utf8.ValidString(p.Name) || len(p.Name) < MaxPodField-1 {
		t.Errorf("stored %q (name %d bytes)", p, len(p.Name))
	}
	if pods, err := ReadPods(t.TempDir()); err != nil || len(pods) != 0 {
		t.Errorf("no pods.json: %v, %v", pods, err)
	}
}

// The events name every tenant's pids and figures: root's only, also when
// an earlier release made the file world-readable; the heartbeat stays
// readable to every user (vgpu status's "host enforcement").
func TestNodeFileModes(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, config.StateNode, EventsFile)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(Event{Time: time.Now(), Kind: "kill", Container: "c", PID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Beat(Heartbeat{PID: 1}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{EventsFile: 0o600, HeartbeatFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, config.StateNode, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", name, got, want)
		}
	}
}
