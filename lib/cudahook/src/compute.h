/* Compute limits (compute.c): pacing of every launch path by measured device time. */
#ifndef VGPU_COMPUTE_H
#define VGPU_COMPUTE_H
#include "cuda_abi.h"

/* VGPU_PERIOD_MS, the pacing period when the quota file names none. */
#include "vgpu_contract.h"

/* 1 once the quota is loaded and no device has compute < 100: the launch
 * wrappers then call the driver after this one load and branch. */
extern int vgpu_compute_off;
/* 1 once the quota is loaded, no device has compute < 100 and no graph exec
 * with allocation nodes was instantiated (memory.c clears it for good): graph
 * launches then go straight to the driver as well. */
extern int vgpu_graph_off;

/* Switches the calling thread's stream capture mode to RELAXED for our own
 * calls (another thread's GLOBAL capture must not be invalidated by them);
 * returns what to give vgpu_capture_restore. */
int vgpu_capture_relax(void);
void vgpu_capture_restore(int old);

/* loader.c, once the quota file is parsed (CUDA stand-in only) */
void vgpu_compute_setup(void);

/* memory.c, before a context goes: completes the measurements in flight and
 * destroys our events of that context while it still exists. by_dev: every
 * context of CUDA device dev (a primary context release/reset, whose handle we
 * do not know); else exactly ctx. */
void vgpu_compute_ctx_gone(CUcontext ctx, CUdevice dev, int by_dev);
#endif
