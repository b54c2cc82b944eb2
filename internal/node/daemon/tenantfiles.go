package daemon

import (
	"errors"

	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/events"
	"github.com/vgpu-dev/vgpu/internal/regionread"
	"github.com/vgpu-dev/vgpu/internal/state"
	"github.com/vgpu-dev/vgpu/internal/tenant"
	"github.com/vgpu-dev/vgpu/internal/tenantfile"
)

// The tenants' regions are the one thing a round reads that a tenant
// writes. They are read before the round takes the daemon's lock, each
// through internal/tenantfile (beneath the shared directory, no links, a
// regular file of bounded size, a deadline), so a tenant that puts a FIFO
// or a symlink there delays no round and blocks no reader of the lock;
// the round then works from these copies. A region that is not as it must
// be is left out: its tenant is judged on the driver's figures alone (no
// want for the arbitration, no need for borrowing, the driver's usage for
// the library's), and that is reported once.

// regionRead is one tenant's region as read before the round.
type regionRead struct {
	header contract.RegionHeader
	ok     bool               // header read (magic and version are checked by its users)
	region *regionread.Region // the whole region, read for a tenant that may borrow
}

// regionReads are a round's regions, by region file path.
type regionReads map[string]*regionRead

// readRegions reads the region of every entry of the state directory that
// is paced or may borrow; problems are the entries whose region is not as
// it must be, by id. It takes no lock of the daemon.
func readRegions(stateDir string) (regionReads, map[string]string) {
	entries, _ := state.List(stateDir)
	out := regionReads{}
	problems := map[string]string{}
	for _, e := range entries {
		if e.Err != nil {
			continue
		}
		paced, borrows := false, false
		for _, d := range e.Info.Devices {
			paced = paced || d.Paced()
			borrows = borrows || d.MemoryRequest > 0
		}
		if !paced && !borrows {
			continue
		}
		places := tenant.PlacesOf(stateDir, e.ID)
		rdir := places.Shared()
		r := &regionRead{}
		var err error
		if borrows {
			// the whole region carries its header: one read, not two
			if region, rerr := regionread.Read(rdir); rerr == nil {
				r.region, r.header, r.ok = region, region.Header, true
			}
		}
		if !r.ok {
			// the header alone (a region that cannot be read whole: the
			// driver's usage stands in for the library's)
			r.header, err = regionread.ReadHeader(rdir)
			r.ok = err == nil
		}
		if notAsItMustBe(err) {
			problems[e.Info.ID] = err.Error()
		}
		out[places.Region()] = r
	}
	return out, problems
}

// notAsItMustBe: err says the tenant put something other than its region
// in the region's place (a link, a FIFO, a directory, a huge file, a file
// that does not answer); not a missing region or one of another layout.
func notAsItMustBe(err error) bool {
	for _, e := range []error{tenantfile.ErrLink, tenantfile.ErrNotRegular, tenantfile.ErrTooLarge, tenantfile.ErrDeadline} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// reportRegions logs and records, once per entry and problem, the
// regions left out this round (d.mu held).
func (d *Daemon) reportRegions(problems map[string]string) {
	if d.regionErr == nil {
		d.regionErr = map[string]string{}
	}
	for id, msg := range problems {
		if d.regionErr[id] == msg {
			continue
		}
		d.regionErr[id] = msg
		detail := "its shared region is not as vgpu writes it, judged on the driver's figures alone: " + msg
		d.logf("vgpu node: %s: %s", id, detail)
		if err := d.ev.Append(events.Event{Time: d.o.Now().UTC(), Kind: KindRegion, Container: id, Device: -1, Detail: detail}); err != nil {
			d.logf("vgpu node: events file: %v", err)
		}
	}
	for id := range d.regionErr {
		if _, ok := problems[id]; !ok {
			delete(d.regionErr, id)
		}
	}
}

// KindRegion is the event of a region left out (reportRegions).
const KindRegion = "region-ignored"
