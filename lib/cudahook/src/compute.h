/* Constants of the compute limits that the host side must agree with. */
#ifndef VGPU_COMPUTE_H
#define VGPU_COMPUTE_H

/* VGPU_DEFAULT_PERIOD_MS, the pacing period when the quota file names none. */
#include "vgpu_contract.h"
#endif
