// Package events is what `vgpu node` leaves in the state directory for
// `vgpu status` (docs/node.md): <state_dir>/.node/node.json, the daemon's
// heartbeat (rewritten atomically every second), and
// <state_dir>/.node/events.jsonl, one JSON object per line for every kill,
// escalation and start or end of a throttle (kept under MaxFileBytes: the
// older half moves to events.jsonl.1). The leading dot keeps the directory
// out of the runtime's container ids.
package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/atomicfile"
	"github.com/vgpu-dev/vgpu/internal/config"
)

const (
	HeartbeatFile = "node.json"
	EventsFile    = "events.jsonl"
	MaxFileBytes  = 1 << 20
	// tailBytes: how much of the events file a reader looks at.
	tailBytes = 256 << 10
)

// Heartbeat says that the daemon runs and how it enforces.
type Heartbeat struct {
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"`
	Beat     time.Time `json:"beat"`
	Interval string    `json:"interval"` // sampling period
	Grace    string    `json:"grace"`
	// Tolerance: the memory above a limit that is not acted on.
	Tolerance string `json:"tolerance"`
	// Metrics: the address /metrics is served on ("" = none).
	Metrics string `json:"metrics,omitempty"`
	// Error: the last round's error ("" = it went through).
	Error string `json:"error,omitempty"`
	// Shares and GPUs: what the node measured in its last round (figures.go).
	Shares []Share `json:"shares,omitempty"`
	GPUs   []GPU   `json:"gpus,omitempty"`
	// MPS: the MPS control daemons of the spatial GPUs (docs/spatial.md).
	MPS []MPS `json:"mps,omitempty"`
}

// MPS is one spatial GPU's control daemon as vgpu node runs it.
type MPS struct {
	GPU      string    `json:"gpu"`   // UUID
	State    string    `json:"state"` // starting, running, restarting, stopped
	PID      int       `json:"pid,omitempty"`
	Restarts int       `json:"restarts"`
	Since    time.Time `json:"since"`
	LastExit string    `json:"lastExit,omitempty"`
	Error    string    `json:"error,omitempty"`
	Servers  []int     `json:"servers,omitempty"` // its MPS servers' pids, as last asked
	Clients  int       `json:"clients"`           // their clients, as last asked
	Cap      int       `json:"cap,omitempty"`     // the active thread percentage its servers are held to
}

// Stale is how old a heartbeat may be before enforcement counts as off.
const Stale = 5 * time.Second

// On tells whether the heartbeat says the daemon is running at now.
func (h *Heartbeat) On(now time.Time) bool {
	return h != nil && now.Sub(h.Beat) < Stale && h.Beat.Sub(now) < Stale
}

// Event is one thing the daemon did.
type Event struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"` // kill, escalate, freeze, thaw; mps-start, mps-exit, mps-stop (Container "")
	Container string    `json:"container"`
	GPU       string    `json:"gpu,omitempty"`    // UUID
	Device    int       `json:"device"`           // index inside the container (-1: not known)
	PID       int       `json:"pid,omitempty"`    // host pid (kill)
	Reason    string    `json:"reason,omitempty"` // memory, compute
	Used      uint64    `json:"used"`             // bytes (memory) or percent (compute)
	Limit     uint64    `json:"limit"`
	Detail    string    `json:"detail,omitempty"`
	Error     string    `json:"error,omitempty"` // the action failed
	// Priority: the device's priority when not normal ("high", "low"),
	// named beside its limit.
	Priority string `json:"priority,omitempty"`
}

// privateMode is the mode of .node's files that only root reads.
const privateMode = 0o600

// Writer appends events and writes heartbeats under one state directory.
type Writer struct {
	dir    string
	mu     sync.Mutex
	notify []func(Event)
}

// NewWriter creates <stateDir>/.node.
func NewWriter(stateDir string) (*Writer, error) {
	dir := filepath.Join(stateDir, config.StateNode)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Writer{dir: dir}, nil
}

// Append writes e as one line (one write(2) on an O_APPEND descriptor).
func (w *Writer) Append(e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.notify {
		defer f(e)
	}
	path := filepath.Join(w.dir, EventsFile)
	if fi, err := os.Stat(path); err == nil && fi.Size()+int64(len(b)) > MaxFileBytes {
		if err := os.Rename(path, path+".1"); err != nil {
			return err
		}
	}
	// Only root reads the events (vgpu status as root, kevents): they name
	// every tenant's pids and figures. The heartbeat stays readable to all,
	// for any user's "host enforcement: on/off". O_NOFOLLOW: .node is the
	// host's, but a link planted there is never written through.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, privateMode)
	if err != nil {
		return err
	}
	if err := f.Chmod(privateMode); err != nil { // a file an earlier release made 0644
		f.Close()
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Beat writes the heartbeat atomically (temp file, rename).
func (w *Writer) Beat(h Heartbeat) error {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(w.dir, HeartbeatFile), append(b, '\n'), 0o644)
}

// Stop removes the heartbeat (a clean exit: enforcement is off now).
func (w *Writer) Stop() error {
	err := os.Remove(filepath.Join(w.dir, HeartbeatFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// ReadHeartbeat reads the heartbeat; nil, nil when there is none.
func ReadHeartbeat(stateDir string) (*Heartbeat, error) {
	b, err := readLimited(filepath.Join(stateDir, config.StateNode, HeartbeatFile), 64<<10)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h Heartbeat
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(stateDir, config.StateNode, HeartbeatFile), err)
	}
	return &h, nil
}

func readLimited(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// Read returns the events of the file's last 256 KiB, oldest first; lines
// that do not parse (a torn tail) are skipped.
func Read(stateDir string) ([]Event, error) {
	path := filepath.Join(stateDir, config.StateNode, EventsFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := fi.Size() - tailBytes
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, tailBytes))
	if err != nil {
		return nil, err
	}
	if off > 0 { // drop the partial first line
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return Parse(b), nil
}

// Parse parses event lines, skipping the ones that do not parse.
func Parse(b []byte) []Event {
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), tailBytes)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Kind != "" {
			out = append(out, e)
		}
	}
	return out
}
