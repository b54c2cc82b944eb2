// Package top is `vgpu top` (docs/status.md): a live view of who uses each
// GPU, from the same records as `vgpu status` (internal/status): one block
// per GPU with its memory and busy time as bars, a row per container, and
// the latest enforcement events of vgpu node. Frame renders one view of a
// status report; Model (model.go) refreshes it every second in a terminal.
package top

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"charm.land/lipgloss/v2"

	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/status"
)

// SortKey orders a GPU block's rows.
type SortKey int

const (
	ByMemory  SortKey = iota // most memory first
	ByCompute                // largest compute share first
	ByName                   // name (else id) ascending
	sortKeys
)

func (k SortKey) String() string {
	return [...]string{"memory", "compute", "name"}[k]
}

// View says how to draw a frame.
type View struct {
	Sort SortKey
	// GPU: show only this GPU (UUID); "" all.
	GPU string
	// Styled: colours and bold (escape codes); false: plain text.
	Styled bool
	// Keys: end with the keys' help line (the live view).
	Keys bool
	// Loc: the time zone of the times shown (nil: local).
	Loc *time.Location
	// Events: how many of the latest enforcement events to show.
	Events int
}

// DefaultEvents is how many enforcement events a frame shows.
const DefaultEvents = 8

const (
	barWidth  = 20
	cellBar   = 10
	nameWidth = 24
)

// gpuBlock is one GPU with the containers that have it.
type gpuBlock struct {
	uuid string
	info *events.GPU // nil: no vgpu node reports it
	rows []row
}

type row struct {
	c     *status.Container
	d     *status.Device
	procs int
	share float64 // percent; -1 unknown
}

// GPUs lists the GPUs of a report in the order a frame shows them: those
// vgpu node reports by host index, then the others containers name, by
// UUID.
func GPUs(r *status.Report) []string {
	var out []string
	seen := map[string]bool{}
	gs := append([]events.GPU(nil), r.GPUs...)
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].Index < gs[j].Index })
	for _, g := range gs {
		if !seen[g.UUID] {
			seen[g.UUID] = true
			out = append(out, g.UUID)
		}
	}
	var rest []string
	for _, c := range r.Containers {
		for _, d := range c.Devices {
			if d.UUID != "" && !seen[d.UUID] {
				seen[d.UUID] = true
				rest = append(rest, d.UUID)
			}
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

func blocks(r *status.Report, v View) []gpuBlock {
	info := map[string]*events.GPU{}
	for i := range r.GPUs {
		info[r.GPUs[i].UUID] = &r.GPUs[i]
	}
	var out []gpuBlock
	for _, u := range GPUs(r) {
		if v.GPU != "" && u != v.GPU {
			continue
		}
		b := gpuBlock{uuid: u, info: info[u]}
		for ci := range r.Containers {
			c := &r.Containers[ci]
			for di := range c.Devices {
				d := &c.Devices[di]
				if d.UUID != u {
					continue
				}
				rw := row{c: c, d: d, share: -1}
				for _, p := range c.Processes {
					if di < len(p.Memory) && p.Memory[di] > 0 {
						rw.procs++
					}
				}
				switch {
				case d.NodeShare != nil:
					rw.share = *d.NodeShare
				case d.ComputeShare != nil:
					rw.share = *d.ComputeShare * 100
				}
				b.rows = append(b.rows, rw)
			}
		}
		sortRows(b.rows, v.Sort)
		out = append(out, b)
	}
	return out
}

func name(c *status.Container) string {
	if c.Name != "" {
		return c.Name
	}
	return c.ID
}

func sortRows(rs []row, k SortKey) {
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		switch k {
		case ByMemory:
			if a.d.MemoryUsed != b.d.MemoryUsed {
				return a.d.MemoryUsed > b.d.MemoryUsed
			}
		case ByCompute:
			if a.share != b.share {
				return a.share > b.share
			}
		}
		return name(a.c) < name(b.c)
	})
}

// styles: identity when plain.
type styles struct {
	on                              bool
	title, head, ok, warn, bad, dim lipgloss.Style
}

func newStyles(on bool) styles {
	return styles{on: on,
		title: lipgloss.NewStyle().Bold(true),
		head:  lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12")),
		ok:    lipgloss.NewStyle().Foreground(lipgloss.Color("10")),
		warn:  lipgloss.NewStyle().Foreground(lipgloss.Color("11")),
		bad:   lipgloss.NewStyle().Foreground(lipgloss.Color("9")).Bold(true),
		dim:   lipgloss.NewStyle().Foreground(lipgloss.Color("8")),
	}
}

func (s styles) r(st lipgloss.Style, text string) string {
	if !s.on || text == "" {
		return text
	}
	return st.Render(text)
}

// bar draws frac (0..1, more is clipped) in width cells, coloured by how
// full it is.
func (s styles) bar(frac float64, width int) string {
	if math.IsNaN(frac) || frac < 0 {
		frac = 0
	}
	over := frac > 1
	if over {
		frac = 1
	}
	n := int(math.Round(frac * float64(width)))
	b := strings.Repeat("█", n) + strings.Repeat("░", width-n)
	st := s.ok
	switch {
	case over:
		st = s.bad
	case frac >= 0.9:
		st = s.warn
	}
	return "[" + s.r(st, b) + "]"
}

