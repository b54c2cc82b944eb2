package arbiter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

// The grant file (contract.Grant*): written by the host only, in the
// directory a container sees read-only (<state_dir>/<id>/host/grant). The
// admission writes it whole (Encode) before the container exists; `vgpu
// node` then updates its live shares in place through a shared mapping
// (Map), with one 8-byte atomic store per share, so that the library, which
// maps it read-only, never reads half of one.

// Word packs a share and its slot's start as the file holds them.
func Word(share, phase int) uint64 {
	ph := uint64(contract.GrantNoPhase)
	if phase >= 0 {
		ph = uint64(phase)
	}
	return uint64(uint32(share)) | ph<<32
}

// Unword is Word's inverse; phase -1 = none.
func Unword(w uint64) (share, phase int) {
	share = int(uint32(w))
	if p := uint32(w >> 32); p != contract.GrantNoPhase {
		return share, int(p)
	}
	return share, -1
}

// Encode is a new grant file: each device's admission share (Word; 0 = the
// device is not paced), no arbitration yet.
func Encode(static []uint64) ([]byte, error) {
	if len(static) > contract.MaxDevices {
		return nil, fmt.Errorf("grant file: %d devices, at most %d", len(static), contract.MaxDevices)
	}
	b := make([]byte, contract.GrantBytes)
	binary.LittleEndian.PutUint64(b[0:], contract.GrantMagic)
	binary.LittleEndian.PutUint32(b[8:], contract.GrantVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(static)))
	for i, w := range static {
		binary.LittleEndian.PutUint64(b[contract.GrantDevOffset+contract.GrantDevSize*i+contract.GrantDevStatic:], w)
	}
	return b, nil
}

// Grants is a grant file as read.
type Grants struct {
	Stamp    uint64 // CLOCK_MONOTONIC ns of the arbitration's last round; 0 = none ever
	PeriodMS int
	Static   []uint64
	Live     []uint64
	MemUntil uint64   // CLOCK_MONOTONIC ns until when Ceiling holds; 0 = never written
	Ceiling  []uint64 // bytes per device: what it may hold, borrowing above its request
}

// Decode reads a grant file's bytes.
func Decode(b []byte) (*Grants, error) {
	if len(b) < contract.GrantBytes || binary.LittleEndian.Uint64(b) != contract.GrantMagic {
		return nil, errors.New("not a vgpu grant file")
	}
	v := binary.LittleEndian.Uint32(b[8:])
	size := devSize(v)
	if size == 0 {
		return nil, fmt.Errorf("grant file version %d, this vgpu knows %d and %d", v, grantV1, contract.GrantVersion)
	}
	n := int(binary.LittleEndian.Uint32(b[12:]))
	if n > contract.MaxDevices {
		return nil, fmt.Errorf("grant file: %d devices", n)
	}
	g := &Grants{Stamp: binary.LittleEndian.Uint64(b[contract.GrantHdrStamp:]), PeriodMS: int(binary.LittleEndian.Uint32(b[contract.GrantHdrPeriod:])),
		MemUntil: binary.LittleEndian.Uint64(b[contract.GrantHdrMemUntil:])}
	for i := 0; i < n; i++ {
		o := contract.GrantDevOffset + size*i
		g.Static = append(g.Static, binary.LittleEndian.Uint64(b[o+contract.GrantDevStatic:]))
		g.Live = append(g.Live, binary.LittleEndian.Uint64(b[o+contract.GrantDevLive:]))
		if v == contract.GrantVersion {
			g.Ceiling = append(g.Ceiling, binary.LittleEndian.Uint64(b[o+contract.GrantDevCeiling:]))
		}
	}
	if v != contract.GrantVersion {
		g.MemUntil = 0 // version 1 has no ceilings: held to the request
	}
	return g, nil
}

// grantV1 is the previous release's grant file: 16 bytes per device, no
// memory ceilings. Its containers keep their compute arbitration; their
// tenants are held to their memory requests.
const grantV1 = 1

// devSize is a device's bytes in a grant file of version v; 0: unknown.
func devSize(v uint32) int {
	switch v {
	case grantV1:
		return 16
	case contract.GrantVersion:
		return contract.GrantDevSize
	}
	return 0
}

