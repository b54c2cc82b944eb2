package nvmlfeed

// GPU is one GPU's totals as the driver reports them.
type GPU struct {
	Index       int
	UUID, Name  string
	MemoryTotal uint64
	MemoryUsed  uint64
	Busy        int // percent over the driver's last sample period; -1: not known
}

// GPULister is a Source that also reports each GPU's totals (the daemon
// writes them into its heartbeat for vgpu status and vgpu top).
type GPULister interface {
	GPUs() ([]GPU, error)
}
