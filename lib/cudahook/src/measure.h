/* Measurement of launches' device time (measure.c): events around each
 * sampled launch, a per-process ring of them, the container's busy union, the
 * per-device estimates; and the pacer state they feed (pacer.h). */
#ifndef VGPU_MEASURE_H
#define VGPU_MEASURE_H
#include <stdint.h>
#include "cuda_abi.h"
#include "pacer.h"
#include "quota.h"

#define VGPU_MEASURE_WAIT_NS 2000000000ULL /* the longest a launch waits for a measurement */

/* The limits of the container's devices, by quota index (set up once). */
extern struct vgpu_pacer vgpu_pacers[VGPU_MAX_DEVICES];
/* 1: the device is paced (its request is below the whole GPU). */
extern int vgpu_paced[VGPU_MAX_DEVICES];
/* The pacer of qi at now: built from the share that holds (the host's share
 * file: the arbitration's while `vgpu node` runs, else the admission's). */
const struct vgpu_pacer *vgpu_measure_pacer(int qi, uint64_t now);

struct vgpu_evpool; /* our events of one context */

/* One launch, from before to after the driver call. */
struct vgpu_ticket {
    struct vgpu_evpool *pool;
    CUcontext ctx;
    CUevent start, end;
    CUstream s;
    int ptsz;
    int qi;         /* -1: this launch is not paced */
    int on;         /* 1: bracketed, a ring slot is reserved */
    int64_t est;    /* charged at launch */
    uint64_t kind;  /* the launch's kind (vgpu_measure_kind); 0: none */
    int kind_known; /* its kind had a measurement when the launch was paced */
    int64_t rec;    /* CLOCK_MONOTONIC just before the start event was recorded */
};

/* Reads the quota's compute limits into vgpu_pacers; 1 when a device has one. */
int vgpu_measure_setup(void);
/* The quota index of context ctx, which is current, and its pool of events
 * (created on first use); -1 when the context is not the container's. */
int vgpu_measure_qi(CUcontext ctx, struct vgpu_evpool **pool);
/* Completes whatever is measured, without waiting; at most every 50 us while
 * the ring has room; skipped while another thread harvests. */
void vgpu_measure_harvest(uint64_t now);
/* Waits up to wait_ns for the oldest measurement (or lets the thread that
 * harvests do it). 1 = one completed. */
int vgpu_measure_wait_oldest(uint64_t wait_ns);
/* vgpu_estimate_ready for qi, under the measurement lock. */
int vgpu_measure_estimate_ready(int qi, uint64_t now, uint64_t *cold_since);
/* What a launch on qi is charged at its start (0 while nothing is known). */
int64_t vgpu_measure_estimate(int qi);
/* A launch's kind: its function (or graph) and its grid's blocks, to a power
 * of two, on quota index qi: the key under which its device time is learned
 * (never 0). */
uint64_t vgpu_measure_kind(int qi, const void *fn, unsigned gx, unsigned gy, unsigned gz);
/* How long the launch of t (its kind set) on qi is expected to keep the
 * device: what its kind took when last measured (a moving average), else
 * the device's estimate; t->kind_known says which, so that
 * vgpu_measure_open measures a kind never measured without looking again.
 * What the in-flight bound and the queue's end count, where one average
 * across a training step's kernels (30 us mostly, a few of 5 ms) let
 * launches pile up behind the long ones. */
int64_t vgpu_measure_kind_estimate(int qi, struct vgpu_ticket *t);
/* A floor under what qi has on the device now: its measured launches not
 * yet harvested, each at the estimate (0 while nothing is known). */
int64_t vgpu_measure_inflight_ns(int qi);
/* After the launch was paced: charges its estimate and, when it is sampled
 * and a ring slot comes free, records its start event. */
void vgpu_measure_open(struct vgpu_evpool *p, CUcontext ctx, int qi, CUstream s, int ptsz, struct vgpu_ticket *t);
/* After the launch returned r: records its end event (the pair joins the
 * ring), or settles its charge. Returns r. */
CUresult vgpu_measure_close(struct vgpu_ticket *t, CUresult r);

/* Before a context goes (context.c): completes the measurements in flight and
 * destroys our events of that context while it still exists. by_dev: every
 * context of CUDA device dev (a primary context release/reset, whose handle we
 * do not know); else exactly ctx. */
void vgpu_measure_ctx_gone(CUcontext ctx, CUdevice dev, int by_dev);
#endif