// Read reads the grant file at path.
func Read(path string) (*Grants, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Decode(b)
}

// Mapped is a grant file mapped for the arbitration's writes.
type Mapped struct {
	mem  []byte
	n    int
	size int // bytes per device (devSize)
	v2   bool
}

// Map maps the grant file at path for writing. The file must be root's
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
	if !fi.Mode().IsRegular() || fi.Size() != contract.GrantBytes {
		return nil, fmt.Errorf("%s: not a grant file", path)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, contract.GrantBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	g, err := Decode(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	v := binary.LittleEndian.Uint32(mem[8:])
	return &Mapped{mem: mem, n: len(g.Static), size: devSize(v), v2: v == contract.GrantVersion}, nil
}

func (m *Mapped) word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&m.mem[off])) }

// SetLive publishes device dev's share for the next period.
func (m *Mapped) SetLive(dev int, w uint64) {
	if dev >= 0 && dev < m.n {
		atomic.StoreUint64(m.word(contract.GrantDevOffset+m.size*dev+contract.GrantDevLive), w)
	}
}

// SetStatic rewrites device dev's admission word (Word): the share and slot
// it holds while no arbitration runs. Admission narrows a surplus-only
// tenant's with it, under the state lock, so that a later one fits beside.
func (m *Mapped) SetStatic(dev int, w uint64) {
	if dev >= 0 && dev < m.n {
		atomic.StoreUint64(m.word(contract.GrantDevOffset+m.size*dev+contract.GrantDevStatic), w)
	}
}

// Live is device dev's share as last published (0: none).
func (m *Mapped) Live(dev int) uint64 {
	if dev < 0 || dev >= m.n {
		return 0
	}
	return atomic.LoadUint64(m.word(contract.GrantDevOffset + m.size*dev + contract.GrantDevLive))
}

// Stamp marks the shares as the arbitration's of now (CLOCK_MONOTONIC ns):
// the library believes them for contract.GrantStaleMS.
func (m *Mapped) Stamp(now uint64, periodMS int) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&m.mem[contract.GrantHdrPeriod])), uint32(periodMS))
	atomic.StoreUint64(m.word(contract.GrantHdrStamp), now)
}

// SetCeiling publishes how many bytes device dev may hold (its memory
// ceiling, borrowing above its request) until the next StampMemory.
func (m *Mapped) SetCeiling(dev int, bytes uint64) {
	if m.v2 && dev >= 0 && dev < m.n {
		atomic.StoreUint64(m.word(contract.GrantDevOffset+m.size*dev+contract.GrantDevCeiling), bytes)
	}
}

// StampMemory makes the ceilings hold until until (CLOCK_MONOTONIC ns).
func (m *Mapped) StampMemory(until uint64) {
	atomic.StoreUint64(m.word(contract.GrantHdrMemUntil), until)
}

// Close unmaps the file.
func (m *Mapped) Close() error { return unix.Munmap(m.mem) }

// Grant sources, as `vgpu status` names them.
const (
	FromArbitration = "arbitration"
	FromAdmission   = "admission"
)

// Holds is the share device dev holds at now (CLOCK_MONOTONIC ns) by the
// library's rule (vgpu_grant_pick): the arbitration's while its stamp is
// less than contract.GrantStaleMS old, else the admission's. ok false: the
// file has none for the device (not paced).
func (g *Grants) Holds(dev int, now uint64) (share, phase int, source string, ok bool) {
	if g == nil || dev < 0 || dev >= len(g.Static) {
		return 0, 0, "", false
	}
	stale := uint64(contract.GrantStaleMS) * 1e6
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
func (g *Grants) MemoryCap(dev int, request, limit, now uint64) (cp uint64, borrowing bool) {
	if request == 0 || limit == 0 || request >= limit {
		return limit, false
	}
	if g == nil || dev < 0 || dev >= len(g.Ceiling) || !MemFresh(g.MemUntil, now) {
		return request, false
	}
	return min(max(g.Ceiling[dev], request), limit), true
}

// MemFresh: a memory deadline until is believed at now (ahead of it, and
// not further than contract.GrantMemMaxMS: not the host's clock else).
func MemFresh(until, now uint64) bool {
	return until > now && until-now <= uint64(contract.GrantMemMaxMS)*1e6
}
