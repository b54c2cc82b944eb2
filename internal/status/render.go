package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/vgpu-dev/vgpu/internal/driverlimit"
	"github.com/vgpu-dev/vgpu/internal/events"
)

// WriteJSON writes the report as indented JSON (the --json output).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// printable shows a name that came from a tenant (a pod's, a container's)
// on one line: quoted with Go escapes when it holds a space, a quote or
// anything but printable characters (a control character could rewrite the terminal), "-" when empty.
func printable(s string) string {
	if s == "" {
		return "-"
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == '"' || r == ' ' {
			return strconv.Quote(s)
		}
	}
	return s
}

// mpsText is the line of one spatial GPU's MPS control daemon.
func mpsText(m events.MPS) string {
	s := fmt.Sprintf("spatial GPU %s: MPS control daemon %s", m.GPU, m.State)
	switch {
	case m.State == "running":
		s += fmt.Sprintf(" (pid %d since %s; %d server(s) %v, %d client(s)", m.PID, m.Since.Local().Format("15:04:05"), len(m.Servers), m.Servers, m.Clients)
		if m.Cap > 0 {
			s += fmt.Sprintf(", servers held to %d%% of the SMs", m.Cap)
		}
		s += ")"
	case m.Error != "":
		s += ": " + m.Error
	}
	if m.Restarts > 0 {
		s += fmt.Sprintf("; restarted %d time(s), last exit: %s (its clients lost their server)", m.Restarts, m.LastExit)
	}
	return escapeControls(s)
}

// WriteText writes the report for people.
func (r *Report) WriteText(w io.Writer) error {
	tw := w
	if r.Error != "" {
		fmt.Fprintf(tw, "state directory %s: %s\n", r.StateDir, r.Error)
	}
	writeEnforcement(tw, r.HostEnforcement)
	for _, m := range r.MPS {
		fmt.Fprintln(tw, mpsText(m))
	}
	if len(r.Containers) == 0 && r.Error == "" {
		fmt.Fprintf(tw, "no vgpu containers in %s\n", r.StateDir)
	}
	for i, c := range r.Containers {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		name := c.Name
		if name == "" {
			name = "-"
		}
		init := "-"
		if c.InitPID > 0 {
			init = strconv.Itoa(c.InitPID)
			if !c.InitAlive {
				init += " (gone)"
			}
		}
		fmt.Fprintf(tw, "CONTAINER %s  name %s  %s  init pid %s  %d process(es)\n", r.displayID(c.ID), printable(name), strings.ToUpper(c.State), init, c.HostProcesses)
		if p := c.Pod; p != nil {
			fmt.Fprintf(tw, "  namespace %s  pod %s  container %s\n", printable(p.Namespace), printable(p.Name), printable(p.Container))
		}
		for _, e := range c.Errors {
			fmt.Fprintf(tw, "  error: %s\n", e)
		}
		if len(c.Devices) > 0 {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "  DEVICE\tUUID\tMEMORY USED\tMEMORY LIMIT\tCOMPUTE REQUEST\tCOMPUTE LIMIT\tGRANT\tCOMPUTE SHARE\n")
			for _, d := range c.Devices {
				lim := "none"
				if d.MemoryLimit > 0 {
					lim = Bytes(d.MemoryLimit)
					if by := d.MemoryHeldBy; by != "" {
						// "library + node" only while vgpu node runs: the
						// header says host enforcement is off otherwise.
						if by == driverlimit.ByLibrary && !r.HostEnforcement.On {
							by = "library"
						}
						lim += " (" + by + ")"
					}
				}
				cl := "none"
				if d.Mode == ModeSpatial {
					cl = strconv.Itoa(d.ComputeLimit) + "% (spatial: MPS share)"
				} else if d.ComputeLimit < 100 {
					cl = strconv.Itoa(d.ComputeLimit) + "%"
					if d.ComputePhase != nil {
						cl += fmt.Sprintf(" (slot %d-%d%%)", *d.ComputePhase, *d.ComputePhase+d.ComputeLimit)
					}
				}
				share := withNode("-", d)
				if d.ComputeShare != nil {
					share = withNode(fmt.Sprintf("%.1f%%", *d.ComputeShare*100), d)
				}
				req := "-"
				if d.ComputeRequest < 100 || d.ComputeLimit < 100 {
					req = strconv.Itoa(d.ComputeRequest) + "%"
				}
				if d.Priority != "" {
					req = strings.TrimPrefix(req+", priority "+d.Priority, "-, ")
				}
				grant := "-"
				if d.ComputeGrant != nil {
					grant = fmt.Sprintf("%.1f%% (%s)", *d.ComputeGrant, d.GrantSource)
					if d.GrantSource == "admission" {
						grant = fmt.Sprintf("%.1f%% (held to its request: no arbitration)", *d.ComputeGrant)
					}
					if d.RequestScaled {
						grant += " (requests scaled: the GPU's sum past 100%)"
					}
				}
				if d.UnpacedBesideRequests {
					grant = "UNPACED beside requests"
				}
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Index, r.displayUUID(d.UUID), Bytes(d.MemoryUsed), lim, req, cl, grant, share)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, d := range c.Devices {
				if d.MemoryHeldToRequest {
					fmt.Fprintf(w, "  memory: device %d requests %s of its %s limit and is held to its request (no vgpu node)\n", d.Index, Bytes(d.MemoryRequest), Bytes(d.MemoryLimit))
				} else if d.MemoryCeiling > 0 {
					fmt.Fprintf(w, "  memory: device %d %s\n", d.Index, borrowLine(d))
				}
				for _, p := range d.Suspended {
					fmt.Fprintf(w, "  suspended: device %d %s\n", d.Index, SuspendedText(p, r.Time))
				}
				if d.UnpacedBesideRequests {
					fmt.Fprintf(w, "  warning: device %d (%s) has no compute request or limit: it was created before any request or priority on its GPU, nothing paces it, and the requests and priorities of the GPU's other tenants do not hold beside it; recreate it (it then gets request 0: surplus only) or give it a request; defaults.pace_all in the config paces such tenants from their start\n", d.Index, d.UUID)
				}
			}
		}
		if line := paceHeldLine(c); line != "" {
			fmt.Fprintf(w, "  compute: %s\n", line)
		}
		if len(c.Processes) > 0 {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "  HOST PID\tPID\tNAME\tSLOT\tMEMORY\n")
			for _, p := range c.Processes {
				hp := "?"
				if p.HostPID > 0 {
					hp = strconv.Itoa(p.HostPID)
				}
				var per []string
				for di, m := range p.Memory {
					if di < len(c.Devices) {
						per = append(per, fmt.Sprintf("gpu%d %s", c.Devices[di].Index, Bytes(m)))
					}
				}
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%s\n", hp, p.PID, printable(p.Name), p.Slot, strings.Join(per, ", "))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		for _, e := range c.Enforcement {
			fmt.Fprintf(tw, "  %s\n", eventText(e))
		}
		if c.DeadSlots > 0 {
			fmt.Fprintf(tw, "  %d slot(s) of dead processes, not counted (the library reclaims them within 100 ms of allocation activity, or at the next usage query)\n", c.DeadSlots)
		}
	}
	return nil
}

