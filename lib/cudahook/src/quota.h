/* Quota file versions 1 to 3 (docs/design.md "Quota file"). */
#ifndef VGPU_QUOTA_H
#define VGPU_QUOTA_H
#include <stddef.h>
#include <stdint.h>

#include "vgpu_contract.h" /* limits and path: generated from internal/contract */

struct vgpu_quota_dev {
    char uuid[VGPU_UUID_MAX];
    int has_memory;
    uint64_t memory;         /* bytes, valid when has_memory */
    uint64_t memory_request; /* bytes, 0 when absent (its behaviour is not the library's yet) */
    int compute;             /* the limit, percent, 1..100 (100 when absent) */
    int compute_request;     /* percent guaranteed under contention, 0..compute (compute when absent) */
    int phase;               /* where the container's stretch starts, percent of the period, 0..99; -1 when absent */
    int spatial;             /* 1: mode=spatial (version 3), the GPU is shared through MPS; compute is the SM share
                                (active thread percentage), compute_request == compute and phase == -1 */
    char mps_pipe[VGPU_PATH_MAX]; /* the MPS pipe directory in the container; "" unless spatial */
};

struct vgpu_quota {
    int version; /* 1..VGPU_QUOTA_VERSION */
    char driver_cuda[VGPU_PATH_MAX];
    char driver_nvml[VGPU_PATH_MAX];
    char shared_dir[VGPU_PATH_MAX];
    int log_level;         /* VGPU_LOG_* */
    int compute_period_ms; /* pacing period, 0..VGPU_PERIOD_MAX_MS; -1 when absent (the library's default) */
    int ndev;
    struct vgpu_quota_dev dev[VGPU_MAX_DEVICES];
};

/* Parses buf[0..len). Returns 0, or -1 with "line N: why" in err. Strict: any
 * deviation from the format is an error, never a guess. */
int vgpu_quota_parse(const char *buf, size_t len, struct vgpu_quota *q, char *err, size_t errlen);

/* Finds and parses the quota file: /run/vgpu/quota, or $VGPU_QUOTA_FILE only
 * when /run/vgpu/quota does not exist. path receives the file used (for the
 * message). Returns 0 or -1 with err set. */
int vgpu_quota_load(struct vgpu_quota *q, char *path, size_t pathlen, char *err, size_t errlen);
#endif
