package arbiter

import "sync/atomic"

// SetRoomUntil publishes until when (CLOCK_MONOTONIC ns) an allocation of
// the tenant may wait for room, a suspension that frees it running (0: the
// library's own wait).
func (m *Mapped) SetRoomUntil(until uint64) {
	if !m.v1 {
		atomic.StoreUint64(&m.f.RoomUntilNs, until)
	}
}
