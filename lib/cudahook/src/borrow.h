/* Borrowing's decisions (borrow.c), pure like the pacer's: what a device
 * may hold above its memory request while `vgpu node` keeps the share
 * file's memory deadline fresh, how long an owner's refused allocation
 * waits for memory taken back, what cuMemGetInfo calls free. Inputs are
 * numbers (the share file's words, the quota's request and limit, a clock
 * value); no driver calls, no clock reads, no globals. */
#ifndef VGPU_BORROW_H
#define VGPU_BORROW_H
#include <stdint.h>

/* The bytes a device may hold at now: with a request below its limit, the
 * host's ceiling while its deadline (until) holds, never below the request
 * nor above the limit; without a believed deadline the request (no `vgpu
 * node`: no borrowing). No request, or one at the limit: the limit. */
uint64_t vgpu_mem_cap_pick(uint64_t until, uint64_t ceiling, uint64_t request, uint64_t limit, uint64_t now);
/* How long an owner's allocation that the driver refused for want of room
 * waits for `vgpu node` to take memory back (memory_borrow = "free"), and
 * the step between tries. */
#define VGPU_ROOM_WAIT_NS 2000000000ull
#define VGPU_ROOM_STEP_NS 20000000ull
/* The furthest ahead a suspension's room deadline (room_until_ns) is
 * believed: 2 s and the copy of a GPU's whole memory at the slowest rate
 * measured; one further ahead is not the host's. */
#define VGPU_ROOM_MAX_NS 180000000000ull
/* ns to sleep before trying again an allocation the driver refused, started
 * at start: only an owner (held, this allocation included, within its
 * request, which may be its limit) while `vgpu node` keeps the ceilings fresh
 * (until), and only within VGPU_ROOM_WAIT_NS of start, or until room_until
 * when later (a suspension that frees the room runs; a deadline passed or
 * further ahead than VGPU_ROOM_MAX_NS is not believed); 0: fail now. */
uint64_t vgpu_room_wait_pick(uint64_t start, uint64_t now, uint64_t until, uint64_t room_until, uint64_t held,
                             uint64_t request, uint64_t limit);

/* What cuMemGetInfo calls free for a device holding used of what it may hold
 * now (cap), with gpu_free free on the GPU: the room it can take now, and
 * for an owner under its request while `vgpu node` keeps the deadline
 * (until) fresh, at least the rest of its request, which a take-back serves:
 * an allocator sizing itself from free sizes itself to what it is owed. */
uint64_t vgpu_mem_free_pick(uint64_t cap, uint64_t used, uint64_t gpu_free, uint64_t request, uint64_t limit,
                            uint64_t until, uint64_t now);
#endif
