package daemon

import (
	"github.com/vgpu-dev/vgpu/internal/procmap"
	"github.com/vgpu-dev/vgpu/internal/state"
)

// reapExecs removes the entries of `vgpu exec` runs whose process is gone:
// killed before it removed its own (SIGKILL, the OOM killer), each would
// stay in vgpu status as stale for good. The entry already holds nothing
// (the ledger's liveness rule); its command was killed with it (vgpu exec
// asks the kernel to). A container's entry is its runtime's to remove at
// delete: a stopped container keeps its own, shown stale, until then.
func (d *Daemon) reapExecs(m *procmap.Map) {
	failed := map[string]string{} // this round's, so that an entry gone since is forgotten
	for _, c := range m.Containers {
		if c.Record == nil || !c.Record.OnHost || !c.Gone {
			continue
		}
		if err := state.Remove(d.o.StateDir, c.ID); err != nil {
			if d.reapFailed[c.ID] != err.Error() { // once per cause, not every round
				d.logf("vgpu node: removing the entry %s of a vgpu exec whose process %d is gone: %v", c.ID, c.Record.InitPID(), err)
			}
			failed[c.ID] = err.Error()
			continue
		}
		d.logf("vgpu node: removed the entry %s of a vgpu exec whose process %d is gone", c.ID, c.Record.InitPID())
	}
	d.reapFailed = failed
}
