package state

import (
	"fmt"

	"github.com/vgpu-dev/vgpu/internal/arbiter"
	"github.com/vgpu-dev/vgpu/internal/borrow"
	"github.com/vgpu-dev/vgpu/internal/slots"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// Tx is a transaction of the store: the state directory's lock held, and
// the view of the live tenants read under it.
type Tx struct {
	View View
}

// Transaction runs fn with the state directory's lock held (Lock) and the
// store's view read under it (ReadView): what fn decides from the view
// stays true until it returns.
func Transaction(stateDir string, fn func(*Tx) error) error {
	unlock, err := Lock(stateDir)
	if err != nil {
		return err
	}
	defer unlock()
	return fn(&Tx{View: ReadView(stateDir)})
}

// View is what admission sees of the other tenants: who holds what (the
// ledger, under its liveness rule) and the admission words of their share
// files, by record id (absent where none could be read).
type View struct {
	Ledger *tenant.Ledger
	Static map[string][]uint64
}

// Ledger is who holds what on each GPU among the tenants of stateDir
// (tenant.NewLedger, its liveness rule on this host's /proc). A tenant
// whose record cannot be read is passed over: it is either being created
// or removed, or not ours to judge.
func Ledger(stateDir string) (*tenant.Ledger, error) {
	all, err := List(stateDir)
	var recs []*tenant.Record
	for _, e := range all {
		if e.Err == nil {
			recs = append(recs, e.Info)
		}
	}
	return tenant.NewLedger(recs, ""), err
}

// ReadView reads the view of the tenants of stateDir. A tenant whose
// record cannot be read is passed over: it is either being removed or not
// ours to judge, and a slot shared by mistake costs only accuracy, never a
// limit.
func ReadView(stateDir string) View {
	l, _ := Ledger(stateDir)
	static := map[string][]uint64{}
	for _, r := range l.Records() {
		if g, err := arbiter.Read(tenant.PlacesOf(stateDir, r.ID).ShareFile()); err == nil && g != nil {
			static[r.ID] = g.Static
		}
	}
	return View{Ledger: l, Static: static}
}

// Admission is what admitting a record decided besides the record itself
// (its phases, its request 0): the admission words of its share file, and
// those of others' share files to narrow.
type Admission struct {
	Static []uint64
	Narrow []Narrowing
}

// Admit takes record info onto its GPUs beside the tenants of view, a pure
// step: it refuses a mix of modes or of users on a spatial GPU
// (admitMode), memory requests past a GPU (borrow.Admit) and compute
// requests past 100 on a GPU (arbiter.Admit), each with an error naming
// the GPU and the holders; a device with no compute setting on a GPU where
// others hold requests gets request 0 (surplus only: otherwise no
// guarantee holds beside it), and so does one on a GPU where a priority is
// in play, its own or a live tenant's (otherwise nothing orders it, and a
// high one's work is not seen); every paced device gets the share it holds
// while no arbitration runs (arbiter.Static) and, unless it has a phase
// already, a slot of that width next to the others' (internal/slots).
func Admit(view View, info *tenant.Record) (*Admission, error) {
	if err := admitMode(view.Ledger, info); err != nil {
		return nil, err
	}
	if err := admitMemory(view.Ledger, info); err != nil {
		return nil, err
	}
	return admitCompute(view, info)
}

func admitCompute(view View, info *tenant.Record) (*Admission, error) {
	period := info.PeriodMS()
	adm := &Admission{Static: make([]uint64, len(info.Devices))}
	var narrowed []Narrowing
	for i := range info.Devices {
		d := &info.Devices[i]
		on := computeOn(view, d.GPU.UUID, period)
		var held []arbiter.Held
		explicit := false
		for _, o := range on {
			held = append(held, o.Held)
			explicit = explicit || o.Explicit
		}
		if d.NoComputeSetting() && period > 0 &&
			(explicit || prioritiesOn(view, d.GPU.UUID, d.Priority)) {
			zero := 0
			d.ComputeRequest = &zero
		}
		if err := arbiter.Admit(d.GPU.UUID, d.Request(), d.ComputeRequest != nil, held); err != nil {
			return nil, &AdmissionError{err}
		}
		if !d.Paced() {
			continue
		}
		share := arbiter.Static(d.Request(), held)
		narrowed = append(narrowed, narrowSurplus(on, d.Request())...)
		if d.Phase == nil && period > 0 {
			var taken []slots.Slot
			for _, o := range on {
				if o.slot != nil {
					taken = append(taken, *o.slot)
				}
			}
			ph := slots.Pick(width(share), taken)
			d.Phase = &ph
		}
		ph := -1
		if d.Phase != nil {
			ph = *d.Phase * 100
		}
		adm.Static[i] = arbiter.Word(share, ph)
	}
	adm.Narrow = narrowed
	return adm, nil
}

// admitMode refuses to mix modes on one GPU and users on a spatial one.
// The mode is the GPU's (config spatial.gpus), so a mix means live
// containers from before the config changed; a spatial GPU's MPS control
// daemon runs one server per user, and a second user's clients would wait
// until the first user's are gone.
func admitMode(l *tenant.Ledger, info *tenant.Record) error {
	uid := info.UID
	for _, mine := range info.Devices {
		spatial := mine.Mode.IsSpatial()
		for _, h := range l.On(mine.GPU.UUID) {
			other, d := h.Record, h.Device()
			switch {
			case spatial && !d.Mode.IsSpatial():
				return &AdmissionError{fmt.Errorf("GPU %s is spatial (config spatial.gpus) but container %s runs on it time sliced, created before the GPU was made spatial: stop it first, or take the GPU out of spatial.gpus", d.GPU.UUID, other.ID)}
			case !spatial && d.Mode.IsSpatial():
				return &AdmissionError{fmt.Errorf("GPU %s is time sliced (not in config spatial.gpus) but container %s runs on it spatially (MPS), created while the GPU was spatial: stop it first, or put the GPU back in spatial.gpus", d.GPU.UUID, other.ID)}
			case spatial && uid != nil && other.UID != nil && *uid != *other.UID:
				return &AdmissionError{fmt.Errorf("GPU %s is spatial (MPS) and container %s runs on it as user %d: MPS serves one user per GPU at a time (a second user's processes would wait for the first's to end), and this container runs as user %d; run it as user %d, or on another GPU", d.GPU.UUID, other.ID, *other.UID, *uid, *other.UID)}
			}
		}
	}
	return nil
}

// admitMemory checks that info's explicit memory requests fit in their
// GPUs' memory beside those of the live tenants (borrow.Admit).
func admitMemory(l *tenant.Ledger, info *tenant.Record) error {
	for _, d := range info.Devices {
		if d.MemoryRequest == 0 {
			continue
		}
		var held []borrow.Held
		for _, h := range l.On(d.GPU.UUID) {
			if r := h.Device().MemoryRequest; r > 0 {
				held = append(held, borrow.Held{ID: h.Record.ID, Request: r})
			}
		}
		if err := borrow.Admit(d.GPU.UUID, d.GPU.MemoryBytes, d.MemoryRequest, held); err != nil {
			return &AdmissionError{err}
		}
	}
	return nil
}

// AdmissionError: the container does not fit on a GPU (requests past it, a
// mix of modes).
type AdmissionError struct{ Err error }

func (e *AdmissionError) Error() string { return e.Err.Error() }
func (e *AdmissionError) Unwrap() error { return e.Err }

// narrowSurplus narrows the admission share and slot of the request-0
// tenants in on to what the requests leave once one more of request joins
// them (arbiter.Static). Admitted alone beside the requests, such a tenant
// took all that was left; without `vgpu node` it runs in that slot, so a
// later tenant's slot would overlap it and the shares sum past 100 %. Its
// slot keeps its start and only ends earlier, so it overlaps no one; the
// library reads the word at each period. It does not widen again when the
// newcomer leaves (a restart does). The words are written once the whole
// container is admitted (Narrowing.write).
func narrowSurplus(on []Tenant, request int) []Narrowing {
	var out []Narrowing
	for k := range on {
		t := &on[k]
		if t.Request != 0 || t.slot == nil || !t.hasWords {
			continue
		}
		held := []arbiter.Held{{Request: request}}
		for j, o := range on {
			if j != k {
				held = append(held, o.Held)
			}
		}
		share := arbiter.Static(0, held)
		if width(share) >= t.slot.Width {
			continue
		}
		out = append(out, Narrowing{ID: t.ID, Dev: t.dev, Word: arbiter.Word(share, t.slot.Start*100)})
		t.slot.Width = width(share)
	}
	return out
}

// Narrowing is one admission word of another tenant's share file that
// admission narrows.
type Narrowing struct {
	ID   string // the tenant
	Dev  int    // its device's index
	Word uint64
}

// write rewrites the word. A share file that cannot be mapped is left as
// it is: a slot shared by mistake costs accuracy, never a limit.
func (n Narrowing) write(stateDir string) {
	m, err := arbiter.Map(tenant.PlacesOf(stateDir, n.ID).ShareFile())
	if err != nil {
		return
	}
	m.SetStatic(n.Dev, n.Word)
	m.Close()
}

// width is a slot's width in percent for a share in basis points.
func width(share int) int { return min(max((share+99)/100, 1), 100) }

// Tenant is one device of another tenant on a GPU, as admission sees it.
type Tenant struct {
	arbiter.Held
	slot     *slots.Slot // with the same period only
	hasWords bool        // its share file was read: its words can be narrowed
	dev      int         // its device's index
}

// prioritiesOn says whether a priority other than normal is in play on GPU
// uuid: the new device's own (mine) or a live tenant's there. Such a GPU's
// tenants are ordered (docs/design.md, "The order inside the period"),
// which only a paced device follows and only a measured one shows.
func prioritiesOn(view View, uuid string, mine tenant.Priority) bool {
	if mine != tenant.Normal {
		return true
	}
	for _, h := range view.Ledger.On(uuid) {
		if h.Device().Priority != tenant.Normal {
			return true
		}
	}
	return false
}

// computeOn is, from the ledger, the devices on GPU uuid that hold a
// compute request (paced, or an explicit one), with the slots of those
// paced with period.
func computeOn(view View, uuid string, period int) []Tenant {
	var out []Tenant
	for _, h := range view.Ledger.On(uuid) {
		d, rec := h.Device(), h.Record
		if !d.Paced() && d.ComputeRequest == nil {
			continue
		}
		t := Tenant{Held: arbiter.Held{ID: rec.ID, Request: d.Request(), Explicit: d.ComputeRequest != nil}}
		if d.Phase != nil && d.Paced() && rec.PeriodMS() == period {
			w := d.Compute
			static, ok := view.Static[rec.ID]
			if ok && h.Dev < len(static) && static[h.Dev] != 0 {
				sh, _ := arbiter.Unword(static[h.Dev])
				w = width(sh)
			}
			t.slot = &slots.Slot{Start: *d.Phase, Width: w}
			t.hasWords, t.dev = ok, h.Dev
		}
		out = append(out, t)
	}
	return out
}

// Taken returns the slots of the tenants in stateDir paced with period,
// per GPU UUID.
func Taken(stateDir string, period int) map[string][]slots.Slot {
	view := ReadView(stateDir)
	taken := map[string][]slots.Slot{}
	for _, uuid := range view.Ledger.GPUs() {
		for _, t := range computeOn(view, uuid, period) {
			if t.slot != nil {
				taken[uuid] = append(taken[uuid], *t.slot)
			}
		}
	}
	return taken
}
