/* Test program for the memory routes (docs/memory-routes.md): every way the driver takes
 * device memory that is not an allocation call. Linked with -lcuda (the
 * simulated driver at build time, the stand-in preloaded at run time).
 * Usage: routes SCENARIO; prints "key=value" lines:
 *   rc_<step>=CUresult of the call that step makes
 *   used_<step>=bytes this process holds on device 0, read from the driver's
 *               own NVML (ROUTES_NVML=<path of the real libnvidia-ml>), the
 *               figure the host sees
 * Scenarios: heap stack fifo pending local module library library-ctx
 * library-launch library-other-ctx contexts-v1 contexts-v2 contexts-green v1destroy. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cuda_abi.h"
#include "nvml_abi.h"

CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxCreate(CUcontext *, unsigned, CUdevice);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxDestroy(CUcontext);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuDeviceGetDevResource(CUdevice, CUdevResource *, CUdevResourceType);
CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *, CUdevResource *, unsigned);
CUresult cuGreenCtxCreate(CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned);
CUresult cuGreenCtxDestroy(CUgreenCtx);
CUresult cuCtxSetLimit(CUlimit, size_t);
CUresult cuCtxGetLimit(size_t *, CUlimit);
CUresult cuCtxSynchronize(void);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleUnload(CUmodule);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuLibraryLoadData(CUlibrary *, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *, void **,
                           unsigned);
CUresult cuLibraryUnload(CUlibrary);
CUresult cuLibraryGetKernel(CUkernel *, CUlibrary, const char *);
CUresult cuKernelGetFunction(CUfunction *, CUkernel);
CUresult cuLibraryGetGlobal(CUdeviceptr *, size_t *, CUlibrary, const char *);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

static nvmlReturn_t (*nv_procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
static nvmlDevice_t nv_dev;

/* the driver's NVML, opened privately so that a preloaded stand-in cannot answer */
static void nvml_open(void)
{
    const char *path = getenv("ROUTES_NVML");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) : NULL;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *);

    if (!h) {
        fprintf(stderr, "routes: ROUTES_NVML=%s: %s\n", path ? path : "(unset)", dlerror());
        exit(2);
    }
    init = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
    byidx = (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nv_procs = (nvmlReturn_t(*)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *))dlsym(
        h, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!init || !byidx || !nv_procs || init() != NVML_SUCCESS || byidx(0, &nv_dev) != NVML_SUCCESS) {
        fprintf(stderr, "routes: NVML unusable\n");
        exit(2);
    }
}

static unsigned long long used_now(void)
{
    nvmlProcessInfo_t p[64];
    unsigned n = 64;
    if (nv_procs(nv_dev, &n, p) != NVML_SUCCESS)
        return 0;
    for (unsigned i = 0; i < n; i++)
        if (p[i].pid == (unsigned)getpid())
            return p[i].usedGpuMemory;
    return 0;
}

static void step(const char *name, CUresult r)
{
    printf("rc_%s=%d\nused_%s=%llu\n", name, (int)r, name, used_now());
    fflush(stdout);
}

static void must(const char *what, CUresult r)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "routes: %s: %d\n", what, (int)r);
        exit(1);
    }
}

