package arbiter

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

// The share file (vgpu_share.h; contract.ShareFileLayout, generated from
// it): written by the host only, in the directory a container sees
// read-only (contract.SharePath). The admission writes it whole (Encode)
// before the container exists; `vgpu node` then updates it in place
// through a shared mapping (Map), with one 8-byte atomic store per word,
// so that the library, which maps it read-only, never reads half of one.

// Word packs a share and its slot's start as the file holds them.
func Word(share, phase int) uint64 {
	ph := uint64(contract.ShareNoPhase)
	if phase >= 0 {
		ph = uint64(phase)
	}
	return uint64(uint32(share)) | ph<<32
}

// Unword is Word's inverse; phase -1 = none.
func Unword(w uint64) (share, phase int) {
	share = int(uint32(w))
	if p := uint32(w >> 32); p != contract.ShareNoPhase {
		return share, int(p)
	}
	return share, -1
}

// Encode is a new share file: each device's admission share (Word; 0 = the
// device is not paced), no arbitration yet.
func Encode(admission []uint64) ([]byte, error) { return EncodeOrder(admission, nil) }

// EncodeOrder is Encode with each device's priority word (contract.Priority*,
// tenant.Priority.ShareWord; a device past the list's end is normal).
func EncodeOrder(admission, priority []uint64) ([]byte, error) {
	if len(admission) > contract.ShareDevices || len(priority) > contract.ShareDevices {
		return nil, fmt.Errorf("share file: %d devices, at most %d", max(len(admission), len(priority)), contract.ShareDevices)
	}
	f := contract.ShareFileLayout{Magic: contract.ShareMagic, Version: contract.ShareVersion, Devices: uint32(len(admission))}
	for i, w := range admission {
		f.Dev[i].Admission = w
	}
	for i, p := range priority {
		f.Order[i].Priority = p
	}
	return contract.EncodeShare(&f), nil
}

// Shares is a share file as read.
type Shares struct {
	Stamp    uint64 // CLOCK_MONOTONIC ns of the arbitration's last round; 0 = none ever
	PeriodMS int
	Static   []uint64 // the admission's word per device
	Live     []uint64 // the arbitration's word per device
	MemUntil uint64   // CLOCK_MONOTONIC ns until when Ceiling holds; 0 = never written
	Ceiling  []uint64 // bytes per device: what it may hold, borrowing above its request
}

// Decode reads a share file's bytes.
func Decode(b []byte) (*Shares, error) {
	f, ok := contract.DecodeShare(b)
	if !ok || f.Magic != contract.ShareMagic {
		return nil, errors.New("not a vgpu share file")
	}
	if f.Version != contract.ShareVersion && f.Version != contract.ShareVersionV1 {
		return nil, fmt.Errorf("share file version %d, this vgpu knows %d and %d", f.Version, contract.ShareVersionV1, contract.ShareVersion)
	}
	n := int(f.Devices)
	if n > contract.ShareDevices {
		return nil, fmt.Errorf("share file: %d devices, at most %d", n, contract.ShareDevices)
	}
	g := &Shares{Stamp: f.StampNs, PeriodMS: int(f.PeriodMs)}
	if f.Version == contract.ShareVersionV1 {
		// no ceilings: its tenants are held to their memory requests
		for _, d := range contract.ShareDevsV1(&f)[:n] {
			g.Static = append(g.Static, d.Admission)
			g.Live = append(g.Live, d.Arbitration)
		}
		return g, nil
	}
	g.MemUntil = f.MemUntilNs
	for _, d := range f.Dev[:n] {
		g.Static = append(g.Static, d.Admission)
		g.Live = append(g.Live, d.Arbitration)
		g.Ceiling = append(g.Ceiling, d.Ceiling)
	}
	return g, nil
}

// Read reads the share file at path.
func Read(path string) (*Shares, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Decode(b)
}

// Mapped is a share file mapped for the arbitration's writes.
type Mapped struct {
	mem []byte
	f   *contract.ShareFileLayout // over mem
	n   int
	// v1: a file of the previous layout, whose devices are
	// contract.ShareDevV1 and which has no ceilings
	v1 bool
}

