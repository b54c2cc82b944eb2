/* Context limits that hold device memory (docs/memory-routes.md).
 *
 * cuCtxSetLimit (and cudaDeviceSetLimit, which reaches it) makes the driver
 * reserve device memory at the call: the malloc heap and printf FIFO their
 * size, device-runtime pending launches a record each, and the stack its size
 * per thread for every thread the device can hold resident. What a limit holds
 * above its value at our first sight of it (the context's own cost, measured at
 * its creation, covers that one) is reserved before the driver call, so the
 * call that would cross the limit gets OUT_OF_MEMORY and the driver never sees
 * it. The sizes are the driver's documented rules with a margin where the H200
 * measured more (docs/memory-routes.md); they are estimates, not measurements:
 * a delta of the device's memory around the call would count other
 * containers' allocations too. */
#include <pthread.h>
#include <stdint.h>
#include "account.h"
#include "cuda_hooks.h"
#include "ptrtab.h"
#include "routes.h"

/* H200, 64 KiB stack: the driver took about 9 % more than 132 SMs x 2048
 * threads would need (it may reserve for the whole die). 1/8 margin. */
#define STACK_MARGIN_NUM 9
#define STACK_MARGIN_DEN 8
/* one device-runtime pending launch record: 2 KiB, rounded up from what
 * the documentation's defaults imply; to be calibrated on hardware */
#define LAUNCH_SLOT_BYTES 2048ULL
#define STEP              (2ULL << 20) /* reservations come in 2 MiB steps */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* records only: never held across a driver call */

static uint64_t mul_sat(uint64_t a, uint64_t b) { return (a && b > UINT64_MAX / a) ? UINT64_MAX : a * b; }
static uint64_t step_up(uint64_t v) { return v > UINT64_MAX - STEP ? UINT64_MAX : (v + STEP - 1) / STEP * STEP; }

static int counted(CUlimit l)
{
    return l == CU_LIMIT_STACK_SIZE || l == CU_LIMIT_PRINTF_FIFO_SIZE || l == CU_LIMIT_MALLOC_HEAP_SIZE ||
           l == CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT;
}

/* threads the current context's device holds resident, with the margin */
static uint64_t resident_threads(void)
{
    CUdevice d;
    int sms = 0, per_sm = 0;

    if (REALT(cuCtxGetDevice_t, cuCtxGetDevice)(&d) != CUDA_SUCCESS ||
        REALT(cuDeviceGetAttribute_t, cuDeviceGetAttribute)(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d) !=
            CUDA_SUCCESS ||
        REALT(cuDeviceGetAttribute_t, cuDeviceGetAttribute)(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                                            d) != CUDA_SUCCESS ||
        sms <= 0 || per_sm <= 0)
        return UINT64_MAX; /* fail closed: an unknown device cannot grow its stack */
    return (uint64_t)sms * (uint64_t)per_sm * STACK_MARGIN_NUM / STACK_MARGIN_DEN;
}

/* bytes limit l at v holds beyond what it held at base */
static uint64_t limit_bytes(CUlimit l, size_t v, size_t base)
{
    uint64_t extra = v > base ? v - base : 0;

    if (!extra)
        return 0;
    switch (l) {
    case CU_LIMIT_STACK_SIZE:
        return step_up(mul_sat(extra, resident_threads()));
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
        return step_up(mul_sat(extra, LAUNCH_SLOT_BYTES));
    default:
        return step_up(extra);
    }
}

static uint64_t limit_key(CUcontext c, CUlimit l) { return (uint64_t)(uintptr_t)c << 4 | (uint64_t)l; }

CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    CUcontext c = NULL;
    size_t cur = 0;
    int qi;
    uint64_t old = 0, now, key;
    struct vgpu_rec rec = {0, 0, 0};
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counted(limit) || REALT(vgpu_ctx_get_current_t, cuCtxGetCurrent)(&c) != CUDA_SUCCESS || !c ||
        REALT(cuCtxGetLimit_t, cuCtxGetLimit)(&cur, limit) != CUDA_SUCCESS)
        return REAL(cuCtxSetLimit)(limit, value); /* holds no memory, or the driver says what is wrong */
    if ((r = vgpu_current_qi(&qi)) != CUDA_SUCCESS)
        return r;
    key = limit_key(c, limit);
    pthread_mutex_lock(&mu);
    if (vgpu_ptr_get(VGPU_K_LIMIT, key, &rec) == 0)
        old = rec.size;
    else
        rec.aux = cur; /* first sight: the context's measured cost covers this value */
    pthread_mutex_unlock(&mu);
    now = limit_bytes(limit, value, (size_t)rec.aux);
    if (now > old && vgpu_mem_reserve(qi, now - old) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = REAL(cuCtxSetLimit)(limit, value);
    if (r != CUDA_SUCCESS) {
        if (now > old)
            vgpu_mem_unreserve(qi, now - old);
        return r;
    }
    pthread_mutex_lock(&mu);
    vgpu_ptr_take(VGPU_K_LIMIT, key, &(struct vgpu_rec){0, 0, 0});
    rec.dev = qi;
    rec.size = now;
    vgpu_ptr_insert(VGPU_K_LIMIT, key, &rec);
    pthread_mutex_unlock(&mu);
    if (now < old)
        vgpu_mem_unreserve(qi, old - now);
    return CUDA_SUCCESS;
}

/* The driver grows the stack at a launch whose frame exceeds it, and a launch
 * cannot be undone: grow it here first, counted, where it can be refused. */
CUresult vgpu_stack_fit(size_t local)
{
    size_t cur = 0;

    if (local == 0 || REALT(cuCtxGetLimit_t, cuCtxGetLimit)(&cur, CU_LIMIT_STACK_SIZE) != CUDA_SUCCESS || local <= cur)
        return CUDA_SUCCESS;
    VGPU_DEBUG("a frame of %zu bytes per thread grows the stack limit from %zu", local, cur);
    return cuCtxSetLimit(CU_LIMIT_STACK_SIZE, local) == CUDA_ERROR_OUT_OF_MEMORY ? CUDA_ERROR_OUT_OF_MEMORY
                                                                                 : CUDA_SUCCESS;
}

void vgpu_limits_ctx_gone(CUcontext ctx)
{
    static const CUlimit ls[] = {CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE,
                                 CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT};

    pthread_mutex_lock(&mu);
    for (unsigned i = 0; i < sizeof ls / sizeof ls[0]; i++)
        vgpu_mem_forget(VGPU_K_LIMIT, limit_key(ctx, ls[i]));
    pthread_mutex_unlock(&mu);
}
