package daemon

import (
	"fmt"
	"time"

	"github.com/vgpu-dev/vgpu/internal/borrow"
	"github.com/vgpu-dev/vgpu/internal/node/enforce"
	"github.com/vgpu-dev/vgpu/internal/node/nvmlfeed"
	"github.com/vgpu-dev/vgpu/internal/procmap"
)

// What keeps taking memory back from being outrun or misused
// (docs/node.md "Memory borrowing"):
//   - a kill that takes memory back counts as a round of kills toward the
//     whole-container rule (3 rounds in 30 s), as memory and compute kills
//     do: a borrower whose workers respawn is killed whole;
//   - the room a kill freed for an owner is held for it while its need is
//     pending: every other tenant's ceiling excludes it, so a respawned
//     borrower is not admitted into it before the owner's retry;
//   - a need is acted on only when the owner has a live process on that GPU
//     in the driver's list, attributed to its container (an owner holding
//     nothing there has no allocation waiting), and not while the GPU holds
//     memory no process explains that appeared as the owner's own processes
//     left the list (memory it hides is still its own).

// guard is that state between rounds.
type guard struct {
	held map[string]map[string]heldNeed // by GPU UUID, then owner id
	// cut: this round's take-back victims, by GPU UUID: held to their
	// request until the next round (their ceiling, computed with the killed
	// process's memory, would let a respawned worker take it back at once)
	cut map[string]map[string]bool
}

type heldNeed struct {
	bytes uint64
	at    time.Time // refreshed every round the owner's need stays pending
}

// heldFresh: a held room not refreshed for this long is released (the
// owner's need was met, or the owner is gone).
func (d *Daemon) heldFresh() time.Duration { return max(3*d.o.Interval, time.Second) }

// holdRoom returns ceils with, for every tenant but the owners the room is
// held for, the held room taken out of what it may borrow, and this round's
// take-back victims held to their request.
func (d *Daemon) holdRoom(now time.Time, uuid string, total, outside uint64, in []borrow.Tenant, ceils []uint64) []uint64 {
	if cut := d.grd.cut[uuid]; len(cut) > 0 {
		ceils = append([]uint64(nil), ceils...)
		for i, t := range in {
			if cut[t.ID] {
				ceils[i] = min(ceils[i], t.Request)
			}
		}
		delete(d.grd.cut, uuid)
	}
	var sum uint64
	for _, h := range d.grd.held[uuid] {
		if now.Sub(h.at) < d.heldFresh() {
			sum += h.bytes
		}
	}
	if sum == 0 {
		return ceils
	}
	out := append([]uint64(nil), ceils...)
	for i, t := range in {
		excl := sum
		if h, ok := d.grd.held[uuid][t.ID]; ok && now.Sub(h.at) < d.heldFresh() {
			excl -= h.bytes // the owner's own room stays its own
		}
		if excl == 0 {
			continue
		}
		var c []uint64
		if d.o.BorrowFree {
			c = borrow.FreeCeilings(total, sat(outside, excl), in)
		} else {
			c = borrow.Ceilings(total, sat(outside, excl), in)
		}
		out[i] = min(out[i], c[i])
	}
	return out
}

func sat(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// needSeen records an owner's need as read this round: a held room stays
// while the need is pending, at most what is asked now.
func (d *Daemon) needSeen(now time.Time, uuid, id string, need uint64) {
	h, ok := d.grd.held[uuid][id]
	if !ok {
		return
	}
	if need == 0 {
		delete(d.grd.held[uuid], id)
		return
	}
	d.grd.held[uuid][id] = heldNeed{bytes: min(h.bytes, need), at: now}
}

// hold keeps need bytes on GPU uuid for owner id from now on.
func (d *Daemon) hold(now time.Time, uuid, id string, need uint64) {
	if d.grd.held == nil {
		d.grd.held = map[string]map[string]heldNeed{}
	}
	if d.grd.held[uuid] == nil {
		d.grd.held[uuid] = map[string]heldNeed{}
	}
	d.grd.held[uuid][id] = heldNeed{bytes: need, at: now}
}

// ownerUnproven says why owner id's need on GPU uuid is not acted on (""
// to act): it has no live process there in the driver's list, or the GPU
// holds memory no process explains since its own processes left the list.
func (d *Daemon) ownerUnproven(uuid, id string, need uint64, samples []nvmlfeed.Sample, owner map[int]string) string {
	if d.suspectHolds(uuid, id) {
		return fmt.Sprintf("%s asks %s on GPU %s while memory no process explains appeared as its own processes left the list: nothing is taken back for it", id, borrow.Size(need), uuid)
	}
	for _, s := range samples {
		if s.GPU == uuid && owner[s.HostPID] == id && s.UsedBytes > 0 {
			if _, exited := d.orph.exited[s.HostPID]; !exited {
				return ""
			}
		}
	}
	return fmt.Sprintf("%s asks %s on GPU %s but has no live process there in the driver's list: nothing is taken back for it", id, borrow.Size(need), uuid)
}

// cutToRequest holds tenant id on GPU uuid to its request until the next
// round: a take-back's victim.
func (d *Daemon) cutToRequest(uuid, id string) {
	if d.grd.cut == nil {
		d.grd.cut = map[string]map[string]bool{}
	}
	if d.grd.cut[uuid] == nil {
		d.grd.cut[uuid] = map[string]bool{}
	}
	d.grd.cut[uuid][id] = true
}

// actTakeBack carries out a kill that takes memory back for owner, counted
// as a round of kills of the borrower toward the whole-container rule, and
// holds the room it frees for the owner.
func (d *Daemon) actTakeBack(now time.Time, m *procmap.Map, a enforce.Action, dev int, owner string, need uint64, samples []nvmlfeed.Sample, owners map[int]string) {
	d.hold(now, a.GPU, owner, need)
	d.cutToRequest(a.GPU, a.Container)
	c := enforce.Container{ID: a.Container}
	for _, mc := range m.Containers {
		if mc.ID == a.Container {
			c.Cgroup = mc.Cgroup
		}
	}
	var procs []enforce.Proc
	for _, s := range samples {
		if owners[s.HostPID] == a.Container {
			procs = append(procs, enforce.Proc{HostPID: s.HostPID, GPU: s.GPU, UsedBytes: s.UsedBytes, Container: a.Container})
		}
	}
	for _, x := range d.policy.CountKill(now, c, a, procs) {
		d.act(now, m, x, dev)
	}
}