// Map maps the share file at path for writing. The file must be root's
// regular file of the right size and magic (the host created it).
func Map(path string) (*Mapped, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != contract.ShareBytes {
		return nil, fmt.Errorf("%s: not a share file", path)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, contract.ShareBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	g, err := Decode(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m := &Mapped{mem: mem, f: (*contract.ShareFileLayout)(unsafe.Pointer(&mem[0])), n: len(g.Static)}
	m.v1 = m.f.Version == contract.ShareVersionV1
	return m, nil
}

// admission and arbitration are device dev's words in the mapping (dev in
// range).
func (m *Mapped) admission(dev int) *uint64 {
	if m.v1 {
		return &contract.ShareDevsV1(m.f)[dev].Admission
	}
	return &m.f.Dev[dev].Admission
}

func (m *Mapped) arbitration(dev int) *uint64 {
	if m.v1 {
		return &contract.ShareDevsV1(m.f)[dev].Arbitration
	}
	return &m.f.Dev[dev].Arbitration
}

// SetLive publishes device dev's share for the next period.
func (m *Mapped) SetLive(dev int, w uint64) {
	if dev >= 0 && dev < m.n {
		atomic.StoreUint64(m.arbitration(dev), w)
	}
}

// SetStatic rewrites device dev's admission word (Word): the share and slot
// it holds while no arbitration runs. Admission narrows a surplus-only
// tenant's with it, under the state lock, so that a later one fits beside.
func (m *Mapped) SetStatic(dev int, w uint64) {
	if dev >= 0 && dev < m.n {
		atomic.StoreUint64(m.admission(dev), w)
	}
}

// Live is device dev's share as last published (0: none).
func (m *Mapped) Live(dev int) uint64 {
	if dev < 0 || dev >= m.n {
		return 0
	}
	return atomic.LoadUint64(m.arbitration(dev))
}

// Stamp marks the shares as the arbitration's of now (CLOCK_MONOTONIC ns):
// the library believes them for contract.ShareStaleMS.
func (m *Mapped) Stamp(now uint64, periodMS int) {
	atomic.StoreUint32(&m.f.PeriodMs, uint32(periodMS))
	atomic.StoreUint64(&m.f.StampNs, now)
}

// SetCeiling publishes how many bytes device dev may hold (its memory
// ceiling, borrowing above its request) until the next StampMemory.
func (m *Mapped) SetCeiling(dev int, bytes uint64) {
	if !m.v1 && dev >= 0 && dev < m.n {
		atomic.StoreUint64(&m.f.Dev[dev].Ceiling, bytes)
	}
}

// StampMemory makes the ceilings hold until until (CLOCK_MONOTONIC ns).
func (m *Mapped) StampMemory(until uint64) {
	atomic.StoreUint64(&m.f.MemUntilNs, until)
}

// Close unmaps the file.
func (m *Mapped) Close() error { return unix.Munmap(m.mem) }

// Share sources, as `vgpu status` names them.
const (
	FromArbitration = "arbitration"
	FromAdmission   = "admission"
)

// Holds is the share device dev holds at now (CLOCK_MONOTONIC ns) by the
// library's rule (vgpu_share_pick): the arbitration's while its stamp is
// less than contract.ShareStaleMS old, else the admission's. ok false: the
// file has none for the device (not paced).
func (g *Shares) Holds(dev int, now uint64) (share, phase int, source string, ok bool) {
	if g == nil || dev < 0 || dev >= len(g.Static) {
		return 0, 0, "", false
	}
	stale := uint64(contract.ShareStaleMS) * 1e6
	if w := g.Live[dev]; g.Stamp != 0 && uint32(w) != 0 && now+stale >= g.Stamp && now-g.Stamp < stale {
		share, phase = Unword(w)
		return share, phase, FromArbitration, true
	}
	if w := g.Static[dev]; uint32(w) != 0 {
		share, phase = Unword(w)
		return share, phase, FromAdmission, true
	}
	return 0, 0, "", false
}

// MemoryCap is what device dev may hold at now (CLOCK_MONOTONIC ns) by the
// library's rule (vgpu_mem_cap): request 0 or at the limit: the limit;
// else the ceiling while the deadline holds, never below the request nor
// above the limit; without a believed deadline the request. borrowing
// false: the tenant is held to its request because no `vgpu node` wrote a
// deadline that holds now.
func (g *Shares) MemoryCap(dev int, request, limit, now uint64) (cp uint64, borrowing bool) {
	if request == 0 || limit == 0 || request >= limit {
		return limit, false
	}
	if g == nil || dev < 0 || dev >= len(g.Ceiling) || !MemFresh(g.MemUntil, now) {
		return request, false
	}
	return min(max(g.Ceiling[dev], request), limit), true
}

// MemFresh: a memory deadline until is believed at now (ahead of it, and
// not further than contract.ShareMemMaxMS: not the host's clock else).
func MemFresh(until, now uint64) bool {
	return until > now && until-now <= uint64(contract.ShareMemMaxMS)*1e6
}

// Priority is device dev's priority word (contract.Priority*; 0, normal,
// in a file of an earlier release or a version 1 file).
func (m *Mapped) Priority(dev int) uint64 {
	if m.v1 || dev < 0 || dev >= m.n {
		return contract.PriorityNormal
	}
	return atomic.LoadUint64(&m.f.Order[dev].Priority)
}

// SetPriority writes device dev's priority word (the admission's, from the
// tenant's record).
func (m *Mapped) SetPriority(dev int, w uint64) {
	if !m.v1 && dev >= 0 && dev < m.n {
		atomic.StoreUint64(&m.f.Order[dev].Priority, w)
	}
}

// Order is device dev's order as last published.
func (m *Mapped) Order(dev int) Order {
	if m.v1 || dev < 0 || dev >= m.n {
		return Order{}
	}
	o := &m.f.Order[dev]
	return Order{YieldUntil: atomic.LoadUint64(&o.YieldUntilNs), BoundUntil: atomic.LoadUint64(&o.BoundUntilNs), BoundNs: atomic.LoadUint64(&o.BoundNs),
		FreeUntil: atomic.LoadUint64(&m.f.FreeUntilNs[dev])}
}

// SetOrder publishes device dev's order (Ordering): the bound before its
// deadline and before a free run, so that a reader that sees either sees
// the bound that goes with it.
func (m *Mapped) SetOrder(dev int, o Order) {
	if m.v1 || dev < 0 || dev >= m.n {
		return
	}
	w := &m.f.Order[dev]
	atomic.StoreUint64(&w.BoundNs, o.BoundNs)
	atomic.StoreUint64(&w.BoundUntilNs, o.BoundUntil)
	atomic.StoreUint64(&w.YieldUntilNs, o.YieldUntil)
	atomic.StoreUint64(&m.f.FreeUntilNs[dev], o.FreeUntil)
}
