package inject

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/config"
)

// Containers that are paced on one GPU take turns. With a pacing period T,
// a container limited to P % runs in stretches of P % of T; left to itself
// each container's stretch starts whenever its bucket refills, so the
// stretches of two containers drift over each other, the driver time-slices
// them, and each is charged the whole overlap (docs/gpu-validation.md, run 5:
// 30:70 became 24:76). The host therefore gives each paced device a phase, a
// slot [phase, phase+P) in percent of every period on the host's
// CLOCK_MONOTONIC, chosen to overlap the slots of the other containers on
// that GPU as little as possible. The library runs the container's work only
// in its slot (lib/cudahook/src/compute.c, may_start).

// slot is a container's turn on one GPU, in percent of the period.
type slot struct{ start, width int }

// overlap is how many percent points two slots on the circle 0..99 share.
func overlap(a, b slot) int {
	n := 0
	for i := 0; i < a.width; i++ {
		if ((a.start+i)%100-b.start+100)%100 < b.width {
			n++
		}
	}
	return n
}

// pickPhase returns the start of a slot of the given width that overlaps
// the taken ones least: the earliest such among 0 and the ends of the taken
// slots, so that slots pack from 0 without gaps.
func pickPhase(width int, taken []slot) int {
	best, bestOv := 0, -1
	cands := []int{0}
	for _, t := range taken {
		cands = append(cands, (t.start+t.width)%100)
	}
	for _, c := range cands {
		ov := 0
		for _, t := range taken {
			ov += overlap(slot{c, width}, t)
		}
		if bestOv < 0 || ov < bestOv || (ov == bestOv && c < best) {
			best, bestOv = c, ov
		}
	}
	return best
}

// effectivePeriod is the period the library will use for q.
func effectivePeriod(q *Quota) int {
	if q.ComputePeriodMS != nil {
		return *q.ComputePeriodMS
	}
	return config.DefaultComputePeriodMS
}

// assignPhases gives every paced device of q that has no phase yet a slot
// next to those of the containers in stateDir that pace the same GPU with the
// same period. Call it with the state directory locked (lockStateDir). A
// sibling whose state cannot be read is passed over: it is either being
// removed or not ours to judge, and a slot shared by mistake costs only
// accuracy, never a limit.
func assignPhases(stateDir string, q *Quota) {
	period := effectivePeriod(q)
	if period == 0 {
		return
	}
	var want []int
	for i, d := range q.Devices {
		if d.Compute > 0 && d.Compute < 100 && d.Phase == nil {
			want = append(want, i)
		}
	}
	if len(want) == 0 {
		return
	}
	taken := takenSlots(stateDir, period)
	for _, i := range want {
		d := &q.Devices[i]
		ph := pickPhase(d.Compute, taken[d.UUID])
		d.Phase = &ph
	}
}

// takenSlots: the slots of the containers in stateDir paced with period, per GPU UUID.
func takenSlots(stateDir string, period int) map[string][]slot {
	taken := map[string][]slot{}
	entries, _ := os.ReadDir(stateDir)
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, sq, err := ReadState(stateDir, e.Name())
		if err != nil || effectivePeriod(sq) != period || gone(info) {
			continue
		}
		for _, d := range sq.Devices {
			if d.Phase != nil && d.Compute > 0 && d.Compute < 100 {
				taken[d.UUID] = append(taken[d.UUID], slot{*d.Phase, d.Compute})
			}
		}
	}
	return taken
}

// gone: the container's init process, recorded at start, no longer exists
// (killed and never deleted: `vgpu status` shows it stale). A container not
// started yet has no pid and keeps its slot; a reused pid keeps it too.
func gone(info *ContainerInfo) bool {
	return len(info.PIDs) > 0 && info.PIDs[0] > 0 && unix.Kill(info.PIDs[0], 0) == unix.ESRCH
}

// stateLockName is the lock file in the state directory that serializes
// phase assignment with the creation of a container's state.
const stateLockName = ".lock"
