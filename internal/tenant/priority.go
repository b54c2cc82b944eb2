package tenant

import (
	"encoding/json"
	"fmt"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

// Priority orders a device's work inside the pacing period against the
// other tenants of its GPU: while a higher one has work queued or running,
// a lower one starts nothing beyond what its compute request guarantees.
// It takes no request away and lifts no limit. The zero value is normal,
// the priority of every record before priorities existed.
type Priority uint8

const (
	Normal Priority = iota
	High
	Low
)

// ParsePriority reads a priority as users write it (VGPU_PRIORITY, the
// vgpu.io/priority annotation, vgpu exec --priority, defaults.priority).
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "normal":
		return Normal, nil
	case "high":
		return High, nil
	case "low":
		return Low, nil
	}
	return Normal, fmt.Errorf("priority %q: want high, normal or low", s)
}

// String is the priority as users write it.
func (p Priority) String() string {
	switch p {
	case High:
		return "high"
	case Low:
		return "low"
	}
	return "normal"
}

// Rank orders priorities: a higher rank goes first.
func (p Priority) Rank() int {
	switch p {
	case High:
		return 2
	case Low:
		return 0
	}
	return 1
}

// Above: p goes before q.
func (p Priority) Above(q Priority) bool { return p.Rank() > q.Rank() }

// ShareWord is the share file's priority word (vgpu_share.h,
// VGPU_PRIORITY_*).
func (p Priority) ShareWord() uint64 {
	switch p {
	case High:
		return contract.PriorityHigh
	case Low:
		return contract.PriorityLow
	}
	return contract.PriorityNormal
}

// MarshalJSON writes the priority by name.
func (p Priority) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// UnmarshalJSON reads a priority by name.
func (p *Priority) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("priority: %s: want \"high\", \"normal\" or \"low\"", b)
	}
	v, err := ParsePriority(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}
