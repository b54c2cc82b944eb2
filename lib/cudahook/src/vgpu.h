/* Internals shared by the files of one stand-in library. Everything here is
 * hidden (-fvisibility=hidden); only driver names are exported (VGPU_EXPORT). */
#ifndef VGPU_H
#define VGPU_H
#include <stddef.h>
#include <stdint.h>
#include "quota.h"

#define VGPU_EXPORT __attribute__((visibility("default")))

enum { VGPU_LOG_ERROR = 0, VGPU_LOG_WARN = 1, VGPU_LOG_INFO = 2, VGPU_LOG_DEBUG = 3 };
extern int vgpu_log_level;
void vgpu_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define VGPU_DEBUG(...)                                                                                                \
    do {                                                                                                               \
        if (vgpu_log_level >= VGPU_LOG_DEBUG)                                                                          \
            vgpu_log(VGPU_LOG_DEBUG, __VA_ARGS__);                                                                     \
    } while (0)

/* loader.c: the table of real entry points (generated), resolved once */
extern void *vgpu_table[];
extern const char *const vgpu_names[];
extern struct vgpu_quota vgpu_q; /* valid once vgpu_ready() returned 1 */
extern void *vgpu_real_handle;
/* Resolves everything on first use; 1 = usable, 0 = failed closed. */
int vgpu_ready(void);
/* Fails closed from now on: every entry point, the driver's included, says
 * NOT_INITIALIZED (after a check that found the process may not use the GPU). */
void vgpu_close(void);
/* Registers fn to run once the driver's table is resolved (before any
 * wrapper goes on); from a constructor. The loader calls up into the layers
 * above it only this way. */
void vgpu_after_resolve(void (*fn)(void));
/* Registers the one fn that runs once the quota is read, before the driver
 * library is loaded (the spatial mode's environment: a driver may read it
 * as it loads). From a constructor. */
void vgpu_before_load(void (*fn)(void));
/* The stub every missing real symbol points at (procaddr.c must not hand it out). */
int vgpu_notfound_stub(void);

/* saturating arithmetic: no counter ever wraps (HAMi-core's 18 EB bug) */
static inline uint64_t vgpu_sub_clamp(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
static inline uint64_t vgpu_add_sat(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

uint64_t vgpu_now_ns(void); /* CLOCK_MONOTONIC */
#endif
