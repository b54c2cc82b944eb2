package daemon

import (
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
)

// Notify has f called with every event the daemon records from now on
// (Kubernetes Events); f must not block.
func (d *Daemon) Notify(f func(events.Event)) { d.ev.Notify(f) }

// gpuFigures are the GPUs' figures as the driver reports them now; false
// when the source lists none or the read failed.
func (d *Daemon) gpuFigures() ([]nvmlfeed.GPU, bool) {
	l, ok := d.o.Source.(nvmlfeed.GPULister)
	if !ok {
		return nil, false
	}
	gs, err := l.GPUs()
	return gs, err == nil
}

// gpus are the GPUs' totals, when the source reports them.
func (d *Daemon) gpus() []events.GPU {
	gs, ok := d.gpuFigures()
	if !ok {
		return nil
	}
	out := make([]events.GPU, 0, len(gs))
	for _, g := range gs {
		out = append(out, events.GPU{Index: g.Index, UUID: g.UUID, Name: g.Name, MemoryTotal: g.MemoryTotal, MemoryUsed: g.MemoryUsed, Busy: g.Busy})
	}
	return out
}
