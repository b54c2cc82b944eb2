package status

import (
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/events"
)

// HostEnforcement is whether `vgpu node` holds this host's containers to
// their limits (docs/node.md), from its heartbeat in the state directory.
type HostEnforcement struct {
	On        bool      `json:"on"`
	PID       int       `json:"pid,omitempty"`
	Since     time.Time `json:"since,omitempty"`
	LastBeat  time.Time `json:"lastBeat,omitempty"`
	Interval  string    `json:"interval,omitempty"`
	Grace     string    `json:"grace,omitempty"`
	Tolerance string    `json:"tolerance,omitempty"`
	Error     string    `json:"error,omitempty"` // the daemon's last round failed, or its files could not be read
	// StateDirFull: the state directory has no space or inodes left, so a
	// running vgpu node cannot write its heartbeat: whether enforcement is
	// on is not known from it (the state directory's path).
	StateDirFull string `json:"stateDirFull,omitempty"`
}

// statfs stands in for statfs(2) in tests.
var statfs = unix.Statfs

// dirFull tells whether dir's filesystem has no block or no inode left
// (for root: the daemon writes as root).
func dirFull(dir string) bool {
	var st unix.Statfs_t
	if statfs(dir, &st) != nil {
		return false
	}
	return st.Bfree == 0 || (st.Files > 0 && st.Ffree == 0)
}

// maxEvents is how many of a container's latest enforcement events are shown.
const maxEvents = 5

// collectEnforcement fills r.HostEnforcement and each container's events.
func collectEnforcement(r *Report) {
	hb, err := events.ReadHeartbeat(r.StateDir)
	if err != nil {
		r.HostEnforcement.Error = err.Error()
	}
	if hb != nil {
		r.HostEnforcement = HostEnforcement{On: hb.On(r.Time), PID: hb.PID, Since: hb.Started, LastBeat: hb.Beat,
			Interval: hb.Interval, Grace: hb.Grace, Tolerance: hb.Tolerance, Error: hb.Error}
	}
	if !r.HostEnforcement.On && dirFull(r.StateDir) {
		r.HostEnforcement.StateDirFull = r.StateDir
	}
	evs, err := events.Read(r.StateDir)
	if err != nil {
		r.HostEnforcement.Error = err.Error()
		return
	}
	idx := map[string]int{}
	for i := range r.Containers {
		idx[r.Containers[i].ID] = i
	}
	for _, e := range evs {
		i, ok := idx[e.Container]
		// a container id can be reused: only events since its creation
		if !ok || e.Time.Before(r.Containers[i].Created) {
			continue
		}
		c := &r.Containers[i]
		c.Enforcement = append(c.Enforcement, e)
		if len(c.Enforcement) > maxEvents {
			c.Enforcement = c.Enforcement[1:]
		}
	}
}

// collectSuspended gives each device the processes vgpu node holds
// suspended (events.SuspendedFile).
func collectSuspended(r *Report) {
	sus, err := events.ReadSuspended(r.StateDir)
	if err != nil {
		r.HostEnforcement.Error = strings.TrimPrefix(r.HostEnforcement.Error+"; ", "; ") + err.Error()
		return
	}
	for _, p := range sus {
		for i := range r.Containers {
			c := &r.Containers[i]
			if c.ID != p.Container {
				continue
			}
			for j := range c.Devices {
				if c.Devices[j].UUID == p.GPU {
					c.Devices[j].Suspended = append(c.Devices[j].Suspended, p)
				}
			}
		}
	}
}

// SuspendedText says what a suspended process holds and since when.
func SuspendedText(p events.Suspended, now time.Time) string {
	if p.Suspending {
		return fmt.Sprintf("pid %d: being suspended to host memory (%s)", p.PID, Bytes(p.Bytes))
	}
	return fmt.Sprintf("pid %d: suspended since %s (%s), %s held in host memory; restored when it fits on the GPU again",
		p.PID, p.Since.Local().Format("15:04:05"), now.Sub(p.Since).Round(time.Second), Bytes(p.Bytes))
}

