/* Test client for the NVML stand-in's process lists (lib/cudahook/nvmlprocs_test.go).
 * Linked with -lcuda against the simulated driver. It holds 64 MiB on device
 * 0 (so that it is one of the GPU's processes), then calls each of the ten
 * NVML process-listing entry points by name and prints, for each,
 * NAME_rc=<nvmlReturn_t> and NAME_pids=<pid,pid,...>; self=<its pid>. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nvml_abi.h"

int cuInit(unsigned int flags);
int cuDeviceGet(int *dev, int ordinal);
int cuCtxCreate_v2(void **ctx, unsigned int flags, int dev);
int cuMemAlloc_v2(unsigned long long *p, size_t bytes);

#define MAXP 64

typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned int *, void *);
typedef nvmlReturn_t (*util_fn)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *, unsigned long long);
typedef nvmlReturn_t (*detail_fn)(nvmlDevice_t, nvmlProcessDetailList_t *);

static void *sym(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);

    if (!f) {
        printf("error=no %s\n", name);
        exit(0);
    }
    return f;
}

static void print(const char *name, nvmlReturn_t rc, const void *buf, unsigned int n, size_t esz)
{
    printf("%s_rc=%d\n%s_pids=", name, (int)rc, name);
    for (unsigned int i = 0; rc == NVML_SUCCESS && i < n && i < MAXP; i++) {
        unsigned int pid;

        memcpy(&pid, (const char *)buf + i * esz, sizeof pid);
        printf("%s%u", i ? "," : "", pid);
    }
    printf("\n");
}

int main(void)
{
    static const struct {
        const char *name;
        size_t esz;
    } lists[] = {
        {"nvmlDeviceGetComputeRunningProcesses", sizeof(nvmlProcessInfo_v1_t)},
        {"nvmlDeviceGetComputeRunningProcesses_v2", sizeof(nvmlProcessInfo_t)},
        {"nvmlDeviceGetComputeRunningProcesses_v3", sizeof(nvmlProcessInfo_t)},
        {"nvmlDeviceGetGraphicsRunningProcesses", sizeof(nvmlProcessInfo_v1_t)},
        {"nvmlDeviceGetGraphicsRunningProcesses_v2", sizeof(nvmlProcessInfo_t)},
        {"nvmlDeviceGetGraphicsRunningProcesses_v3", sizeof(nvmlProcessInfo_t)},
        {"nvmlDeviceGetMPSComputeRunningProcesses", sizeof(nvmlProcessInfo_v1_t)},
        {"nvmlDeviceGetMPSComputeRunningProcesses_v2", sizeof(nvmlProcessInfo_t)},
        {"nvmlDeviceGetMPSComputeRunningProcesses_v3", sizeof(nvmlProcessInfo_t)},
    };
    static nvmlProcessDetail_v1_t details[MAXP];
    static nvmlProcessUtilizationSample_t util[MAXP];
    static char buf[MAXP * sizeof(nvmlProcessDetail_v1_t)];
    unsigned long long p = 0;
    void *ctx = NULL;
    nvmlDevice_t d = NULL;
    unsigned int n;
    int dev = 0;
    nvmlReturn_t rc;

    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuCtxCreate_v2(&ctx, 0, dev) || cuMemAlloc_v2(&p, 64u << 20)) {
        printf("error=cuda setup\n");
        return 0;
    }
    printf("self=%d\n", (int)getpid());
    if ((rc = ((nvmlReturn_t(*)(void))sym("nvmlInit_v2"))()) != NVML_SUCCESS ||
        (rc = ((nvmlReturn_t(*)(unsigned int, nvmlDevice_t *))sym("nvmlDeviceGetHandleByIndex_v2"))(0, &d)) !=
            NVML_SUCCESS) {
        printf("error=nvml setup %d\n", (int)rc);
        return 0;
    }
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        n = MAXP;
        memset(buf, 0, sizeof buf);
        rc = ((procs_fn)sym(lists[i].name))(d, &n, buf);
        print(lists[i].name, rc, buf, n, lists[i].esz);
    }
    n = MAXP;
    rc = ((util_fn)sym("nvmlDeviceGetProcessUtilization"))(d, util, &n, 0);
    print("nvmlDeviceGetProcessUtilization", rc, util, n, sizeof util[0]);
    nvmlProcessDetailList_t l = {.version = 1, .mode = 0, .numProcArrayEntries = MAXP, .procArray = details};
    rc = ((detail_fn)sym("nvmlDeviceGetRunningProcessDetailList"))(d, &l);
    print("nvmlDeviceGetRunningProcessDetailList", rc, details, l.numProcArrayEntries, sizeof details[0]);
    return 0;
}
