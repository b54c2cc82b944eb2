package tenant

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/vgpu-dev/vgpu/internal/procinfo"
)

// The ledger says who holds what on each GPU, under one liveness rule for
// every host reader (admission, vgpu node's arbitration and borrowing, the
// DRA driver): a tenant holds its devices from its record's creation to its
// removal, started or not (a container from create to delete, a DRA claim
// from prepare to unprepare), unless its recorded init is known to have
// died (Gone). A killed container that was never deleted holds nothing;
// `vgpu status` shows it stale.

// InitPID is the record's init: the pid recorded at start, else the one the
// runtime wrote to the pid file at create (run --detach: no start recorded
// it); 0 when none is known.
func (r *Record) InitPID() int {
	if len(r.PIDs) > 0 {
		return r.PIDs[0]
	}
	if r.PIDFile != "" {
		return procinfo.ReadPIDFile(r.PIDFile)
	}
	return 0
}

// Gone says whether the record's init is known to have exited: its pid no
// longer exists under procRoot ("/proc" unless testing) or, when its start
// time was recorded, names another process. A record with no init known
// (created, not started; a DRA claim) is not gone.
func (r *Record) Gone(procRoot string) bool {
	return gone(r, r.InitPID(), procRoot)
}

func gone(r *Record, pid int, procRoot string) bool {
	if pid <= 0 {
		return false
	}
	if procRoot == "" {
		procRoot = "/proc"
	}
	if r.InitStart != 0 {
		return !procinfo.Same(procRoot, pid, r.InitStart)
	}
	_, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(pid)))
	return errors.Is(err, os.ErrNotExist)
}

// Holding is one device of a live tenant.
type Holding struct {
	Record *Record
	Dev    int // the device's position in Record.Devices
}

// Device is the held device.
func (h Holding) Device() Device { return h.Record.Devices[h.Dev] }

// Ledger is who holds what on each GPU, by GPU UUID.
type Ledger struct {
	on map[string][]Holding
}

// NewLedger is the ledger of records, leaving out those Gone under
// procRoot. Records are taken in the order given (internal/state lists
// them by id), and so are the holdings of each GPU.
func NewLedger(records []*Record, procRoot string) *Ledger {
	l := &Ledger{on: map[string][]Holding{}}
	for _, r := range records {
		if r == nil || r.Gone(procRoot) {
			continue
		}
		for i, d := range r.Devices {
			l.on[d.GPU.UUID] = append(l.on[d.GPU.UUID], Holding{Record: r, Dev: i})
		}
	}
	return l
}

// On is the holdings of GPU uuid.
func (l *Ledger) On(uuid string) []Holding { return l.on[uuid] }

// GPUs is the UUIDs of the GPUs someone holds, sorted.
func (l *Ledger) GPUs() []string {
	out := make([]string, 0, len(l.on))
	for u := range l.on {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// Records is the live records, each once, in the order given to NewLedger.
func (l *Ledger) Records() []*Record {
	seen := map[*Record]bool{}
	var out []*Record
	for _, u := range l.GPUs() {
		for _, h := range l.on[u] {
			if !seen[h.Record] {
				seen[h.Record] = true
				out = append(out, h.Record)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
