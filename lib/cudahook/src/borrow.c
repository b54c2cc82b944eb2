/* Borrowing's decisions (borrow.h). */
#include "borrow.h"
#include "vgpu_share.h"

/* a deadline passed, or further ahead than the host ever sets one: not believed */
static int deadline_holds(uint64_t until, uint64_t now)
{
    return until > now && until - now <= (uint64_t)VGPU_SHARE_MEM_MAX_MS * 1000000ull;
}

uint64_t vgpu_mem_cap_pick(uint64_t until, uint64_t ceiling, uint64_t request, uint64_t limit, uint64_t now)
{
    if (!request || request >= limit)
        return limit;
    if (!deadline_holds(until, now))
        return request;
    return ceiling < request ? request : ceiling > limit ? limit : ceiling;
}

uint64_t vgpu_room_wait_pick(uint64_t start, uint64_t now, uint64_t until, uint64_t room_until, uint64_t held,
                             uint64_t request, uint64_t limit)
{
    uint64_t left, end;

    if (!request || request > limit || held > request)
        return 0; /* no request, or past it: a borrower's refusal is final */
    if (!deadline_holds(until, now))
        return 0; /* no vgpu node: nobody takes memory back */
    if (now < start)
        return 0;
    end = start + VGPU_ROOM_WAIT_NS;
    /* a suspension freeing the room runs: its copy time is waited for too */
    if (room_until > now && room_until - now <= VGPU_ROOM_MAX_NS && room_until > end)
        end = room_until;
    if (now >= end)
        return 0;
    left = end - now;
    return left < VGPU_ROOM_STEP_NS ? left : VGPU_ROOM_STEP_NS;
}

uint64_t vgpu_mem_free_pick(uint64_t cap, uint64_t used, uint64_t gpu_free, uint64_t request, uint64_t limit,
                            uint64_t until, uint64_t now)
{
    uint64_t f = cap > used ? cap - used : 0;

    if (f > gpu_free)
        f = gpu_free; /* never promise what the GPU does not have... */
    /* ...unless it is owed: within its request, with vgpu node there to take
     * it back from a borrower, an allocation is served (vgpu_room_wait_pick) */
    if (!request || request > limit || used >= request)
        return f;
    if (!deadline_holds(until, now))
        return f;
    return request - used > f ? request - used : f;
}
