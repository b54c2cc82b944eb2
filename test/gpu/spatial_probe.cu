// What one process gets on a GPU shared through MPS, for test/gpu/spatial.sh:
//   spatial_probe info [late]  cuInit, MPS_ENABLED, SM count, execution affinity
//                              (primary context, v2 and v3 contexts), and the SM
//                              share by throughput: waves of spinning blocks
//                              ("late": sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100
//                              after cuInit, before any context)
//   spatial_probe loop SECS    spin kernels for SECS s; "survived N" or the error
//   spatial_probe fault        a kernel that writes to an illegal address
//   spatial_probe ctx N...     a context per SM count N (cuCtxCreate_v3): its
//                              affinity and its throughput (waves of spinning blocks)
// Built there: nvcc -O2 -arch=sm_90 -o spatial_probe spatial_probe.cu -lcuda -ldl
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__global__ void spin(long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while ((long long)(now - start) < ns);
}

__global__ void bad(int *p) { *(volatile int *)p = 1; }

typedef CUresult (*v3_t)(CUcontext *, CUexecAffinityParam *, int, unsigned, CUdevice);
typedef CUresult (*v2_t)(CUcontext *, unsigned, CUdevice);
typedef CUresult (*aff_t)(CUexecAffinityParam *, CUexecAffinityType);
typedef CUresult (*sup_t)(int *, CUexecAffinityType, CUdevice);

static void *sym(const char *n)
{
    void *p = dlsym(RTLD_DEFAULT, n);
    if (!p)
        printf("nosym_%s=1\n", n);
    return p;
}

static int ctx_sms(void)
{
    CUexecAffinityParam a;
    aff_t f = (aff_t)sym("cuCtxGetExecAffinity");
    memset(&a, 0, sizeof a);
    if (!f)
        return -1;
    CUresult r = f(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    return r == CUDA_SUCCESS ? (int)a.param.smCount.val : -(int)r;
}

// waves of 1024-thread blocks, 2 per SM of the whole GPU, each spinning 1 ms:
// 4 on the whole GPU, 8 on half of it
static double waves(int sms_full)
{
    const long long ns = 1000000;
    cudaEvent_t a, b;
    float ms = 0;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    spin<<<sms_full * 2, 1024>>>(ns); // warm
    cudaEventRecord(a);
    spin<<<sms_full * 2 * 4, 1024>>>(ns);
    cudaEventRecord(b);
    cudaError_t e = cudaEventSynchronize(b);
    if (e != cudaSuccess) {
        printf("waves_error=%d\n", (int)e);
        return -1;
    }
    cudaEventElapsedTime(&ms, a, b);
    return ms / 1.0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "info";
    CUdevice d;
    CUcontext prim, c;
    int v = 0;

    CUresult r = cuInit(0);
    printf("cuInit=%d\n", (int)r);
    if (r != CUDA_SUCCESS)
        return 2;
    cuDeviceGet(&d, 0);
    if (!strcmp(mode, "info")) {
        if (argc > 2 && !strcmp(argv[2], "late"))
            setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100", 1);
        r = cuDeviceGetAttribute(&v, (CUdevice_attribute)133, d);
        printf("mps_enabled=%d rc=%d\n", v, (int)r);
        cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
        printf("sm_count=%d\n", v);
        sup_t sup = (sup_t)sym("cuDeviceGetExecAffinitySupport");
        int s = -1;
        if (sup)
            printf("affinity_support=%d rc=%d\n", (sup(&s, CU_EXEC_AFFINITY_TYPE_SM_COUNT, d), s), 0);
        printf("env_pct=%s env_pipe=%s\n", getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") ?: "-",
               getenv("CUDA_MPS_PIPE_DIRECTORY") ?: "-");
        r = cuDevicePrimaryCtxRetain(&prim, d);
        printf("primary=%d\n", (int)r);
        if (r)
            return 3;
        cuCtxSetCurrent(prim);
        printf("primary_affinity=%d\n", ctx_sms());
        CUexecAffinityParam a;
        memset(&a, 0, sizeof a);
        a.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
        a.param.smCount.val = 132;
        v3_t v3 = (v3_t)sym("cuCtxCreate_v3");
        if (v3) {
            r = v3(&c, &a, 1, 0, d);
            printf("v3_132=%d affinity=%d\n", (int)r, r ? 0 : ctx_sms());
            if (!r)
                cuCtxDestroy(c);
        }
        v2_t v2 = (v2_t)sym("cuCtxCreate_v2");
        if (v2) {
            r = v2(&c, 0, d);
            printf("v2=%d affinity=%d\n", (int)r, r ? 0 : ctx_sms());
            if (!r)
                cuCtxDestroy(c);
        }
        cuCtxSetCurrent(prim);
        printf("waves_ms=%.2f\n", waves(132));
        return 0;
    }
    if (!strcmp(mode, "ctx")) { // contexts with an SM count each: what they get, by throughput too
        v3_t v3 = (v3_t)sym("cuCtxCreate_v3");
        for (int i = 2; v3 && i < argc; i++) {
            CUexecAffinityParam a;
            memset(&a, 0, sizeof a);
            a.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
            a.param.smCount.val = (unsigned)atoi(argv[i]);
            r = v3(&c, &a, 1, 0, d);
            printf("v3_%s=%d", argv[i], (int)r);
            if (!r) {
                printf(" affinity=%d", ctx_sms());
                printf(" waves_ms=%.2f", waves(132));
                cuCtxDestroy(c);
            }
            printf("\n");
        }
        return 0;
    }
    cuDevicePrimaryCtxRetain(&prim, d);
    cuCtxSetCurrent(prim);
    if (!strcmp(mode, "loop")) {
        double secs = argc > 2 ? atof(argv[2]) : 5;
        struct timespec t0, t;
        long n = 0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        printf("looping\n");
        fflush(stdout);
        for (;;) {
            spin<<<264, 1024>>>(2000000);
            cudaError_t e = cudaDeviceSynchronize();
            if (e != cudaSuccess) {
                printf("neighbour_error=%d (%s) after %ld kernels\n", (int)e, cudaGetErrorString(e), n);
                return 1;
            }
            n++;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 > secs)
                break;
        }
        printf("survived %ld kernels\n", n);
        return 0;
    }
    if (!strcmp(mode, "fault")) {
        bad<<<1, 1>>>((int *)0x10);
        cudaError_t e = cudaDeviceSynchronize();
        printf("fault=%d (%s)\n", (int)e, cudaGetErrorString(e));
        return 0;
    }
    return 1;
}
