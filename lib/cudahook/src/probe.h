/* What a driver call took of a device's memory, measured around it with the
 * real NVML (probe.c): contexts (context.c), module and library data
 * (modules.c). */
#ifndef VGPU_PROBE_H
#define VGPU_PROBE_H
#include <stdint.h>

/* A snapshot of a device's memory, to measure what a driver call took. */
struct vgpu_probe {
    uint64_t proc_used; /* this process's figure in the driver's NVML */
    uint64_t dev_free;  /* the device's free memory; 0 unknown */
    int has_proc;       /* 1: the driver lists this process once; 0: not at all; -1: ambiguous (PID namespaces) */
};
void vgpu_probe_take(int qi, struct vgpu_probe *p);
/* bytes qi's memory grew by since before (per-process when possible, else
 * device-wide, which other processes blur); never negative */
uint64_t vgpu_probe_cost(int qi, const struct vgpu_probe *before);
#endif