// Frame renders one view of r.
func Frame(r *status.Report, v View) string {
	loc := v.Loc
	if loc == nil {
		loc = time.Local
	}
	st := newStyles(v.Styled)
	var w strings.Builder
	fmt.Fprintf(&w, "%s  %s  %s\n", st.r(st.title, "vgpu top"), r.StateDir, r.Time.In(loc).Format("15:04:05"))
	h := r.HostEnforcement
	switch {
	case h.On:
		fmt.Fprintf(&w, "host enforcement: on (vgpu node pid %d, every %s)\n", h.PID, h.Interval)
		if h.Error != "" {
			fmt.Fprintf(&w, "  %s\n", st.r(st.bad, "last round failed: "+h.Error))
		}
	default:
		fmt.Fprintf(&w, "host enforcement: %s (vgpu node is not running): in-process limits only\n", st.r(st.warn, "off"))
	}
	if r.Error != "" {
		fmt.Fprintf(&w, "%s\n", st.r(st.bad, "state directory: "+r.Error))
	}
	filter := "all"
	if v.GPU != "" {
		filter = v.GPU
	}
	fmt.Fprintf(&w, "sort: %s  GPU: %s\n", v.Sort, filter)
	bs := blocks(r, v)
	if len(bs) == 0 {
		fmt.Fprintf(&w, "\nno vgpu containers on a GPU in %s\n", r.StateDir)
	}
	for _, b := range bs {
		w.WriteString("\n")
		writeBlock(&w, st, b, loc)
	}
	writeEvents(&w, st, r, v, loc)
	if v.Keys {
		fmt.Fprintf(&w, "\n%s\n", st.r(st.dim, "s: sort (memory, compute, name)   g: next GPU   a: all GPUs   q: quit"))
	}
	return w.String()
}

