package events

// What only vgpu node measures, written into its heartbeat (node.json) each
// second so that `vgpu status` and `vgpu top` show the same figures as the
// metrics: each limited container's compute share as the policy judges it
// and its throttle's duty, and each GPU's totals as the driver reports them.

// Share is the node's measure of one limited container on one GPU.
type Share struct {
	Container string `json:"container"`
	GPU       string `json:"gpu"` // UUID
	// Percent: the share averaged over the policy's window.
	Percent float64 `json:"percent"`
	// Duty: the fraction of each duty period the container is kept frozen
	// (0: not throttled).
	Duty float64 `json:"duty"`
}

// GPU is one GPU of the host as the driver reports it.
type GPU struct {
	Index       int    `json:"index"` // host index
	UUID        string `json:"uuid"`
	Name        string `json:"name,omitempty"`
	MemoryTotal uint64 `json:"memoryTotal"`
	MemoryUsed  uint64 `json:"memoryUsed"`
	// Busy: percent of the driver's last sample period a kernel ran (-1:
	// not known).
	Busy int `json:"busy"`
}

// Notify has f called with every event appended from now on, after it is
// written (Kubernetes Events, internal/node/kevents). f must not block.
func (w *Writer) Notify(f func(Event)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify = append(w.notify, f)
}
