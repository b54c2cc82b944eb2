package daemon

import (
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/procmap"
)

// roundView is what one round reads once, at its start (Daemon.view): the
// driver's samples, the tenants and which of them owns each process, and
// the enforcement input built from them. Every step reads this one view,
// so no two steps of a round see the host differently.
type roundView struct {
	now          time.Time
	samples      []nvmlfeed.Sample
	tenants      *procmap.Map
	byID         map[string]*procmap.Container // tenants with a record
	owner        map[int]string                // host pid -> container id, "" none
	in           enforce.Input                 // the mps step adds its rules before enforcement reads it
	devIndex     map[string]map[string]int     // container -> GPU uuid -> device index
	spatialShare map[string]int                // spatial GPU -> the largest share of its tenants
}

// roundStep is one thing a round does over its view.
type roundStep struct {
	name string
	run  func(d *Daemon, v *roundView)
}

// roundSteps, in the order a round runs them: a new per-round concern is
// one entry here. The mps step must come before enforcement (it adds the
// spatial GPUs' rules to the input); the shares are published from what
// enforcement decided; gone vgpu execs' entries are removed last, after
// every step read them.
var roundSteps = []roundStep{
	{"orphans", func(d *Daemon, v *roundView) { d.orphanRound(v.now, v.tenants, v.samples, v.owner, v.byID) }},
	{"mps", func(d *Daemon, v *roundView) { d.mpsRound(v.now, &v.in, v.spatialShare) }},
	{"pid maps", func(d *Daemon, v *roundView) { d.writePidMaps(v.byID, v.owner) }},
	{"borrowing", func(d *Daemon, v *roundView) {
		d.borrow(v.now, v.tenants, v.samples, memOwners(v.tenants, v.samples, v.owner, v.byID))
	}},
	{"driver limits", func(d *Daemon, v *roundView) { d.readDriverLimits(v.tenants) }},
	{"enforcement", (*Daemon).enforceStep},
	{"shares", (*Daemon).publishShares},
	{"gone vgpu execs", func(d *Daemon, v *roundView) { d.reapExecs(v.tenants) }},
}

// enforceStep runs the enforcement policy over the round's input and acts
// on what it decides.
func (d *Daemon) enforceStep(v *roundView) {
	for _, a := range d.policy.Step(v.in) {
		idx := -1
		if di, ok := v.devIndex[a.Container][a.GPU]; ok {
			idx = di
		}
		d.act(v.now, v.tenants, a, idx)
	}
}

// publishShares keeps the policy's shares of the tenants still recorded,
// for vgpu status and the metrics.
func (d *Daemon) publishShares(v *roundView) {
	d.m.share.Reset()
	d.m.duty.Reset()
	d.shares = d.shares[:0]
	for _, sh := range d.policy.Shares() {
		if v.byID[sh.Container] == nil {
			continue
		}
		d.shares = append(d.shares, events.Share{Container: sh.Container, GPU: sh.GPU, Percent: sh.Percent, Duty: sh.Duty})
		d.m.share.WithLabelValues(sh.Container, sh.GPU).Set(sh.Percent)
		d.m.duty.WithLabelValues(sh.Container, sh.GPU).Set(sh.Duty)
	}
}
