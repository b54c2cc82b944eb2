/* Stream capture (capture.c): which streams capture, and our own calls made
 * safe beside another thread's capture. */
#ifndef VGPU_CAPTURE_H
#define VGPU_CAPTURE_H
#include "cuda_abi.h"

/* Whether work put on s now would be captured into a graph rather than run.
 * Asks the driver only while a capture this process began may be open (about
 * a us a call on the H200, bench/gpu/pathcost.sh). One error policy: when the
 * driver cannot say, 0, so that the caller takes the accounted route (the
 * launch is paced, the allocation counted); the driver's own call then says
 * what is wrong. */
int vgpu_capturing(CUstream s, int ptsz);

/* Switches the calling thread's stream capture mode to RELAXED for our own
 * calls (another thread's GLOBAL capture must not be invalidated by them);
 * returns what to give vgpu_capture_restore. */
int vgpu_capture_relax(void);
void vgpu_capture_restore(int old);
#endif
