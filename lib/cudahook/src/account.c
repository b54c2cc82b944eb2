/* The accounting core (account.h): reserve, commit, unreserve, free. */
#include <errno.h>
#include <stdint.h>
#include <time.h>
#include "account.h"
#include "cuda_hooks.h"
#include "borrow.h"
#include "region.h"
#include "share.h"

#define RESYNC_MAX 4
static void (*resyncs[RESYNC_MAX])(void);
static int nresync;

void vgpu_mem_on_refusal(void (*resync)(void))
{
    if (nresync < RESYNC_MAX)
        resyncs[nresync++] = resync;
}

uint64_t vgpu_limit_of(int qi)
{
    return qi >= 0 && qi < VGPU_MAX_DEVICES && vgpu_q.dev[qi].has_memory ? vgpu_q.dev[qi].memory : UINT64_MAX;
}

uint64_t vgpu_mem_cap(int qi)
{
    uint64_t lim = vgpu_limit_of(qi);

    if (lim == UINT64_MAX || !vgpu_q.dev[qi].memory_request || vgpu_q.dev[qi].memory_request >= lim)
        return lim;
    return vgpu_mem_cap_pick(vgpu_share_mem_until(), vgpu_share_ceiling(qi), vgpu_q.dev[qi].memory_request, lim,
                             vgpu_now_ns());
}

/* After the loader resolved the driver (registered below): a device with a
 * memory request reads the share file, for its ceiling (a borrower) or to
 * learn that vgpu node runs to take memory back for it (an owner whose
 * request is its limit borrows nothing). */
static void mem_setup(void)
{
    int borrows = 0;

    for (int i = 0; i < vgpu_q.ndev && i < VGPU_MAX_DEVICES; i++) {
        const struct vgpu_quota_dev *d = &vgpu_q.dev[i];

        if (d->has_memory && d->memory_request && d->memory_request <= d->memory)
            borrows = 1;
        if (d->has_memory && d->memory_request && d->memory_request < d->memory) {
            vgpu_log(VGPU_LOG_INFO,
                     "device %d (%s): memory request %llu, limit %llu: above the request only what vgpu node grants", i,
                     d->uuid, (unsigned long long)d->memory_request, (unsigned long long)d->memory);
        }
    }
    if (borrows)
        vgpu_share_open();
}

__attribute__((constructor)) static void register_mem_setup(void) { vgpu_after_resolve(mem_setup); }

CUresult vgpu_current_qi(int *qi)
{
    CUdevice d;
    CUresult r = REALT(cuCtxGetDevice_t, cuCtxGetDevice)(&d);

    if (r != CUDA_SUCCESS)
        return r;
    *qi = vgpu_quota_index(d);
    /* fail closed: a device the quota does not list gets no memory from us */
    return *qi < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

CUresult vgpu_mem_reserve(int qi, uint64_t size)
{
    int r = vgpu_region_reserve(qi, size, vgpu_mem_cap(qi));

    if (r == -1) {
        /* freed pool memory is only trimmed at synchronisation: look again */
        for (int i = 0; i < nresync; i++)
            resyncs[i]();
        r = vgpu_region_reserve(qi, size, vgpu_mem_cap(qi));
    }
    if (r == 0)
        return CUDA_SUCCESS;
    if (r == -1 && vgpu_log_level >= VGPU_LOG_INFO)
        vgpu_log(VGPU_LOG_INFO, "device %d: %llu bytes refused: container uses %llu of %llu (limit %llu)", qi,
                 (unsigned long long)size, (unsigned long long)vgpu_region_usage(qi),
                 (unsigned long long)vgpu_mem_cap(qi), (unsigned long long)vgpu_limit_of(qi));
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* size in whole MiB, rounded up, as the region's need field holds it */
static uint32_t need_mib(uint64_t size)
{
    uint64_t mib = (size + (1ull << 20) - 1) >> 20;

    return mib > UINT32_MAX ? UINT32_MAX : (uint32_t)mib;
}

int vgpu_mem_wait_room(int qi, uint64_t size, uint64_t *start)
{
    uint64_t now = vgpu_now_ns(), lim = vgpu_limit_of(qi), ns;
    struct timespec ts;

    if (!*start)
        *start = now;
    if (lim == UINT64_MAX)
        ns = 0;
    else
        ns = vgpu_room_wait_pick(*start, now, vgpu_share_mem_until(), vgpu_share_room_until(), vgpu_region_usage(qi),
                                 vgpu_q.dev[qi].memory_request, lim);
    if (!ns) {
        vgpu_mem_room_end(qi, size, *start);
        return 0;
    }
    if (now == *start)
        vgpu_log(VGPU_LOG_INFO,
                 "device %d: the GPU has no room for %llu bytes under the request: waiting for vgpu node", qi,
                 (unsigned long long)size);
    vgpu_region_need(qi, need_mib(size), 0);
    ts.tv_sec = (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return 1;
}

void vgpu_mem_room_end(int qi, uint64_t size, uint64_t start)
{
    if (start)
        vgpu_region_need(qi, 0, need_mib(size));
}

void vgpu_mem_commit(int kind, uint64_t key, int qi, uint64_t size, uint64_t aux)
{
    struct vgpu_rec r = {qi, size, aux};

    if (vgpu_ptr_insert(kind, key, &r) != 0) {
        /* the driver reused a key we still hold: keep the old record, which the
         * next free of this key gives back, and drop this count */
        vgpu_log(VGPU_LOG_WARN, "driver returned a handle we already track (kind %d)", kind);
        vgpu_region_release(qi, size);
    }
}

void vgpu_mem_unreserve(int qi, uint64_t size) { vgpu_region_release(qi, size); }

void vgpu_mem_recount(int qi, uint64_t old, uint64_t now)
{
    if (now > old)
        vgpu_region_add(qi, now - old);
    else
        vgpu_region_release(qi, old - now);
}

int vgpu_mem_take(int kind, uint64_t key, struct vgpu_rec *rec) { return vgpu_ptr_take(kind, key, rec); }

void vgpu_mem_settle(int kind, uint64_t key, const struct vgpu_rec *rec, CUresult r)
{
    if (r == CUDA_SUCCESS)
        vgpu_region_release(rec->dev, rec->size);
    else
        vgpu_ptr_insert(kind, key, rec);
}

int vgpu_mem_forget(int kind, uint64_t key)
{
    struct vgpu_rec rec;

    if (vgpu_ptr_take(kind, key, &rec) != 0)
        return -1;
    vgpu_region_release(rec.dev, rec.size);
    return 0;
}
