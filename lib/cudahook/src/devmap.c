/* CUDA device -> container device (quota order), by UUID: each limit stays on
 * its physical GPU whatever CUDA_VISIBLE_DEVICES did to the ordinals. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "account.h"
#include "cuda_hooks.h"

#define MAXORD 64
static int devmap[MAXORD]; /* 0 = unknown yet, -1 = not the container's, else quota index + 1 */

static void uuid_str(const CUuuid *u, char *out, size_t n)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
             b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

int vgpu_quota_index(CUdevice d)
{
    CUuuid u;
    char s[64];
    int v = (d >= 0 && d < MAXORD) ? __atomic_load_n(&devmap[d], __ATOMIC_RELAXED) : 0;
    cuDeviceGetUuid_t get = REALT(cuDeviceGetUuid_t, cuDeviceGetUuid_v2);

    if (v)
        return v > 0 ? v - 1 : -1;
    if ((void *)get == (void *)vgpu_notfound_stub)
        get = REALT(cuDeviceGetUuid_t, cuDeviceGetUuid);
    if (get(&u, d) != CUDA_SUCCESS)
        return -1; /* not cached: may be a transient error (no cuInit yet) */
    uuid_str(&u, s, sizeof s);
    v = -1;
    for (int i = 0; i < vgpu_q.ndev; i++)
        if (strcasecmp(vgpu_q.dev[i].uuid, s) == 0)
            v = i + 1;
    if (v < 0)
        vgpu_log(VGPU_LOG_WARN, "CUDA device %d (%s) is not one of this container's devices", d, s);
    if (d >= 0 && d < MAXORD)
        __atomic_store_n(&devmap[d], v, __ATOMIC_RELAXED);
    return v > 0 ? v - 1 : -1;
}
