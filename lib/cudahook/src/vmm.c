/* Virtual memory management. A physical allocation (cuMemCreate) holds
 * device memory until its last handle reference is released and its last
 * mapping is unmapped, as the driver keeps it: releasing the handle of mapped
 * memory, or retaining it from the address, changes nothing in what the
 * device holds. So the count follows both, per handle record:
 * aux = references << 32 | mappings; the bytes are given back when both are 0.
 *
 * Each mapping is recorded (VGPU_K_VMAP, key = its address, size = its
 * length, aux = the handle; also of handles that are not ours, so that an
 * unmap can walk the range mapping by mapping). The read-modify-write of
 * these records holds vmm_mu; no lock is held across a driver call. A map
 * counts its mapping before the driver call and takes it back if the call
 * fails, so that a release racing with it never sees the memory unmapped. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "account.h"
#include "cuda_hooks.h"

#define REF1    (1ULL << 32)
#define REFS(a) ((a) >> 32)
#define MAPS(a) ((a)&0xffffffffULL)

static pthread_mutex_t vmm_mu = PTHREAD_MUTEX_INITIALIZER;

/* A child starts with an empty table (ptrtab.c) and must not inherit the
 * lock held by a thread of the parent that it does not have. */
static void vmm_child(void) { pthread_mutex_init(&vmm_mu, NULL); }
__attribute__((constructor)) static void vmm_init(void) { pthread_atfork(NULL, NULL, vmm_child); }

/* Under vmm_mu: the handle's aux becomes aux + delta (refs or maps); the
 * record goes, and its bytes with it, once neither is left. */
static void vmm_adjust(CUmemGenericAllocationHandle h, int64_t drefs, int64_t dmaps)
{
    struct vgpu_rec rec;
    uint64_t key = (uint64_t)h;

    if (vgpu_ptr_get(VGPU_K_VMM, key, &rec) != 0)
        return;
    int64_t refs = (int64_t)REFS(rec.aux) + drefs, maps = (int64_t)MAPS(rec.aux) + dmaps;
    if (refs < 0)
        refs = 0;
    if (maps < 0)
        maps = 0;
    if (refs == 0 && maps == 0)
        vgpu_mem_forget(VGPU_K_VMM, key);
    else
        vgpu_ptr_set_aux(VGPU_K_VMM, key, (uint64_t)refs << 32 | (uint64_t)maps);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    int qi;
    CUresult r;

    READY();
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return REAL(cuMemCreate)(h, size, prop, flags); /* host memory is not device memory */
    if ((qi = vgpu_quota_index(prop->location.id)) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if ((r = vgpu_mem_reserve(qi, size)) != CUDA_SUCCESS)
        return r;
    VGPU_ROOM_RETRY(r, qi, size, REAL(cuMemCreate)(h, size, prop, flags));
    if (r != CUDA_SUCCESS) {
        vgpu_mem_unreserve(qi, size);
        return r;
    }
    pthread_mutex_lock(&vmm_mu);
    struct vgpu_rec old;
    /* a record left with no reference while a release of the same handle
     * value is still between the driver and its bookkeeping: its bytes are
     * gone from the device, this allocation replaces it */
    if (vgpu_ptr_get(VGPU_K_VMM, (uint64_t)*h, &old) == 0 && REFS(old.aux) == 0 && MAPS(old.aux) == 0)
        vgpu_mem_forget(VGPU_K_VMM, (uint64_t)*h);
    vgpu_mem_commit(VGPU_K_VMM, (uint64_t)*h, qi, size, REF1);
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    struct vgpu_rec rec;
    CUresult r;

    READY();
    pthread_mutex_lock(&vmm_mu);
    int ours = vgpu_ptr_get(VGPU_K_VMM, (uint64_t)h, &rec) == 0 && REFS(rec.aux) > 0;
    if (ours) /* one reference less from here: a racing map sees it */
        vgpu_ptr_set_aux(VGPU_K_VMM, (uint64_t)h, rec.aux - REF1);
    pthread_mutex_unlock(&vmm_mu);
    r = REAL(cuMemRelease)(h);
    if (!ours)
        return r;
    pthread_mutex_lock(&vmm_mu);
    if (r == CUDA_SUCCESS)
        vmm_adjust(h, 0, 0); /* gone if nothing maps it */
    else
        vmm_adjust(h, 1, 0);
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    CUresult r;

    READY();
    r = REAL(cuMemRetainAllocationHandle)(h, addr);
    if (r == CUDA_SUCCESS && h) {
        pthread_mutex_lock(&vmm_mu);
        vmm_adjust(*h, 1, 0);
        pthread_mutex_unlock(&vmm_mu);
    }
    return r;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags)
{
    struct vgpu_rec rec;
    CUresult r;

    READY();
    pthread_mutex_lock(&vmm_mu);
    int ours = vgpu_ptr_get(VGPU_K_VMM, (uint64_t)h, &rec) == 0;
    if (ours)
        vgpu_ptr_set_aux(VGPU_K_VMM, (uint64_t)h, rec.aux + 1);
    pthread_mutex_unlock(&vmm_mu);
    r = REAL(cuMemMap)(ptr, size, offset, h, flags);
    pthread_mutex_lock(&vmm_mu);
    if (r == CUDA_SUCCESS) {
        struct vgpu_rec m = {ours ? rec.dev : -1, size, (uint64_t)h};
        vgpu_ptr_insert(VGPU_K_VMAP, (uint64_t)ptr, &m);
    } else if (ours) {
        vmm_adjust(h, 0, -1);
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct vgpu_rec stack[16], *maps = stack, *grown;
    uint64_t keys_stack[16], *keys = keys_stack, *kgrown;
    size_t n = 0, cap = 16;
    CUresult r;

    READY();
    /* the mappings in the range, taken out before the driver call (the
     * driver unmaps whole mappings only) */
    pthread_mutex_lock(&vmm_mu);
    for (uint64_t cur = ptr; cur < (uint64_t)ptr + size;) {
        struct vgpu_rec m;
        if (vgpu_ptr_take(VGPU_K_VMAP, cur, &m) != 0 || m.size == 0)
            break;
        if (n == cap) {
            grown = malloc(2 * cap * sizeof *maps);
            kgrown = malloc(2 * cap * sizeof *keys);
            if (!grown || !kgrown) {
                free(grown);
                free(kgrown);
                vgpu_ptr_insert(VGPU_K_VMAP, cur, &m);
                break;
            }
            memcpy(grown, maps, n * sizeof *maps);
            memcpy(kgrown, keys, n * sizeof *keys);
            if (maps != stack) {
                free(maps);
                free(keys);
            }
            maps = grown;
            keys = kgrown;
            cap *= 2;
        }
        maps[n] = m;
        keys[n++] = cur;
        cur += m.size;
    }
    pthread_mutex_unlock(&vmm_mu);
    r = REAL(cuMemUnmap)(ptr, size);
    pthread_mutex_lock(&vmm_mu);
    for (size_t i = 0; i < n; i++) {
        if (r != CUDA_SUCCESS)
            vgpu_ptr_insert(VGPU_K_VMAP, keys[i], &maps[i]);
        else if (maps[i].dev >= 0)
            vmm_adjust((CUmemGenericAllocationHandle)maps[i].aux, 0, -1);
    }
    pthread_mutex_unlock(&vmm_mu);
    if (maps != stack) {
        free(maps);
        free(keys);
    }
    return r;
}
