/* A CUDA client that finds every driver function the way the CUDA runtime 12/13
 * does: dlopen libcuda.so.1, dlsym only cuGetProcAddress_v2, then look up base
 * names with cudaVersion 13000 and the chosen stream-mode flags. */
#ifndef CUCLIENT_H
#define CUCLIENT_H
#include <stdint.h>
#include <stddef.h>
#include "cuda_abi.h"

int cc_open(const char *libcuda, const char *libnvml, char *err, size_t errn);
void cc_set_flags(unsigned long long flags);
int cc_proc(const char *name, int version, unsigned long long flags, void **pfn, int *status);
void *cc_dlsym(const char *name);
int cc_call(const char *name, int n, const uint64_t *a); /* generic: up to 11 integer/pointer args */
int cc_busy_ns(int ord, uint64_t from, uint64_t to, uint64_t *busy);
int cc_nvml_util(int idx, unsigned *gpu);
int cc_nvml_init(void);
uint64_t cc_now(void);
int cc_fork_hold(void); /* a child that keeps our descriptors and sleeps; its pid */
#endif
