/* The order inside the period (order.h). Pure. */
#include "order.h"

/* A deadline the host wrote: ahead of now, and not further than
 * VGPU_SHARE_ORDER_MAX_MS (a word further ahead is not the host's clock). */
static int holds(uint64_t until, uint64_t now)
{
    return until > now && until - now <= (uint64_t)VGPU_SHARE_ORDER_MAX_MS * 1000000ull;
}

static int64_t step(int64_t w) { return w < 1 ? 1 : w > VGPU_ORDER_STEP_NS ? VGPU_ORDER_STEP_NS : w; }

/* Where the periods start: at the phase, as the slots (0: none). */
static uint64_t shift(int64_t period_ns, int64_t phase_ns)
{
    return (uint64_t)(phase_ns > 0 ? phase_ns % period_ns : 0);
}

int64_t vgpu_order_used(struct vgpu_order_period *pp, int64_t period_ns, int64_t phase_ns, uint64_t busy_ns,
                        int64_t queued_until, uint64_t now)
{
    uint64_t idx, used;

    if (period_ns <= 0)
        return 0;
    idx = (now + (uint64_t)period_ns - shift(period_ns, phase_ns)) / (uint64_t)period_ns; /* >= 1 */
    if (pp->index != idx || busy_ns < pp->busy_at) { /* a new period, or a region scribbled back */
        pp->index = idx;
        pp->busy_at = busy_ns;
    }
    used = busy_ns - pp->busy_at;
    /* queued work counts against this period, up to a period of it (the
     * region is the tenant's to write: an end far ahead only makes it wait) */
    if (queued_until > 0 && (uint64_t)queued_until > now)
        used += (uint64_t)queued_until - now < (uint64_t)period_ns ? (uint64_t)queued_until - now : (uint64_t)period_ns;
    return used > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)used;
}

int64_t vgpu_order_due(int64_t request_ns, int64_t period_ns, int64_t phase_ns, int64_t slot_ns, uint64_t now)
{
    uint64_t pos, len;

    if (request_ns <= 0)
        return 0;
    if (period_ns <= 0)
        return request_ns;
    len = (uint64_t)(phase_ns >= 0 && slot_ns > 0 && slot_ns < period_ns ? slot_ns : period_ns);
    pos = (now + (uint64_t)period_ns - shift(period_ns, phase_ns)) % (uint64_t)period_ns;
    if (pos >= len)
        return request_ns;
    return (int64_t)((unsigned __int128)request_ns * pos / len);
}

int vgpu_order_may_start(const struct vgpu_share_order *o, int64_t used_ns, int64_t due_ns, int64_t est_ns,
                         int64_t queued_until, uint64_t now, int64_t *wait_ns)
{
    int64_t queued = queued_until > 0 && (uint64_t)queued_until > now ? (int64_t)((uint64_t)queued_until - now) : 0;
    int64_t room;

    if (holds(o->yield_until_ns, now) && used_ns >= due_ns) {
        *wait_ns = step((int64_t)(o->yield_until_ns - now));
        return 0;
    }
    if (holds(o->bound_until_ns, now) && o->bound_ns < (uint64_t)INT64_MAX) {
        /* what may stay queued when this launch is added */
        room = (int64_t)o->bound_ns - (est_ns > 0 ? est_ns : 0);
        if (room < VGPU_ORDER_LEAD_NS)
            room = (int64_t)o->bound_ns < VGPU_ORDER_LEAD_NS ? (int64_t)o->bound_ns : VGPU_ORDER_LEAD_NS;
        if (queued > room) {
            *wait_ns = step(queued - room);
            return 0;
        }
    }
    return 1;
}
