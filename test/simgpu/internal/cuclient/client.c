#define _GNU_SOURCE
#include "client.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static void *hcuda, *hnvml;
static gpa_t gpa;
static unsigned long long gflags;

int cc_open(const char *libcuda, const char *libnvml, char *err, size_t errn)
{
    hcuda = dlopen(libcuda, RTLD_NOW | RTLD_LOCAL);
    if (!hcuda) {
        snprintf(err, errn, "%s", dlerror());
        return -1;
    }
    gpa = (gpa_t)dlsym(hcuda, "cuGetProcAddress_v2");
    if (!gpa) {
        snprintf(err, errn, "no cuGetProcAddress_v2");
        return -1;
    }
    if (libnvml && *libnvml) {
        hnvml = dlopen(libnvml, RTLD_NOW | RTLD_LOCAL);
        if (!hnvml) {
            snprintf(err, errn, "%s", dlerror());
            return -1;
        }
    }
    return 0;
}

void cc_set_flags(unsigned long long flags) { gflags = flags; }

int cc_proc(const char *name, int version, unsigned long long flags, void **pfn, int *status)
{
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CUresult r = gpa(name, pfn, version, flags, &st);
    *status = (int)st;
    return (int)r;
}

void *cc_dlsym(const char *name) { return dlsym(hcuda, name); }

typedef CUresult (*f11)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

/* Every driver entry point takes integer/pointer arguments (<= 64 bit) except
 * a few with float/struct by value, which the tests do not call through here;
 * on x86-64 SysV, passing extra integer arguments is harmless. */
int cc_call(const char *name, int n, const uint64_t *a)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    CUresult r = gpa(name, &p, 13000, gflags, &st);
    if (r != CUDA_SUCCESS || !p) return -1000 - (int)st;
    uint64_t v[11] = {0};
    for (int i = 0; i < n && i < 11; i++) v[i] = a[i];
    return (int)((f11)p)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]);
}

int cc_busy_ns(int ord, uint64_t from, uint64_t to, uint64_t *busy)
{
    int (*f)(int, uint64_t, uint64_t, uint64_t *) = (int (*)(int, uint64_t, uint64_t, uint64_t *))dlsym(hcuda, "simgpu_busy_ns");
    if (!f) return -1;
    return f(ord, from, to, busy);
}

int cc_nvml_init(void)
{
    int (*f)(void) = (int (*)(void))dlsym(hnvml, "nvmlInit_v2");
    return f ? f() : -1;
}

int cc_nvml_util(int idx, unsigned *gpu)
{
    typedef struct nvmlDevice_st *dev_t_;
    int (*byidx)(unsigned, dev_t_ *) = (int (*)(unsigned, dev_t_ *))dlsym(hnvml, "nvmlDeviceGetHandleByIndex_v2");
    int (*util)(dev_t_, unsigned *) = (int (*)(dev_t_, unsigned *))dlsym(hnvml, "nvmlDeviceGetUtilizationRates");
    if (!byidx || !util) return -1;
    dev_t_ d;
    int r = byidx((unsigned)idx, &d);
    if (r) return r;
    unsigned u[2];
    r = util(d, u);
    *gpu = u[0];
    return r;
}

uint64_t cc_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* fork(2) from C: the child keeps every descriptor (the driver's too) and
 * only sleeps, never returning to Go (whose runtime does not survive fork). */
int cc_fork_hold(void)
{
    pid_t p = fork();
    if (p == 0)
        for (;;) pause();
    return (int)p;
}
