/* cuGetProcAddress(_v2): the route cudart 12/13 takes to every driver function.
 *
 * We let the real driver answer (so it applies cudaVersion and flags itself,
 * _ptsz/_ptds and _v2/_v3 choice included), then swap the answer for our
 * wrapper only when it is exactly the real address of a symbol we hook. A
 * wrapper therefore always has the signature the driver chose, and a lookup of
 * cuGetProcAddress itself yields ours (its real address is in the list). */
#include <string.h>
#include "cuda_hooks.h"

struct hook {
    int idx;       /* index of the real entry in vgpu_table */
    void *wrapper; /* our export of the same name */
};

static const struct hook hooks[] = {
#define HOOK_CUDA(name) {VGPU_IDX_##name, (void *)name},
#include "hooks.h"
};

static void *substitute(void *p)
{
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        void *real = vgpu_table[hooks[i].idx];
        if (real == p && real != (void *)vgpu_notfound_stub)
            return hooks[i].wrapper;
    }
    return p;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    r = REAL(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = substitute(*pfn);
    return r;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    CUresult r;

    if (!vgpu_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    r = REAL(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = substitute(*pfn);
    return r;
}