static CUresult launch(CUfunction f)
{
    CUresult r = cuLaunchKernel(f, 132, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
    return r ? r : cuCtxSynchronize();
}

/* Sets limit l to big (which must cross the limit), then to fits (which must
 * not), then back to the default dflt. */
static void set_limit(CUlimit l, size_t big, size_t fits, size_t dflt)
{
    size_t v = 0;
    step("set_big", cuCtxSetLimit(l, big));
    must("cuCtxGetLimit", cuCtxGetLimit(&v, l));
    printf("value_after_big=%zu\n", v);
    step("set_fits", cuCtxSetLimit(l, fits));
    size_t fr = 0, tot = 0;
    must("cuMemGetInfo_v2", cuMemGetInfo_v2(&fr, &tot));
    printf("free_fits=%zu\n", fr);
    step("set_back", cuCtxSetLimit(l, dflt));
    must("cuMemGetInfo_v2", cuMemGetInfo_v2(&fr, &tot));
    printf("free_back=%zu\n", fr);
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    const char *sc = argc > 1 ? argv[1] : "";

    nvml_open();
    must("cuInit", cuInit(0));
    must("cuDeviceGet", cuDeviceGet(&dev, 0));
    if (strncmp(sc, "contexts-", 9) == 0 || strcmp(sc, "v1destroy") == 0) {
        int v1 = strcmp(sc, "contexts-v1") == 0, n = 0;
        CUresult r = CUDA_SUCCESS;
        CUcontext c[64];
        if (strcmp(sc, "v1destroy") == 0) {
            /* created by _v2, destroyed by the v1 export: the charge must go with it */
            for (int i = 0; i < 8; i++) {
                must("cuCtxCreate_v2", cuCtxCreate_v2(&c[0], 0, dev));
                must("cuCtxDestroy", cuCtxDestroy(c[0]));
            }
            size_t fr = 0, tot = 0;
            must("cuCtxCreate_v2", cuCtxCreate_v2(&c[0], 0, dev));
            must("cuMemGetInfo_v2", cuMemGetInfo_v2(&fr, &tot));
            printf("free=%zu\ntotal=%zu\n", fr, tot);
            step("after", cuCtxDestroy(c[0]));
            return 0;
        }
        if (strcmp(sc, "contexts-green") == 0) {
            CUdevResource res;
            CUdevResourceDesc desc;
            CUgreenCtx gc[64];
            must("cuDeviceGetDevResource", cuDeviceGetDevResource(dev, &res, CU_DEV_RESOURCE_TYPE_SM));
            must("cuDevResourceGenerateDesc", cuDevResourceGenerateDesc(&desc, &res, 1));
            while (n < 64 && (r = cuGreenCtxCreate(&gc[n], desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)) == CUDA_SUCCESS)
                n++;
            printf("contexts=%d\n", n);
            step("create", r);
            for (int i = 0; i < n; i++)
                must("cuGreenCtxDestroy", cuGreenCtxDestroy(gc[i]));
            step("destroyed", CUDA_SUCCESS);
            return 0;
        }
        while (n < 64 && (r = v1 ? cuCtxCreate(&c[n], 0, dev) : cuCtxCreate_v2(&c[n], 0, dev)) == CUDA_SUCCESS)
            n++;
        printf("contexts=%d\n", n);
        step("create", r);
        for (int i = 0; i < n; i++)
            must("cuCtxDestroy", v1 ? cuCtxDestroy(c[i]) : cuCtxDestroy_v2(c[i]));
        step("destroyed", CUDA_SUCCESS);
        return 0;
    }
    must("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
    must("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
    step("start", CUDA_SUCCESS);
    if (strcmp(sc, "heap") == 0) {
        set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * GiB, 256 * MiB, 8 * MiB);
    } else if (strcmp(sc, "stack") == 0) {
        set_limit(CU_LIMIT_STACK_SIZE, 8 << 10, 2 << 10,
                  1024); /* 132 SMs x 2048 threads: 1.8 GiB, 264 MiB above the default */
    } else if (strcmp(sc, "fifo") == 0) {
        set_limit(CU_LIMIT_PRINTF_FIFO_SIZE, 4 * GiB, 64 * MiB, 1 * MiB);
    } else if (strcmp(sc, "pending") == 0) {
        set_limit(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 1 << 21, 16384, 2048); /* 2 KiB a slot: 4 GiB, 28 MiB */
    } else if (strcmp(sc, "local") == 0) {
        CUmodule m;
        CUfunction shallow, deep, fits;
        size_t v = 0;
        must("cuModuleLoadData", cuModuleLoadData(&m, "shallow deep:local=8K fits:local=2K"));
        must("cuModuleGetFunction", cuModuleGetFunction(&shallow, m, "shallow"));
        step("shallow", launch(shallow));
        /* the stand-in grows the stack when the handle is handed out, the
         * driver at the launch: the first of the two crosses */
        CUresult r = cuModuleGetFunction(&deep, m, "deep");
        step("get_deep", r);
        if (r == CUDA_SUCCESS)
            step("deep", launch(deep));
        must("cuCtxGetLimit", cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
        printf("stack_after_deep=%zu\n", v);
        must("cuModuleGetFunction", cuModuleGetFunction(&fits, m, "fits"));
        step("fits", launch(fits));
        must("cuCtxGetLimit", cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
        printf("stack_after_fits=%zu\n", v);
    } else if (strcmp(sc, "module") == 0) {
        CUmodule big, small;
        step("load_big", cuModuleLoadData(&big, "k big=1792M"));
        step("load_small", cuModuleLoadData(&small, "k small=64M"));
        step("unload_small", cuModuleUnload(small));
    } else if (strcmp(sc, "library") == 0) {
        /* loaded and its kernel taken with no context current (nothing to
         * load then), first used in a context */
        CUlibrary lib;
        CUkernel k;
        CUfunction f;
        CUdeviceptr p;
        size_t n;
        must("cuCtxSetCurrent", cuCtxSetCurrent(NULL));
        step("load", cuLibraryLoadData(&lib, "k big=1792M", NULL, NULL, 0, NULL, NULL, 0));
        step("get_kernel", cuLibraryGetKernel(&k, lib, "k"));
        must("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
        step("get_function", cuKernelGetFunction(&f, k));
        step("get_global", cuLibraryGetGlobal(&p, &n, lib, "big"));
        step("unload", cuLibraryUnload(lib));
    } else if (strcmp(sc, "library-ctx") == 0) {
        /* loaded with a context current: under lazy loading the driver loads
         * it there at first use, the stand-in at the load */
        CUlibrary lib, small;
        CUkernel k;
        CUfunction f;
        CUresult r = cuLibraryLoadData(&lib, "k big=1792M", NULL, NULL, 0, NULL, NULL, 0);
        step("load", r);
        if (r == CUDA_SUCCESS) {
            step("get_kernel", r = cuLibraryGetKernel(&k, lib, "k"));
            if (r == CUDA_SUCCESS)
                step("get_function", cuKernelGetFunction(&f, k));
            must("cuLibraryUnload", cuLibraryUnload(lib));
        }
        must("cuLibraryLoadData", cuLibraryLoadData(&small, "k small=64M", NULL, NULL, 0, NULL, NULL, 0));
        step("small_kernel", cuLibraryGetKernel(&k, small, "k"));
        step("small_function", cuKernelGetFunction(&f, k));
        step("small_launch", launch(f));
        step("small_unload", cuLibraryUnload(small));
    } else if (strcmp(sc, "library-launch") == 0) {
        /* a kernel handle launched as it is (cudart 12+): the launch loads */
        CUlibrary lib;
        CUkernel k;
        must("cuCtxSetCurrent", cuCtxSetCurrent(NULL));
        must("cuLibraryLoadData", cuLibraryLoadData(&lib, "k big=1792M", NULL, NULL, 0, NULL, NULL, 0));
        must("cuLibraryGetKernel", cuLibraryGetKernel(&k, lib, "k"));
        must("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
        step("launch", launch((CUfunction)k));
        step("unload", cuLibraryUnload(lib));
    } else if (strcmp(sc, "library-other-ctx") == 0) {
        /* a kernel handle taken (and its library loaded) in one context, then
         * launched as it is in another, where the library was never used: that
         * launch loads it there (cudart keeps one handle for every device) */
        CUlibrary lib;
        CUkernel k;
        CUcontext other;
        must("cuLibraryLoadData", cuLibraryLoadData(&lib, "k mid=300M", NULL, NULL, 0, NULL, NULL, 0));
        step("get_kernel", cuLibraryGetKernel(&k, lib, "k"));
        step("launch_here", launch((CUfunction)k));
        must("cuCtxCreate_v2", cuCtxCreate_v2(&other, 0, dev));
        step("launch_other", launch((CUfunction)k));
        must("cuCtxDestroy_v2", cuCtxDestroy_v2(other));
        must("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
        step("launch_again", launch((CUfunction)k));
        step("unload", cuLibraryUnload(lib));
    } else {
        fprintf(stderr, "routes: unknown scenario %s\n", sc);
        return 2;
    }
    return 0;
}