// paceHeldLine says how much of the measured time the container's own
// pacer held work the GPU could have run ("" when not shown:
// Container.HeldShown): what tells a tenant held to its own share or limit
// from one whose neighbours take the GPU (its share shows both as low).
func paceHeldLine(c Container) string {
	held, ok := c.HeldShown()
	if !ok {
		return ""
	}
	line := fmt.Sprintf("its own pacer held its launches %.0f%% of the time between the readings", held*100)
	if c.PaceWaitMS != nil {
		line += fmt.Sprintf(" (%.1f s in all)", float64(*c.PaceWaitMS)/1000)
	}
	return line + ", with none of its work on the GPU: its share or limit, not a neighbour, held it"
}

// borrowLine says what a device with a memory request below its limit
// holds, may still take now and would lose to an owner: the ceiling is
// what it may hold at most, so below what it holds it may take nothing
// more (it keeps what it holds until an owner needs it).
func borrowLine(d Device) string {
	more := "may take nothing more now"
	if d.MemoryCeiling > d.MemoryUsed {
		more = fmt.Sprintf("may take %s more now", Bytes(d.MemoryCeiling-d.MemoryUsed))
	}
	lose := "nothing above its request, so nothing is taken back from it"
	if b := d.MemoryBorrowed(); b > 0 {
		lose = fmt.Sprintf("%s above its request, which vgpu node takes back (suspending or killing its processes) when an owner needs it", Bytes(b))
	}
	return fmt.Sprintf("holds %s (request %s, limit %s); %s (vgpu node's ceiling %s); %s",
		Bytes(d.MemoryUsed), Bytes(d.MemoryRequest), Bytes(d.MemoryLimit), more, Bytes(d.MemoryCeiling), lose)
}
