/* The accounting core of device memory (account.c): every allocation route
 * follows one protocol, with no lock held across the driver call.
 *
 *   qi = vgpu_quota_index(dev) or vgpu_current_qi(&qi)   which limit applies
 *   vgpu_mem_reserve(qi, size)     before the driver: OUT_OF_MEMORY when the
 *                                  container would pass its limit
 *   driver call
 *   success: vgpu_mem_commit(kind, key, qi, size, aux)   record key -> bytes
 *   failure: vgpu_mem_unreserve(qi, size)                give the bytes back
 *
 * A free takes the record out first (vgpu_mem_take: an allocation that gets
 * the same address back meanwhile cannot collide with it), calls the driver,
 * then vgpu_mem_settle gives the bytes back or, if the driver refused, puts
 * the record back. vgpu_mem_forget is take + release in one, for memory that
 * is gone already. A free of a key we never saw goes to the driver untouched.
 * Other engineers' routes code against these names: keep them. */
#ifndef VGPU_ACCOUNT_H
#define VGPU_ACCOUNT_H
#include <stdint.h>
#include "cuda_abi.h"
#include "ptrtab.h"

/* devmap.c: container device index of CUDA device d (by UUID), -1 if none */
int vgpu_quota_index(CUdevice d);

/* quota index of the current context's device; INVALID_DEVICE when the
 * container has no such device (fail closed), else the driver's error */
CUresult vgpu_current_qi(int *qi);
/* memory limit of qi (UINT64_MAX when none) */
uint64_t vgpu_limit_of(int qi);
/* what qi may hold now (vgpu_mem_cap_pick): the limit, or with a request
 * below it the host's ceiling while `vgpu node` keeps it fresh, else the
 * request (qi valid) */
uint64_t vgpu_mem_cap(int qi);
/* CUDA_ERROR_OUT_OF_MEMORY when qi would pass its limit; else the bytes are
 * the container's until committed or unreserved. A refusal first asks every
 * registered resync (memory pools trim freed memory only at synchronisation)
 * and tries once more. */
CUresult vgpu_mem_reserve(int qi, uint64_t size);
/* after the driver refused an allocation of size for want of room: an owner
 * (within its request) while `vgpu node` runs marks what it needs in the
 * region, sleeps a step and returns 1 (try the driver again); else, or 2 s
 * after the first refusal (*start, 0 before it), clears the mark and returns
 * 0. vgpu_mem_room_end clears the mark after a retry that succeeded. */
int vgpu_mem_wait_room(int qi, uint64_t size, uint64_t *start);
void vgpu_mem_room_end(int qi, uint64_t size, uint64_t start);
/* the driver call, retried while vgpu_mem_wait_room waits for room */
#define VGPU_ROOM_RETRY(r, qi, size, call)                                                                             \
    do {                                                                                                               \
        uint64_t room_ = 0;                                                                                            \
        while (((r) = (call)) == CUDA_ERROR_OUT_OF_MEMORY && vgpu_mem_wait_room((qi), (size), &room_)) {               \
        }                                                                                                              \
        if ((r) == CUDA_SUCCESS)                                                                                       \
            vgpu_mem_room_end((qi), (size), room_);                                                                    \
    } while (0)
/* records key after the driver call succeeded (size already reserved) */
void vgpu_mem_commit(int kind, uint64_t key, int qi, uint64_t size, uint64_t aux);
/* gives back a reservation whose call failed (or that was only a check) */
void vgpu_mem_unreserve(int qi, uint64_t size);
/* takes the record of key and releases its bytes; 0 if it existed */
int vgpu_mem_forget(int kind, uint64_t key);
/* moves qi's count of memory the driver already holds (a pool's reserved
 * memory) from old to now bytes, regardless of the limit */
void vgpu_mem_recount(int qi, uint64_t old, uint64_t now);
/* the free protocol: take before the driver's free (0 if key was ours), then
 * settle with the driver's result */
int vgpu_mem_take(int kind, uint64_t key, struct vgpu_rec *rec);
void vgpu_mem_settle(int kind, uint64_t key, const struct vgpu_rec *rec, CUresult r);

/* Memory that a refused reservation may find unused in a pool: routes that
 * count a pool's reserved memory register a function bringing their counts up
 * to date (at most 4; registered once, from a constructor). Keeps account.c
 * below the routes, with no call back up by name. */
void vgpu_mem_on_refusal(void (*resync)(void));

/* Frees key with call (a CUresult expression), following the free protocol. */
#define VGPU_RELEASE_WITH(kind, key, call)                                                                             \
    do {                                                                                                               \
        struct vgpu_rec rec_;                                                                                          \
        int had_ = vgpu_mem_take((kind), (uint64_t)(uintptr_t)(key), &rec_) == 0;                                      \
        CUresult r_ = (call);                                                                                          \
        if (had_)                                                                                                      \
            vgpu_mem_settle((kind), (uint64_t)(uintptr_t)(key), &rec_, r_);                                            \
        return r_;                                                                                                     \
    } while (0)

/* saturating sizes */
static inline uint64_t vgpu_mul_sat(uint64_t a, uint64_t b) { return (a && b > UINT64_MAX / a) ? UINT64_MAX : a * b; }
static inline uint64_t vgpu_round_up(uint64_t v, uint64_t a)
{
    return v > UINT64_MAX - (a - 1) ? UINT64_MAX : (v + a - 1) / a * a;
}
#endif
