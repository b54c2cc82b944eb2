package daemon

import (
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// Notify has f called with every event the daemon records from now on
// (Kubernetes Events); f must not block.
func (d *Daemon) Notify(f func(events.Event)) { d.ev.Notify(f) }

// gpus are the GPUs' totals, when the source reports them.
func (d *Daemon) gpus() []events.GPU {
	l, ok := d.o.Source.(nvmlfeed.GPULister)
	if !ok {
		return nil
	}
	gs, err := l.GPUs()
	if err != nil {
		return nil
	}
	out := make([]events.GPU, 0, len(gs))
	for _, g := range gs {
		out = append(out, events.GPU{Index: g.Index, UUID: g.UUID, Name: g.Name, MemoryTotal: g.MemoryTotal, MemoryUsed: g.MemoryUsed, Busy: g.Busy})
	}
	return out
}
