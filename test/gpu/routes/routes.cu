// Device-memory routes beside allocation calls (docs/memory-routes.md).
// Usage: routes SCENARIO [CUBIN]; prints "rc_<step>=<error name>" lines and holds
// its memory HOLD_S seconds (default 3) at the end so that a sampler on the
// host sees the steady figure. Scenarios:
//   heap     cudaDeviceSetLimit(MallocHeapSize, 8 GiB), then a kernel calling malloc
//   stack    cudaDeviceSetLimit(StackSize, 64 KiB), then a kernel on all SMs
//   fifo     cudaDeviceSetLimit(PrintfFifoSize, 6 GiB), then a kernel calling printf
//   pending  cudaDeviceSetLimit(DevRuntimePendingLaunchCount, 1M)
//   local    a kernel with a 48 KiB frame on all SMs, no limit set (grown at launch)
//   global   a 1.75 GiB __device__ array of this program (cudart, lazy loading)
//   global2  global, then the same kernel again in a second context (cuCtxCreate_v2):
//            cudart launches its one CUkernel handle there, which loads the array again
//   module   cuModuleLoad(CUBIN) of a module with a 1.75 GiB __device__ array
//   contexts 12 x cuCtxCreate_v2
//   ctxv1    12 x the v1 cuCtxCreate export, destroyed by the v1 cuCtxDestroy
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void rc(const char *step, cudaError_t e) { printf("rc_%s=%s\n", step, cudaGetErrorName(e)); fflush(stdout); }
static void rcd(const char *step, CUresult r)
{
    const char *n = "?";
    cuGetErrorName(r, &n);
    printf("rc_%s=%s\n", step, n);
    fflush(stdout);
}

__global__ void k_malloc(size_t each)
{
    char *p = (char *)malloc(each);
    if (p) { p[0] = 1; free(p); }
}
__global__ void k_plain(int *out) { if (out) out[threadIdx.x] = threadIdx.x; }
__global__ void k_printf() { if (threadIdx.x == 0 && blockIdx.x == 0) printf("hello from the device\n"); }
__global__ void k_frame(int *out, int n)
{
    volatile char buf[48 * 1024];
    for (int i = 0; i < n; i++) buf[(threadIdx.x * 131 + i) % sizeof buf] = (char)i;
    if (out) out[0] = buf[threadIdx.x % sizeof buf];
}
__device__ char big_global[1879048192ULL]; // 1.75 GiB
__global__ void k_global() { big_global[blockIdx.x * 4096ULL + threadIdx.x] = 1; }

static int sms(void)
{
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0);
    return n;
}

static void hold(void)
{
    const char *h = getenv("HOLD_S");
    sleep(h ? atoi(h) : 3);
}

int main(int argc, char **argv)
{
    const char *sc = argc > 1 ? argv[1] : "";
    if (!strcmp(sc, "heap")) {
        rc("set", cudaDeviceSetLimit(cudaLimitMallocHeapSize, 8ULL << 30));
        k_malloc<<<sms() * 4, 256>>>(1 << 20);
        rc("launch", cudaDeviceSynchronize());
    } else if (!strcmp(sc, "stack")) {
        rc("set", cudaDeviceSetLimit(cudaLimitStackSize, 64 << 10));
        k_plain<<<sms() * 8, 256>>>(NULL);
        rc("launch", cudaDeviceSynchronize());
    } else if (!strcmp(sc, "fifo")) {
        rc("set", cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 6ULL << 30));
        k_printf<<<1, 32>>>();
        rc("launch", cudaDeviceSynchronize());
    } else if (!strcmp(sc, "pending")) {
        rc("set", cudaDeviceSetLimit(cudaLimitDevRuntimePendingLaunchCount, 1 << 20));
        k_plain<<<1, 32>>>(NULL);
        rc("launch", cudaDeviceSynchronize());
    } else if (!strcmp(sc, "local")) {
        rc("init", cudaFree(0));
        k_frame<<<sms() * 8, 256>>>(NULL, 64);
        rc("launch", cudaGetLastError());
        rc("sync", cudaDeviceSynchronize());
    } else if (!strcmp(sc, "global")) {
        rc("init", cudaFree(0));
        k_global<<<1024, 256>>>();
        rc("launch", cudaGetLastError());
        rc("sync", cudaDeviceSynchronize());
    } else if (!strcmp(sc, "global2")) {
        typedef CUresult (*create_t)(CUcontext *, unsigned, CUdevice);
        create_t create = (create_t)dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "cuCtxCreate_v2");
        CUcontext other;
        if (!create) { printf("no cuCtxCreate_v2 export\n"); return 2; }
        rc("init", cudaFree(0));
        k_global<<<1024, 256>>>();
        rc("launch", cudaGetLastError());
        rc("sync", cudaDeviceSynchronize());
        rcd("ctx", create(&other, 0, 0)); // current from now on: cudart launches in it
        k_global<<<1024, 256>>>();
        rc("launch_other", cudaGetLastError());
        rc("sync_other", cudaDeviceSynchronize());
    } else if (!strcmp(sc, "module")) {
        CUcontext c;
        CUmodule m;
        CUfunction f;
        rc("init", cudaFree(0));
        cuCtxGetCurrent(&c);
        CUresult r = cuModuleLoad(&m, argc > 2 ? argv[2] : "big.cubin");
        rcd("load", r);
        if (r == CUDA_SUCCESS) {
            rcd("get_function", cuModuleGetFunction(&f, m, "touch"));
        }
    } else if (!strcmp(sc, "contexts") || !strcmp(sc, "ctxv1")) {
        typedef CUresult (*create_t)(CUcontext *, unsigned, CUdevice);
        typedef CUresult (*destroy_t)(CUcontext);
        int v1 = !strcmp(sc, "ctxv1"), n = 0;
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        create_t create = v1 ? (create_t)dlsym(h, "cuCtxCreate") : (create_t)dlsym(h, "cuCtxCreate_v2");
        destroy_t destroy = v1 ? (destroy_t)dlsym(h, "cuCtxDestroy") : (destroy_t)dlsym(h, "cuCtxDestroy_v2");
        CUcontext cs[12];
        CUdevice d;
        CUresult r = CUDA_SUCCESS;
        cuInit(0);
        cuDeviceGet(&d, 0);
        if (!create || !destroy) { printf("no %s export\n", v1 ? "v1" : "v2"); return 2; }
        while (n < 12 && (r = create(&cs[n], 0, d)) == CUDA_SUCCESS) n++;
        printf("contexts=%d\n", n);
        rcd("create", r);
        hold();
        for (int i = 0; i < n; i++) destroy(cs[i]);
        size_t fr = 0, tot = 0;
        cuInit(0);
        CUcontext c;
        create(&c, 0, d);
        cuMemGetInfo(&fr, &tot);
        printf("free_after_destroy_MiB=%zu\n", fr >> 20);
        destroy(c);
        return 0;
    } else {
        fprintf(stderr, "unknown scenario %s\n", sc);
        return 2;
    }
    hold();
    return 0;
}