// collectPods names each container's Kubernetes pod from vgpu node's
// pods.json (internal/node/podres).
func collectPods(r *Report) {
	pods, err := events.ReadPods(r.StateDir)
	if err != nil {
		r.HostEnforcement.Error = strings.TrimPrefix(r.HostEnforcement.Error+"; ", "; ") + err.Error()
		return
	}
	for i := range r.Containers {
		if p, ok := pods[r.Containers[i].ID]; ok {
			r.Containers[i].Pod = &p
		}
	}
}

func writeEnforcement(w io.Writer, h HostEnforcement) {
	switch {
	case !h.On && h.StateDirFull != "":
		fmt.Fprintf(w, "host enforcement: not known: state_dir %s is full (no space or inodes left), so vgpu node cannot write its heartbeat there; free space in it\n", h.StateDirFull)
		if !h.LastBeat.IsZero() {
			fmt.Fprintf(w, "  vgpu node's last heartbeat %s (pid %d)\n", h.LastBeat.Local().Format("15:04:05"), h.PID)
		}
	case h.On:
		fmt.Fprintf(w, "host enforcement: on (vgpu node pid %d since %s; every %s, memory grace %s, tolerance %s)\n",
			h.PID, h.Since.Local().Format("15:04:05"), h.Interval, h.Grace, h.Tolerance)
		if h.Error != "" {
			fmt.Fprintf(w, "  last round failed: %s\n", h.Error)
		}
	case !h.LastBeat.IsZero():
		fmt.Fprintf(w, "host enforcement: off (vgpu node's last heartbeat %s): containers keep their in-process limits only\n", h.LastBeat.Local().Format("15:04:05"))
	default:
		fmt.Fprintf(w, "host enforcement: off (vgpu node is not running): containers keep their in-process limits only\n")
		if h.Error != "" {
			fmt.Fprintf(w, "  %s\n", h.Error)
		}
	}
}

// eventText is one line about what the daemon did to a container.
func eventText(e events.Event) string {
	at := e.Time.Local().Format("15:04:05")
	var s string
	switch {
	case e.Kind == "kill" && e.Reason == "borrow":
		s = fmt.Sprintf("killed pid %d to take borrowed memory back on GPU %d at %s: %s", e.PID, e.Device, at, e.Detail)
	case e.Kind == "suspend":
		s = fmt.Sprintf("suspended pid %d (%s of GPU %d) to host memory at %s: %s", e.PID, Bytes(e.Used), e.Device, at, e.Detail)
	case e.Kind == "restore":
		s = fmt.Sprintf("restored pid %d (%s) to GPU %d at %s: %s", e.PID, Bytes(e.Used), e.Device, at, e.Detail)
	case e.Kind == "kill" && e.Reason == "memory":
		s = fmt.Sprintf("killed pid %d: %s on GPU %d > limit %s at %s", e.PID, Bytes(e.Used), e.Device, Bytes(e.Limit), at)
	case e.Kind == "kill":
		s = fmt.Sprintf("killed pid %d: compute share %d%% on GPU %d > limit %d%% at %s", e.PID, e.Used, e.Device, e.Limit, at)
	case e.Kind == "freeze":
		s = fmt.Sprintf("throttled (cgroup freezer): compute share %d%% on GPU %d > limit %d%% at %s", e.Used, e.Device, e.Limit, at)
	case e.Kind == "thaw":
		s = fmt.Sprintf("thawed at %s (%s)", at, e.Detail)
	case e.Kind == "kill-container":
		s = fmt.Sprintf("killed the whole container (every process of its cgroup) at %s: %s", at, e.Detail)
	case e.Kind == "escalate":
		s = fmt.Sprintf("freezing could not hold compute share %d%% on GPU %d (limit %d%%) at %s: %s", e.Used, e.Device, e.Limit, at, e.Detail)
	default:
		s = fmt.Sprintf("%s at %s: %s", e.Kind, at, e.Detail)
	}
	if e.Priority != "" {
		s += " (priority " + e.Priority + ")"
	}
	if e.Error != "" {
		s += " (failed: " + e.Error + ")"
	}
	return escapeControls(s)
}