func writeBlock(w *strings.Builder, st styles, b gpuBlock, loc *time.Location) {
	var used uint64
	var busy float64
	known := true
	for _, rw := range b.rows {
		used += rw.d.MemoryUsed
		if rw.share < 0 {
			known = false
		} else {
			busy += rw.share
		}
	}
	if g := b.info; g != nil {
		title := fmt.Sprintf("GPU %d", g.Index)
		if g.Name != "" {
			title += "  " + g.Name
		}
		fmt.Fprintf(w, "%s  %s\n", st.r(st.title, title), b.uuid)
		if g.MemoryTotal > 0 {
			fmt.Fprintf(w, "  memory %s %s / %s (vgpu containers %s)\n", st.bar(float64(g.MemoryUsed)/float64(g.MemoryTotal), barWidth),
				status.Bytes(g.MemoryUsed), status.Bytes(g.MemoryTotal), status.Bytes(used))
		}
		if g.Busy >= 0 {
			fmt.Fprintf(w, "  busy   %s %d%%\n", st.bar(float64(g.Busy)/100, barWidth), g.Busy)
		}
	} else {
		fmt.Fprintf(w, "%s  %s\n", st.r(st.title, "GPU"), b.uuid)
		fmt.Fprintf(w, "  memory %s used by vgpu containers (GPU total: needs vgpu node)\n", status.Bytes(used))
		if known && len(b.rows) > 0 {
			fmt.Fprintf(w, "  busy   %s %.0f%% by vgpu containers\n", st.bar(busy/100, barWidth), busy)
		}
	}
	head := []string{"CONTAINER", "POD", "MEMORY USED/LIMIT", "COMPUTE SHARE/LIMIT", "REQUEST/GRANT", "THROTTLE", "PROCS"}
	cells := [][]string{head}
	style := [][]*lipgloss.Style{} // nil: as is
	for _, rw := range b.rows {
		c, d := rw.c, rw.d
		pod := "-"
		if p := c.Pod; p != nil {
			pod = clip(status.Printable(p.Namespace)+"/"+status.Printable(p.Name)+"/"+status.Printable(p.Container), 40)
		}
		mem := status.Bytes(d.MemoryUsed)
		memBar := strings.Repeat(" ", cellBar+2)
		if d.MemoryLimit > 0 {
			mem += " / " + status.Bytes(d.MemoryLimit)
			memBar = st.bar(float64(d.MemoryUsed)/float64(d.MemoryLimit), cellBar)
		}
		if len(d.Suspended) > 0 {
			// the host memory its suspended processes hold, since the first
			var host uint64
			since := d.Suspended[0].Since
			for _, p := range d.Suspended {
				host += p.Bytes
				if p.Since.Before(since) {
					since = p.Since
				}
			}
			mem += fmt.Sprintf(" (+%s suspended since %s)", status.Bytes(host), since.In(loc).Format("15:04:05"))
		}
		comp := "-"
		if rw.share >= 0 {
			comp = fmt.Sprintf("%.0f%%", rw.share)
		}
		if d.ComputeLimit < 100 {
			comp += fmt.Sprintf(" / %d%%", d.ComputeLimit)
		} else {
			comp += " / none"
		}
		// the compute request (guaranteed under contention) and what the
		// node's arbitration grants now
		rg := "-"
		// As vgpu status: a request 0 (surplus only, the host's for a
		// container with no compute setting beside requests) is shown.
		if d.ComputeRequest < 100 || d.ComputeLimit < 100 {
			rg = fmt.Sprintf("%d%% / ", d.ComputeRequest)
			if d.ComputeGrant != nil {
				rg += fmt.Sprintf("%.0f%%", *d.ComputeGrant)
			} else {
				rg += "-"
			}
		}
		if d.Priority != "" {
			rg = strings.TrimPrefix(rg+" "+d.Priority, "- ")
		}
		if d.UnpacedBesideRequests {
			// as vgpu status warns: nothing paces it, so its neighbours'
			// requests and priorities do not hold beside it
			rg = "UNPACED"
		}
		thr := throttle(c, d)
		cells = append(cells, []string{clip(status.Printable(name(c)), nameWidth), pod, memBar + " " + mem, comp, rg, thr, fmt.Sprint(rw.procs)})
		var cs, rs, ts *lipgloss.Style
		if rw.share >= 0 && d.ComputeLimit < 100 && rw.share > float64(d.ComputeLimit) {
			cs = &st.warn
		}
		if d.UnpacedBesideRequests {
			rs = &st.bad
		}
		if d.ThrottleDuty != nil && *d.ThrottleDuty > 0 {
			ts = &st.bad
		}
		style = append(style, []*lipgloss.Style{nil, nil, nil, cs, rs, ts, nil})
	}
	if len(b.rows) == 0 {
		w.WriteString("  no vgpu container on this GPU\n")
		return
	}
	width := make([]int, len(head))
	for _, r := range cells {
		for i, c := range r {
			width[i] = max(width[i], lipgloss.Width(c))
		}
	}
	for ri, r := range cells {
		var line strings.Builder
		line.WriteString("  ")
		for i, c := range r {
			padded := c
			if i < len(r)-1 {
				padded += strings.Repeat(" ", width[i]-lipgloss.Width(c)+2)
			}
			switch {
			case ri == 0:
				padded = st.r(st.head, padded)
			case st.on && style[ri-1][i] != nil:
				padded = style[ri-1][i].Render(padded)
			}
			line.WriteString(padded)
		}
		w.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

func writeEvents(w *strings.Builder, st styles, r *status.Report, v View, loc *time.Location) {
	n := v.Events
	if n <= 0 {
		n = DefaultEvents
	}
	type ev struct {
		e events.Event
		c *status.Container
	}
	var all []ev
	for ci := range r.Containers {
		c := &r.Containers[ci]
		for _, e := range c.Enforcement {
			if v.GPU != "" && e.GPU != v.GPU {
				continue
			}
			all = append(all, ev{e, c})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].e.Time.Before(all[j].e.Time) })
	if len(all) > n {
		all = all[len(all)-n:]
	}
	w.WriteString("\n" + st.r(st.head, "ENFORCEMENT") + "\n")
	if len(all) == 0 {
		w.WriteString("  none\n")
		return
	}
	nw := 0
	for _, x := range all {
		nw = max(nw, lipgloss.Width(clip(status.Printable(name(x.c)), nameWidth)))
	}
	for _, x := range all {
		text := status.EventText(x.e)
		// EventText ends with the time in the local zone: shown first here
		text = strings.TrimSuffix(text, " at "+x.e.Time.Local().Format("15:04:05"))
		n := clip(status.Printable(name(x.c)), nameWidth)
		line := fmt.Sprintf("  %s  %s%s  %s", x.e.Time.In(loc).Format("15:04:05"), n, strings.Repeat(" ", nw-lipgloss.Width(n)), text)
		if strings.HasPrefix(x.e.Kind, "kill") || x.e.Kind == "escalate" || x.e.Error != "" {
			line = st.r(st.bad, line)
		}
		w.WriteString(line + "\n")
	}
}

// throttle is the THROTTLE cell: the share of the time vgpu node froze the
// container and the share its own pacer held its launches (per container:
// the pacer's count is), each shown when measured; "-" neither measured.
func throttle(c *status.Container, d *status.Device) string {
	var parts []string
	if d.ThrottleDuty != nil && *d.ThrottleDuty > 0 {
		parts = append(parts, fmt.Sprintf("frozen %.0f%%", *d.ThrottleDuty*100))
	}
	if held, ok := c.HeldShown(); ok {
		parts = append(parts, fmt.Sprintf("held %.0f%%", held*100))
	}
	switch {
	case len(parts) > 0:
		return strings.Join(parts, ", ")
	case d.ThrottleDuty != nil || c.PaceHeld != nil:
		return "none"
	}
	return "-"
}

// clip cuts s to n cells, marking the cut.
func clip(s string, n int) string {
	if lipgloss.Width(s) <= n {
		return s
	}
	rs := []rune(s)
	for len(rs) > 0 && lipgloss.Width(string(rs))+1 > n {
		rs = rs[:len(rs)-1]
	}
	return string(rs) + "…"
}
