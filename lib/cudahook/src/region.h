/* Shared accounting of one container (layout: include/vgpu_region.h). */
#ifndef VGPU_REGION_H
#define VGPU_REGION_H
#include <stdint.h>
#include <sys/types.h>

#include "vgpu_contract.h"           /* VGPU_PATH_MAX: generated from internal/contract */
#include "vgpu_region.h"             /* the layout, shared with the host */
#define VGPU_RECLAIM_NS 100000000ull /* 100 ms: a scan costs one F_OFD_GETLK per slot in use */

/* Opens (creating if needed) the region in dir. 0 or -1 with err. */
int vgpu_region_open(const char *dir, char *err, size_t errlen);
/* Adds size to this process's usage of dev if the container's usage stays
 * within limit (reclaiming dead processes' slots first when it would not).
 * 0 = reserved, -1 = over the limit, -2 = no slot could be claimed. */
int vgpu_region_reserve(int dev, uint64_t size, uint64_t limit);
/* Adds size regardless of the limit (memory the driver already handed out). */
void vgpu_region_add(int dev, uint64_t size);
/* Gives back size, clamped at 0. */
void vgpu_region_release(int dev, uint64_t size);
/* The container's usage of dev: sum over live slots. */
uint64_t vgpu_region_usage(int dev);
/* The compute accounting of dev; NULL when dev is out of range or no region. */
struct vgpu_compute_shared *vgpu_region_compute(int dev);
/* The container's pacing gate of dev (compute.c): 0 open, 1 closed. */
uint32_t *vgpu_region_gate(int dev);
/* When the container's queued launches on dev end, as the pacer believes
 * (vgpu_pacer_queued); NULL as for the gate. */
int64_t *vgpu_region_queue_end(int dev);
/* Publishes that a launch on dev waited for the pacer at now: the container
 * wants more than its share (`vgpu node` reads it for the arbitration). */
void vgpu_region_want(int dev, uint64_t now);
/* Adds ns that a launch on dev waited for the order (a higher tenant, or
 * one waking below its due, went first) to the container's count, in whole
 * ms: this process keeps what falls short of one. */
void vgpu_region_order_waited(int dev, uint64_t ns);
/* Counts [from, to) (CLOCK_MONOTONIC ns), in which a launch waited for the
 * container's pacer with none of its work queued, in the container's count
 * for all devices: the union of such waits, in whole ms. */
void vgpu_region_pace_waited(uint64_t from, uint64_t to);
/* the MiB an allocation under the request waits for on dev (0: done; a
 * clear only clears what this process set) */
void vgpu_region_need(int dev, uint32_t mib, uint32_t was);
/* The part of [from, to) (CLOCK_MONOTONIC ns) that the container's busy spans
 * of dev, those that end within a second of now, do not cover; then adds
 * [from, to) to them, however old it is. */
int64_t vgpu_region_cover(int dev, int64_t from, int64_t to, int64_t now);
/* PIDs (as each process saw itself) of live slots; returns the count. */
int vgpu_region_pids(pid_t *out, int max);
#endif
