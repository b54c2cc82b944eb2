/* Constants of the compute limits that the host side must agree with. */
#ifndef VGPU_COMPUTE_H
#define VGPU_COMPUTE_H

/* The pacing period when the quota file names none (internal/config
 * DefaultComputePeriodMS says the same; internal/inject's phase test checks). */
#ifndef VGPU_PERIOD_MS
#define VGPU_PERIOD_MS 500
#endif
#endif
