package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"

	"github.com/vgpu-dev/vgpu/internal/config"
)

// SuspendedFile, in <state_dir>/.node, is the set of processes vgpu node
// holds suspended to host memory (docs/node.md "Suspension"): written at
// every change, read by `vgpu status` and by the next vgpu node.
const SuspendedFile = "suspended.json"

// maxSuspendedBytes bounds what a reader takes in.
const maxSuspendedBytes = 4 << 20

// Suspended is one process held on the host by a suspension.
type Suspended struct {
	Container string `json:"container"`
	PID       int    `json:"pid"` // host pid
	// Start: the process's start time (/proc/<pid>/stat), so that a pid
	// reused after the process ended is never taken for it
	Start  uint64    `json:"start"`
	GPU    string    `json:"gpu"`    // UUID
	Device int       `json:"device"` // index inside the container
	Bytes  uint64    `json:"bytes"`  // what it held on the GPU, now on the host
	Since  time.Time `json:"since"`
	For    string    `json:"for,omitempty"` // the owner it was suspended for, in words
	// Suspending: the driver has not finished the suspension yet
	Suspending bool `json:"suspending,omitempty"`
}

// WriteSuspended replaces the suspended set of stateDir.
func WriteSuspended(stateDir string, ps []Suspended) error {
	if ps == nil {
		ps = []Suspended{}
	}
	b, err := json.Marshal(ps)
	if err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(stateDir, config.StateNode, SuspendedFile), append(b, '\n'), privateMode)
}

// ReadSuspended reads the suspended set of stateDir: none when there is no
// file.
func ReadSuspended(stateDir string) ([]Suspended, error) {
	path := filepath.Join(stateDir, config.StateNode, SuspendedFile)
	b, err := readLimited(path, maxSuspendedBytes+1)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) > maxSuspendedBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxSuspendedBytes)
	}
	var out []Suspended
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
