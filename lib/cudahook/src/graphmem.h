/* Graph memory (graphmem.c): the device's graph memory pool, counted at
 * instantiation, upload, launch, exec destroy and trim. */
#ifndef VGPU_GRAPHMEM_H
#define VGPU_GRAPHMEM_H
#include <stdint.h>
#include "cuda_abi.h"
#include "quota.h"

/* 1 while no graph exec with allocation nodes was instantiated and compute is
 * not limited (launch.c sets it at setup; graphmem.c clears it for good):
 * graph launches then go straight to the driver. */
extern int vgpu_graph_off;

/* Around a graph launch (launch.c) or upload: before reserves what the exec's
 * allocation nodes may make the graph pools grow by (the limit is checked
 * before the driver is reached); after settles the count on the pools'
 * reserved memory. t is the caller's. */
struct vgpu_graph_ticket {
    int n;
    int qi[VGPU_MAX_DEVICES];
    uint64_t need[VGPU_MAX_DEVICES], gen[VGPU_MAX_DEVICES];
};
CUresult vgpu_graph_before(CUgraphExec e, struct vgpu_graph_ticket *t);
void vgpu_graph_after(CUgraphExec e, struct vgpu_graph_ticket *t, CUresult r);

/* A captured stream-ordered allocation (pools.c) becomes an allocation node:
 * learn says which CUDA device is container device qi; reserve is
 * vgpu_mem_reserve that trims qi's graph pool once when refused. */
void vgpu_graph_learn(int qi, CUdevice d);
CUresult vgpu_graph_reserve(int qi, uint64_t size);
#endif
