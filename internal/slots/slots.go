// Package slots gives paced devices their turn on a GPU: the slot assignment
// step of the pipeline (docs/design.md "Slot assignment"). It is pure: the
// state store (internal/state) calls Assign under the state directory's lock
// with the slots the other containers hold, before the quota file is written.
//
// Containers that are paced on one GPU take turns. With a pacing period T,
// a container limited to P % runs in stretches of P % of T; left to itself
// each container's stretch starts whenever its bucket refills, so the
// stretches of two containers drift over each other, the driver time-slices
// them, and each is charged the whole overlap (on an H200 a 30:70 pair
// became 24:76, docs/archive/gpu-runs.md). The host therefore gives each paced device a phase, a
// slot [phase, phase+P) in percent of every period on the host's
// CLOCK_MONOTONIC, chosen to overlap the slots of the other containers on
// that GPU as little as possible. The library runs a busy container's work
// only in its slot; a light one (below its share) starts at once
// (lib/cudahook/src/pacer.c, vgpu_pacer_may_start). `vgpu exec` takes
// a slot the same way while its command runs (internal/vgpuexec).
package slots

import "github.com/vgpu-dev/vgpu/internal/contract"

// Slot is a container's turn on one GPU, in percent of the period.
type Slot struct{ Start, Width int }

// Overlap is how many percent points two slots on the circle 0..99 share.
func Overlap(a, b Slot) int {
	n := 0
	for i := 0; i < a.Width; i++ {
		if ((a.Start+i)%100-b.Start+100)%100 < b.Width {
			n++
		}
	}
	return n
}

// Pick returns the start of a slot of the given width that overlaps the
// taken ones least: the earliest such among 0 and the ends of the taken
// slots, so that slots pack from 0 without gaps.
func Pick(width int, taken []Slot) int {
	best, bestOv := 0, -1
	cands := []int{0}
	for _, t := range taken {
		cands = append(cands, (t.Start+t.Width)%100)
	}
	for _, c := range cands {
		ov := 0
		for _, t := range taken {
			ov += Overlap(Slot{c, width}, t)
		}
		if bestOv < 0 || ov < bestOv || (ov == bestOv && c < best) {
			best, bestOv = c, ov
		}
	}
	return best
}

// Paced says whether a device with this compute limit takes a slot.
func Paced(compute int) bool { return compute > 0 && compute < contract.ComputeUnlimited }

// Want is one device that needs a slot.
type Want struct {
	UUID    string // the physical GPU
	Compute int    // percent, the slot's width
}

// Assign returns a phase for each of want, in order, given the slots taken
// on each GPU (by UUID); each new slot is taken before the next is picked.
func Assign(want []Want, taken map[string][]Slot) []int {
	out := make([]int, len(want))
	for i, w := range want {
		out[i] = Pick(w.Compute, taken[w.UUID])
		taken[w.UUID] = append(taken[w.UUID], Slot{out[i], w.Compute})
	}
	return out
}
