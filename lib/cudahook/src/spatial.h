/* The spatial mode's decisions (spatial.c): pure, no driver calls, no
 * globals; mps.c applies them. A spatial device (quota mode=spatial) is
 * shared through NVIDIA MPS: the driver, as an MPS client, holds the process
 * to its share of the SMs; the library is not pacing it, it makes sure the
 * process is that client, with the host's settings, or gets no GPU. */
#ifndef VGPU_SPATIAL_H
#define VGPU_SPATIAL_H
#include <stddef.h>
#include "cuda_abi.h"
#include "quota.h"
#include "vgpu_share.h"

#define VGPU_MPS_PIPE_ENV "CUDA_MPS_PIPE_DIRECTORY"
#define VGPU_MPS_PCT_ENV  "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#define VGPU_MPS_PRIO_ENV "CUDA_MPS_CLIENT_PRIORITY"

/* What the quota asks of the process. */
struct vgpu_spatial {
    int any;          /* some device is spatial */
    const char *pipe; /* the pipe directory every spatial device names (into the quota) */
    int pct;          /* the lowest share among them: one active thread percentage per process */
    int prio;         /* CUDA_MPS_CLIENT_PRIORITY the process runs with: 0 normal, 1 below normal
                         (vgpu_spatial_priority; 0 until mps.c sets it) */
};

/* From the quota. -1 with why when spatial devices name different pipe
 * directories (a process is the client of one MPS control daemon). */
int vgpu_spatial_plan(const struct vgpu_quota *q, struct vgpu_spatial *s, char *err, size_t errlen);

/* The active thread percentage the process must run with, given the
 * environment's value cur (NULL: unset): the tenant's own when it is a
 * plain whole number from 1 up to the share (a client may lower its share),
 * else the share. */
int vgpu_spatial_pct(const struct vgpu_spatial *s, const char *cur);

/* Whether the environment the driver reads (NULL: unset) holds the plan:
 * the pipe directory exactly, a percentage not above the share. 0, or -1
 * with why naming the variable, its value and what it must be. */
int vgpu_spatial_env_ok(const struct vgpu_spatial *s, const char *pipe, const char *pct, char *err, size_t errlen);

/* The MPS client priority (CUDA_MPS_CLIENT_PRIORITY) of a process whose
 * spatial devices have the share file's priority words words[qi] (indexed
 * like q's devices): 1 (below normal) when any of them is low, or a word
 * this library does not know; else 0 (normal, the driver's default), for
 * high and normal alike. One value per process, so the lowest holds, as for
 * the share. */
int vgpu_spatial_priority(const struct vgpu_quota *q, const uint64_t *words);

/* Whether the environment's CUDA_MPS_CLIENT_PRIORITY (NULL: unset) is the
 * plan's exactly (a tenant cannot raise itself to normal). 0, or -1 with why. */
int vgpu_spatial_prio_ok(const struct vgpu_spatial *s, const char *prio, char *err, size_t errlen);

/* The execution affinity a context on a spatial device is created with:
 * the caller's n params (in) with every SM count above cap lowered to cap,
 * and an SM count of cap added when none is given. out holds n + 1. Returns
 * the count in out. Params of other types pass as they are (the driver
 * judges them). */
int vgpu_spatial_affinity(const CUexecAffinityParam *in, int n, unsigned cap, CUexecAffinityParam *out);

/* mps.c (the stand-in's side): whether CUDA device dev is spatial, and then
 * in *cap the SM count a context on it may have (the count the driver gives
 * this MPS client: its share). */
int vgpu_spatial_cap(CUdevice dev, unsigned *cap);
/* Puts the plan into the process environment where it differs, before the
 * driver reads it (cuInit, context creation). No-op without spatial devices. */
void vgpu_spatial_env_apply(void);
#endif
