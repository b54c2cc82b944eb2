package status

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/vgpu-dev/vgpu/internal/events"
)

// collectNodeFigures adds what only a running vgpu node measures, from its
// heartbeat: each limited device's compute share as its policy judges it
// and the throttle's duty, and the GPUs' totals. A stale heartbeat adds
// nothing (figures of a daemon that stopped are not current).
func collectNodeFigures(r *Report) {
	hb, err := events.ReadHeartbeat(r.StateDir)
	if err != nil || hb == nil || !hb.On(r.Time) {
		return // an unreadable heartbeat is collectEnforcement's error
	}
	r.GPUs = hb.GPUs
	r.MPS = hb.MPS
	type key struct{ c, gpu string }
	shares := make(map[key]events.Share, len(hb.Shares))
	for _, s := range hb.Shares {
		shares[key{s.Container, s.GPU}] = s
	}
	for ci := range r.Containers {
		c := &r.Containers[ci]
		for di := range c.Devices {
			d := &c.Devices[di]
			if s, ok := shares[key{c.ID, d.UUID}]; ok {
				pct, duty := s.Percent, s.Duty
				d.NodeShare, d.ThrottleDuty = &pct, &duty
			}
		}
	}
}

// EventText is the line vgpu status shows for an enforcement event.
func EventText(e events.Event) string { return eventText(e) }

// Printable shows a name that came from a tenant on one line, as vgpu
// status does.
func Printable(s string) string { return printable(s) }

// withNode adds the node's share and duty to the share column of vgpu
// status ("-": none measured here).
func withNode(share string, d Device) string {
	if d.NodeShare == nil {
		return share
	}
	share = strings.TrimPrefix(share+", ", "-, ") + fmt.Sprintf("node %.0f%%", *d.NodeShare)
	if d.ThrottleDuty != nil && *d.ThrottleDuty > 0 {
		share += fmt.Sprintf(" (frozen %.0f%% of the time)", *d.ThrottleDuty*100)
	}
	return share
}

// escapeControls writes each character that is not printable (a control
// character could rewrite the terminal) as its Go escape; an event's
// detail can carry what a tenant named.
func escapeControls(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsPrint(r) || r == ' ' {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}
