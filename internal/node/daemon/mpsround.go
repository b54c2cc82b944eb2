package daemon

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/procinfo"
)

// mpsView is what the round last learnt from a spatial GPU's control daemon.
type mpsView struct {
	at      time.Time
	servers []int
	clients map[int]bool
	// capped: the servers and the percentage Cap last held them to, at capAt
	capped    []int
	cap       int
	capAt     time.Time
	lastError string
}

// mpsRefresh: the client lists are asked again at least this often, and at
// once when a tenant's process is not in them.
const mpsRefresh = time.Second

// mpsRound asks the spatial GPUs' control daemons for their servers and
// clients (for the heartbeat, and the servers to hold), only when a
// tenant's GPU process is not a known client or the last answer is older
// than mpsRefresh, and holds each GPU's servers to the largest share of its
// tenants (share: by GPU), so that a tenant that raises its own
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE gets no more than that. Who is a client
// is the driver's word (enforce.Proc.MPS), not the daemon's: a process can
// register on the daemon's socket without running through a server.
func (d *Daemon) mpsRound(now time.Time, in *enforce.Input, share map[string]int) {
	if len(d.o.MPS) == 0 {
		return
	}
	if d.mpsSeen == nil {
		d.mpsSeen = map[string]*mpsView{}
	}
	uuids := make([]string, 0, len(d.o.MPS))
	for u := range d.o.MPS {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	for _, uuid := range uuids {
		md := d.o.MPS[uuid]
		v := d.mpsSeen[uuid]
		if v == nil {
			v = &mpsView{}
			d.mpsSeen[uuid] = v
		}
		if _, ok := share[uuid]; !ok {
			continue // no tenant: nothing to judge or hold
		}
		need := v.clients == nil || now.Sub(v.at) >= mpsRefresh || now.Before(v.at)
		for _, pr := range in.Procs {
			if pr.GPU == uuid && pr.Container != "" && !pr.MPS && !v.clients[pr.HostPID] {
				need = true
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if need {
			servers, clients, err := md.Clients(ctx)
			if err != nil {
				if err.Error() != v.lastError {
					d.logf("vgpu node: MPS control daemon of GPU %s does not answer (its tenants' processes the driver lists outside MPS are still killed): %v", uuid, err)
				}
				v.lastError, v.clients = err.Error(), nil
				cancel()
				continue
			}
			v.at, v.servers, v.clients, v.lastError = now, servers, clients, ""
		}
		// Set again at every refresh, not only on a change: a root tenant
		// can reach the control daemon through the pipe directory's socket
		// and raise the share; that holds at most until the next refresh.
		if want := share[uuid]; want != v.cap || !slices.Equal(v.servers, v.capped) || now.Sub(v.capAt) >= mpsRefresh || now.Before(v.capAt) {
			if err := md.Cap(ctx, v.servers, want); err != nil {
				d.logf("vgpu node: holding the MPS servers of GPU %s to %d%%: %v", uuid, want, err)
			} else {
				v.cap, v.capped, v.capAt = want, slices.Clone(v.servers), now
			}
		}
		cancel()
	}
}

// mpsServer tells whether pid is an MPS server of one of the node's own
// control daemons: a child of a daemon it supervises (the daemon starts
// its servers itself, and answers no command while it does), or a server
// its last get_server_list named. A server holds memory on the GPU and is
// no MPS client; it is never a tenant's process, whatever cgroup or mount
// namespace it shares with one (a `vgpu exec` of the same session).
func (d *Daemon) mpsServer(pid int) bool {
	if len(d.o.MPS) == 0 {
		return false
	}
	for uuid, md := range d.o.MPS {
		if v := d.mpsSeen[uuid]; v != nil && slices.Contains(v.servers, pid) {
			return true
		}
		if dp := md.State().PID; dp > 0 {
			if st, err := procinfo.StatOf(d.o.ProcRoot, pid); err == nil && st.PPID == dp {
				return true
			}
		}
	}
	return false
}

// mpsStates is the heartbeat's view of the control daemons.
func (d *Daemon) mpsStates() []events.MPS {
	var out []events.MPS
	for uuid, md := range d.o.MPS {
		st := md.State()
		e := events.MPS{GPU: uuid, State: st.State, PID: st.PID, Restarts: st.Restarts, Since: st.Since, LastExit: st.LastExit, Error: st.Error}
		if v := d.mpsSeen[uuid]; v != nil {
			e.Servers, e.Clients, e.Cap = v.servers, len(v.clients), v.cap
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GPU < out[j].GPU })
	return out
}

// Record appends an event of the node itself (an MPS control daemon's start,
// exit or stop) to the events file.
func (d *Daemon) Record(kind, gpu, detail string) {
	d.logf("vgpu node: %s", detail)
	if err := d.ev.Append(events.Event{Time: d.o.Now().UTC(), Kind: kind, GPU: gpu, Device: -1, Detail: detail}); err != nil {
		d.logf("vgpu node: events file: %v", err)
	}
}
