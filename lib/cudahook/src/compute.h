/* Compute limits (compute.c): pacing of every launch path by measured device time. */
#ifndef VGPU_COMPUTE_H
#define VGPU_COMPUTE_H
#include "cuda_abi.h"

/* 1 once the quota is loaded and no device has compute < 100: the launch
 * wrappers then call the driver after this one load and branch. */
extern int vgpu_compute_off;

/* loader.c, once the quota file is parsed (CUDA stand-in only) */
void vgpu_compute_setup(void);

/* memory.c, before a context goes: completes the measurements in flight and
 * destroys our events of that context while it still exists. by_dev: every
 * context of CUDA device dev (a primary context release/reset, whose handle we
 * do not know); else exactly ctx. */
void vgpu_compute_ctx_gone(CUcontext ctx, CUdevice dev, int by_dev);
#endif
