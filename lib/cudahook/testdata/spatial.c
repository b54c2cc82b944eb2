/* Test client of the spatial mode (lib/cudahook/spatial_test.go). Linked with
 * -lcuda against the simulated driver, run under LD_PRELOAD of the stand-in.
 * Usage: spatial [N]: cuInit; then what the process got on device 0 (MPS
 * client or not, SM count, the affinity of a context it creates with
 * cuCtxCreate_v2 and of one asking the whole GPU with cuCtxCreate_v3, the
 * percentage in its environment); then N launches of a 1 ms kernel on the
 * primary context. Prints key=value lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_abi.h"

CUresult cuInit(unsigned int);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGetAttribute(int *, CUdevice_attribute, CUdevice);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuCtxCreate_v3(CUcontext *, CUexecAffinityParam *, int, unsigned int, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuCtxGetExecAffinity(CUexecAffinityParam *, CUexecAffinityType);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuCtxSynchronize(void);

static long affinity(void)
{
    CUexecAffinityParam a;
    memset(&a, 0, sizeof a);
    CUresult r = cuCtxGetExecAffinity(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    return r ? -(long)r : (long)a.param.smCount.val;
}

int main(int argc, char **argv)
{
    CUdevice d;
    CUcontext c, prim;
    CUexecAffinityParam a;
    CUmodule m;
    CUfunction f;
    int v = -1, n = 0, launches = argc > 1 ? atoi(argv[1]) : 0;
    CUresult r = cuInit(0);

    printf("init=%d\n", (int)r);
    if (r) {
        printf("count_after=%d\n", (int)cuDeviceGetCount(&n));
        return 0;
    }
    cuDeviceGet(&d, 0);
    cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, d);
    printf("mps=%d\n", v);
    cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
    printf("sms=%d\n", v);
    printf("pct_env=%s\n",
           getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") ? getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") : "-");
    printf("pipe_env=%s\n", getenv("CUDA_MPS_PIPE_DIRECTORY") ? getenv("CUDA_MPS_PIPE_DIRECTORY") : "-");
    r = cuCtxCreate_v2(&c, 0, d);
    printf("v2=%d\n", (int)r);
    if (!r) {
        printf("v2_aff=%ld\n", affinity());
        cuCtxDestroy_v2(c);
    }
    memset(&a, 0, sizeof a);
    a.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    a.param.smCount.val = 132;
    r = cuCtxCreate_v3(&c, &a, 1, 0, d);
    printf("v3=%d\n", (int)r);
    if (!r) {
        printf("v3_aff=%ld\n", affinity());
        cuCtxDestroy_v2(c);
    }
    if (cuDevicePrimaryCtxRetain(&prim, d) || cuCtxSetCurrent(prim) || cuModuleLoadData(&m, "busy_1000us") ||
        cuModuleGetFunction(&f, m, "busy_1000us")) {
        printf("error=setup\n");
        return 1;
    }
    for (int i = 0; i < launches; i++)
        if ((r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL))) {
            printf("error=launch %d\n", (int)r);
            return 1;
        }
    printf("sync=%d\n", (int)cuCtxSynchronize());
    printf("launched=%d\n", launches);
    return 0;
}
