/* Test client for lib/cudahook: reaches the driver by one route, chosen at
 * build time, as real programs do:
 *   -DROUTE_LINK      linked with -lcuda (DT_NEEDED libcuda.so.1)
 *   -DROUTE_DLSYM     dlopen("libcuda.so.1") + dlsym
 *   -DROUTE_PROCADDR  only cuGetProcAddress_v2 by name, everything else from it (cudart 12/13)
 * Usage: client SCENARIO [ARGS]; prints "key=value" lines the Go test reads.
 * CLIENT_DEVICE=N: the CUDA ordinal setup() makes current (default 0). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cuda_abi.h"

/* field, exported name, cuGetProcAddress base name, version */
#define FUNCS(X)                                                                                                       \
    X(Init, cuInit, cuInit, 2000, CUresult (*)(unsigned))                                                              \
    X(DeviceGet, cuDeviceGet, cuDeviceGet, 2000, CUresult (*)(CUdevice *, int))                                        \
    X(DeviceGetCount, cuDeviceGetCount, cuDeviceGetCount, 2000, CUresult (*)(int *))                                   \
    X(DeviceGetUuid, cuDeviceGetUuid_v2, cuDeviceGetUuid, 11040, CUresult (*)(CUuuid *, CUdevice))                     \
    X(PrimaryRetain, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, CUresult (*)(CUcontext *, CUdevice))    \
    X(PrimaryRelease, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, CUresult (*)(CUdevice))          \
    X(CtxSetCurrent, cuCtxSetCurrent, cuCtxSetCurrent, 4000, CUresult (*)(CUcontext))                                  \
    X(CtxSynchronize, cuCtxSynchronize, cuCtxSynchronize, 2000, CUresult (*)(void))                                    \
    X(MemGetInfo, cuMemGetInfo_v2, cuMemGetInfo, 3020, CUresult (*)(size_t *, size_t *))                               \
    X(DeviceTotalMem, cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, CUresult (*)(size_t *, CUdevice))                   \
    X(MemAlloc, cuMemAlloc_v2, cuMemAlloc, 3020, CUresult (*)(CUdeviceptr *, size_t))                                  \
    X(MemFree, cuMemFree_v2, cuMemFree, 3020, CUresult (*)(CUdeviceptr))                                               \
    X(MemAllocPitch, cuMemAllocPitch_v2, cuMemAllocPitch, 3020,                                                        \
      CUresult (*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned))                                                 \
    X(MemAllocManaged, cuMemAllocManaged, cuMemAllocManaged, 6000, CUresult (*)(CUdeviceptr *, size_t, unsigned))      \
    X(MemAllocAsync, cuMemAllocAsync, cuMemAllocAsync, 11020, CUresult (*)(CUdeviceptr *, size_t, CUstream))           \
    X(MemFreeAsync, cuMemFreeAsync, cuMemFreeAsync, 11020, CUresult (*)(CUdeviceptr, CUstream))                        \
    X(MemAllocFromPool, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020,                                       \
      CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))                                                     \
    X(DeviceGetMemPool, cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, CUresult (*)(CUmemoryPool *, CUdevice))         \
    X(PoolTrimTo, cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, CUresult (*)(CUmemoryPool, size_t))                         \
    X(MemCreate, cuMemCreate, cuMemCreate, 10020,                                                                      \
      CUresult (*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))           \
    X(MemRelease, cuMemRelease, cuMemRelease, 10020, CUresult (*)(CUmemGenericAllocationHandle))                       \
    X(MemAddressReserve, cuMemAddressReserve, cuMemAddressReserve, 10020,                                              \
      CUresult (*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))                                    \
    X(MemAddressFree, cuMemAddressFree, cuMemAddressFree, 10020, CUresult (*)(CUdeviceptr, size_t))                    \
    X(MemMap, cuMemMap, cuMemMap, 10020,                                                                               \
      CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))                     \
    X(MemUnmap, cuMemUnmap, cuMemUnmap, 10020, CUresult (*)(CUdeviceptr, size_t))                                      \
    X(MemRetain, cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000,                                      \
      CUresult (*)(CUmemGenericAllocationHandle *, void *))                                                            \
    X(CanAccessPeer, cuDeviceCanAccessPeer, cuDeviceCanAccessPeer, 4000, CUresult (*)(int *, CUdevice, CUdevice))      \
    X(EnablePeer, cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, 4000, CUresult (*)(CUcontext, unsigned))               \
    X(MemcpyPeer, cuMemcpyPeer, cuMemcpyPeer, 4000,                                                                    \
      CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t))                                            \
    X(MemcpyHtoD, cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, CUresult (*)(CUdeviceptr, const void *, size_t))                \
    X(MemcpyDtoH, cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, CUresult (*)(void *, CUdeviceptr, size_t))                      \
    X(ArrayCreate, cuArrayCreate_v2, cuArrayCreate, 3020, CUresult (*)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *))      \
    X(Array3DCreate, cuArray3DCreate_v2, cuArray3DCreate, 3020,                                                        \
      CUresult (*)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *))                                                        \
    X(ArrayDestroy, cuArrayDestroy, cuArrayDestroy, 2000, CUresult (*)(CUarray))                                       \
    X(MipmapCreate, cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000,                                              \
      CUresult (*)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned))                                     \
    X(MipmapDestroy, cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, CUresult (*)(CUmipmappedArray))           \
    X(StreamCreate, cuStreamCreate, cuStreamCreate, 2000, CUresult (*)(CUstream *, unsigned))                          \
    X(StreamSynchronize, cuStreamSynchronize, cuStreamSynchronize, 2000, CUresult (*)(CUstream))                       \
    X(BeginCapture, cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, CUresult (*)(CUstream, CUstreamCaptureMode)) \
    X(EndCapture, cuStreamEndCapture, cuStreamEndCapture, 10000, CUresult (*)(CUstream, CUgraph *))                    \
    X(GraphCreate, cuGraphCreate, cuGraphCreate, 10000, CUresult (*)(CUgraph *, unsigned))                             \
    X(GraphDestroy, cuGraphDestroy, cuGraphDestroy, 10000, CUresult (*)(CUgraph))                                      \
    X(GraphAddMemAlloc, cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040,                                         \
      CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *))                 \
    X(GraphAddMemFree, cuGraphAddMemFreeNode, cuGraphAddMemFreeNode, 11040,                                            \
      CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr))                                  \
    X(GraphInstantiate, cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040,                               \
      CUresult (*)(CUgraphExec *, CUgraph, unsigned long long))                                                        \
    X(GraphLaunch, cuGraphLaunch, cuGraphLaunch, 10000, CUresult (*)(CUgraphExec, CUstream))                           \
    X(GraphUpload, cuGraphUpload, cuGraphUpload, 11010, CUresult (*)(CUgraphExec, CUstream))                           \
    X(GraphExecDestroy, cuGraphExecDestroy, cuGraphExecDestroy, 10000, CUresult (*)(CUgraphExec))                      \
    X(GraphMemTrim, cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040, CUresult (*)(CUdevice))                         \
    X(GraphMemAttr, cuDeviceGetGraphMemAttribute, cuDeviceGetGraphMemAttribute, 11040,                                 \
      CUresult (*)(CUdevice, CUgraphMem_attribute, void *))

#define X(f, name, base, ver, type) __typeof__(type) f;
static struct {
    FUNCS(X)
} cu;
#undef X

#ifdef ROUTE_LINK
#define X(f, name, base, ver, type) CUresult name();
FUNCS(X)
#undef X
static void resolve(void)
{
#define X(f, name, base, ver, type) cu.f = (type)name;
    FUNCS(X)
#undef X
}
#elif defined(ROUTE_DLSYM)
static void resolve(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        printf("error=dlopen %s\n", dlerror());
        exit(3);
    }
#define X(f, name, base, ver, type) cu.f = (type)dlsym(h, #name);
    FUNCS(X)
#undef X
}
#elif defined(ROUTE_PROCADDR)
static CUresult procaddr_rc;
static void resolve(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    CUdriverProcAddressQueryResult st;
    if (!h || !(gpa = (__typeof__(gpa))dlsym(h, "cuGetProcAddress_v2"))) {
        printf("error=no cuGetProcAddress_v2\n");
        exit(3);
    }
    /* as cudart does: ask for the base name at the toolkit's version */
    procaddr_rc = gpa("cuGetProcAddress", (void **)&gpa, 13000, 0, &st);
    printf("procaddr=%d\n", procaddr_rc);
    if (procaddr_rc != CUDA_SUCCESS)
        return;
#define X(f, name, base, ver, type)                                                                                    \
    if (gpa(#base, (void **)&cu.f, 13000, 0, &st) != CUDA_SUCCESS)                                                     \
        cu.f = NULL;
    FUNCS(X)
#undef X
}
#else
#error "pick a ROUTE_"
#endif

#define MiB (1024ull * 1024)
static CUdevice dev;

static void setup(void)
{
    CUcontext ctx;
    CUresult r;
    const char *ord = getenv("CLIENT_DEVICE");
    if ((r = cu.Init(0)) || (r = cu.DeviceGet(&dev, ord ? atoi(ord) : 0)) || (r = cu.PrimaryRetain(&ctx, dev)) ||
        (r = cu.CtxSetCurrent(ctx))) {
        printf("error=setup %d\n", r);
        exit(3);
    }
}

static void info(const char *tag)
{
    size_t f = 0, t = 0, tm = 0;
    CUresult r1 = cu.MemGetInfo(&f, &t), r2 = cu.DeviceTotalMem(&tm, dev);
    printf("%s_rc=%d,%d\n%s_free=%zu\n%s_total=%zu\n%s_devtotal=%zu\n", tag, r1, r2, tag, f, tag, t, tag, tm);
}

/* one allocation API: alloc(size) -> handle, free(handle) */
struct api {
    const char *name;
    CUresult (*alloc)(size_t, uint64_t *);
    CUresult (*free)(uint64_t);
};

static CUresult a_alloc(size_t n, uint64_t *h) { return cu.MemAlloc((CUdeviceptr *)h, n); }
static CUresult f_alloc(uint64_t h) { return cu.MemFree(h); }
static CUresult a_pitch(size_t n, uint64_t *h)
{
    size_t pitch;
    return cu.MemAllocPitch((CUdeviceptr *)h, &pitch, 1000, n / 1000, 4); /* pitch rounds up rows */
}
static CUresult a_managed(size_t n, uint64_t *h)
{
    return cu.MemAllocManaged((CUdeviceptr *)h, n, CU_MEM_ATTACH_GLOBAL);
}
static CUresult a_async(size_t n, uint64_t *h)
{
    CUresult r = cu.MemAllocAsync((CUdeviceptr *)h, n, NULL);
    return r ? r : cu.CtxSynchronize();
}
static CUresult f_async(uint64_t h)
{
    CUmemoryPool p;
    CUresult r = cu.MemFreeAsync(h, NULL);
    if (r)
        return r;
    cu.CtxSynchronize();
    /* give the memory back to the device, as a program must for others to use it */
    if (cu.DeviceGetMemPool(&p, dev) == CUDA_SUCCESS)
        cu.PoolTrimTo(p, 0);
    return CUDA_SUCCESS;
}
static CUresult a_pool(size_t n, uint64_t *h)
{
    CUmemoryPool p;
    CUresult r = cu.DeviceGetMemPool(&p, dev);
    if (r)
        return r;
    r = cu.MemAllocFromPool((CUdeviceptr *)h, n, p, NULL);
    return r ? r : cu.CtxSynchronize();
}
static CUresult a_vmm(size_t n, uint64_t *h)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return cu.MemCreate((CUmemGenericAllocationHandle *)h, n, &prop, 0);
}
static CUresult f_vmm(uint64_t h) { return cu.MemRelease(h); }
static CUresult a_array(size_t n, uint64_t *h)
{
    CUDA_ARRAY_DESCRIPTOR d = {4096, n / (4096 * 4), CU_AD_FORMAT_FLOAT, 1};
    return cu.ArrayCreate((CUarray *)h, &d);
}
static CUresult a_array3d(size_t n, uint64_t *h)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {1024, 1024, n / (1024 * 1024 * 4), CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    return cu.Array3DCreate((CUarray *)h, &d);
}
static CUresult f_array(uint64_t h) { return cu.ArrayDestroy((CUarray)(uintptr_t)h); }
static CUresult a_mipmap(size_t n, uint64_t *h)
{
    /* one level: exactly the base size */
    CUDA_ARRAY3D_DESCRIPTOR d = {4096, n / (4096 * 4), 0, CU_AD_FORMAT_FLOAT, 1, 0};
    return cu.MipmapCreate((CUmipmappedArray *)h, &d, 1);
}
static CUresult f_mipmap(uint64_t h) { return cu.MipmapDestroy((CUmipmappedArray)(uintptr_t)h); }

static const struct api apis[] = {
    {"alloc", a_alloc, f_alloc}, {"pitch", a_pitch, f_alloc},     {"managed", a_managed, f_alloc},
    {"async", a_async, f_async}, {"pool", a_pool, f_async},       {"vmm", a_vmm, f_vmm},
    {"array", a_array, f_array}, {"array3d", a_array3d, f_array}, {"mipmap", a_mipmap, f_mipmap},
};

static const struct api *api_named(const char *name)
{
    for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++)
        if (strcmp(apis[i].name, name) == 0)
            return &apis[i];
    printf("error=unknown api %s\n", name);
    return NULL;
}

/* allocate chunks until refused; returns bytes and the refusing error */
static size_t fill(const struct api *a, size_t chunk, uint64_t *hs, int max, int *n, CUresult *err)
{
    size_t total = 0;
    *n = 0;
    *err = CUDA_SUCCESS;
    while (*n < max) {
        CUresult r = a->alloc(chunk, &hs[*n]);
        if (r) {
            *err = r;
            break;
        }
        (*n)++;
        total += chunk;
    }
    return total;
}

static int scenario_fill(const char *name, size_t chunk)
{
    static uint64_t hs[4096];
    const struct api *a = api_named(name);
    CUresult err;
    int n, fails = 0;
    size_t got;

    if (!a)
        return 2;
    info("before");
    got = fill(a, chunk, hs, 4096, &n, &err);
    printf("first_bytes=%zu\nfirst_err=%d\n", got, err);
    info("full");
    for (int i = 0; i < n; i++)
        if (a->free(hs[i]) != CUDA_SUCCESS)
            fails++;
    printf("free_failures=%d\n", fails);
    info("freed");
    got = fill(a, chunk, hs, 4096, &n, &err);
    printf("second_bytes=%zu\nsecond_err=%d\n", got, err);
    for (int i = 0; i < n; i++)
        a->free(hs[i]);
    info("end");
    return 0;
}

/* allocates chunks until refused or up to max bytes ("free": what
 * cuMemGetInfo calls free, as an allocator that sizes itself from it does),
 * timing each; then holds them until killed ("hold") or exits ("exit").
 * Background processes of a shell have no stdin to wait on. */
static int scenario_grab(const char *name, size_t chunk, const char *max_s, const char *then)
{
    static uint64_t hs[4096];
    const struct api *a = api_named(name);
    size_t got = 0, max = 0, f = 0, t = 0;
    long long worst = 0, ms;
    struct timespec t0, t1;
    CUresult r = CUDA_SUCCESS;
    int n = 0;

    if (!a)
        return 2;
    cu.MemGetInfo(&f, &t);
    max = strcmp(max_s, "free") == 0 ? f : (size_t)strtoull(max_s, NULL, 0) * MiB;
    printf("grab_start_free=%zu\ngrab_max=%zu\n", f, max);
    while (n < 4096 && (max == 0 || got + chunk <= max)) {
        if (n && getenv("GRAB_PAUSE_MS")) /* a framework's pace: vgpu node's rounds see every step */
            usleep((useconds_t)atoi(getenv("GRAB_PAUSE_MS")) * 1000);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        r = a->alloc(chunk, &hs[n]);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms = (long long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
        if (r)
            break;
        worst = ms > worst ? ms : worst;
        n++;
        got += chunk;
    }
    printf("grab_err=%d\ngrab_worst_ms=%lld\ngrab_bytes=%zu\n", r, worst, got);
    fflush(stdout);
    if (strcmp(then, "hold") == 0)
        for (;;)
            pause();
    return 0;
}

/* one allocation through one api, timed; held until stdin closes */
static int scenario_one(const char *name, size_t bytes)
{
    const struct api *a = api_named(name);
    struct timespec t0, t1;
    uint64_t h = 0;
    CUresult r;
    char c;

    if (!a)
        return 2;
    printf("one_start=1\n");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r = a->alloc(bytes, &h);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("one_rc=%d\none_ms=%lld\n", r,
           (long long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));
    while (read(0, &c, 1) > 0)
        ;
    if (r == CUDA_SUCCESS)
        a->free(h);
    return 0;
}

static int scenario_fork(void)
{
    CUdeviceptr p, q;
    int st;
    pid_t pid;

    if (cu.MemAlloc(&p, 1024 * MiB)) {
        printf("error=parent alloc\n");
        return 1;
    }
    info("parent");
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        CUresult r;
        /* a fork child starts its own CUDA life */
        setup();
        r = cu.MemAlloc(&q, 1024 * MiB);
        printf("child_alloc=%d\n", r);
        info("child");
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, &st, 0);
    info("after_child");
    cu.MemFree(p);
    info("parent_freed");
    return 0;
}

struct tharg {
    int iters;
    size_t size;
    int errors;
};

static void *worker(void *v)
{
    struct tharg *a = v;
    CUcontext ctx;
    cu.PrimaryRetain(&ctx, dev);
    cu.CtxSetCurrent(ctx);
    for (int i = 0; i < a->iters; i++) {
        CUdeviceptr p[4];
        for (int j = 0; j < 4; j++)
            if (cu.MemAlloc(&p[j], a->size))
                p[j] = 0, a->errors++;
        for (int j = 0; j < 4; j++)
            if (p[j] && cu.MemFree(p[j]))
                a->errors++;
    }
    return NULL;
}

static int scenario_threads(int nthreads)
{
    pthread_t t[64];
    struct tharg a[64];
    int errors = 0;

    info("before");
    for (int i = 0; i < nthreads; i++) {
        a[i] = (struct tharg){200, (size_t)(i + 1) * MiB, 0};
        pthread_create(&t[i], NULL, worker, &a[i]);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(t[i], NULL);
        errors += a[i].errors;
    }
    printf("thread_errors=%d\n", errors);
    info("after");
    return 0;
}

/* allocate and hold: keeps the bytes until stdin closes (multi-process tests) */
static int scenario_hold(size_t bytes)
{
    CUdeviceptr p;
    char c;
    printf("hold_rc=%d\n", cu.MemAlloc(&p, bytes));
    info("hold");
    fflush(stdout);
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}

/* allocate, write a pattern at both ends, hold until stdin closes, then
 * read the pattern back: its contents must survive a suspension */
static int scenario_pattern(size_t bytes)
{
    CUdeviceptr p;
    char c;
    size_t n = bytes < 64 * MiB ? bytes : 64 * MiB;
    unsigned char *want = malloc(n), *got = malloc(n);
    if (!want || !got)
        return 1;
    CUresult r = cu.MemAlloc(&p, bytes);
    printf("pattern_alloc=%d\n", r);
    if (r)
        return 1;
    for (size_t i = 0; i < n; i++)
        want[i] = (unsigned char)(i * 131 + 7);
    r = cu.MemcpyHtoD(p, want, n);
    if (!r)
        r = cu.MemcpyHtoD(p + bytes - n, want, n);
    printf("pattern_written=%d\n", r);
    fflush(stdout);
    while (read(0, &c, 1) > 0)
        ;
    int ok = !r;
    for (int end = 0; end < 2 && ok; end++) {
        memset(got, 0, n);
        ok = cu.MemcpyDtoH(got, end ? p + bytes - n : p, n) == CUDA_SUCCESS && memcmp(got, want, n) == 0;
    }
    printf("pattern_ok=%d\n", ok);
    return ok ? 0 : 1;
}

/* a pointer the library never saw (allocated by the driver behind our back) */
static int scenario_unknown_free(const char *real_path)
{
    void *h = dlopen(real_path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    CUresult (*ralloc)(CUdeviceptr *, size_t), (*rinfo)(size_t *, size_t *);
    CUdeviceptr p;
    size_t f1, f2, f3, t;

    if (!h) {
        printf("error=%s\n", dlerror());
        return 1;
    }
    ralloc = (__typeof__(ralloc))dlsym(h, "cuMemAlloc_v2");
    rinfo = (__typeof__(rinfo))dlsym(h, "cuMemGetInfo_v2");
    rinfo(&f1, &t);
    printf("real_alloc=%d\n", ralloc(&p, 512 * MiB));
    rinfo(&f2, &t);
    printf("unknown_free=%d\n", cu.MemFree(p));
    rinfo(&f3, &t);
    printf("real_free_before=%zu\nreal_free_alloc=%zu\nreal_free_after=%zu\n", f1, f2, f3);
    printf("double_free=%d\n", cu.MemFree(p));
    return 0;
}

/* every CUDA ordinal this process sees: UUID and total memory */
static int scenario_devices(void)
{
    int n = 0;
    CUresult rc = cu.DeviceGetCount(&n);
    printf("count_rc=%d\ncount=%d\n", rc, n);
    for (int i = 0; i < n; i++) {
        CUdevice d;
        CUuuid u;
        size_t tm = 0;
        const unsigned char *b = (const unsigned char *)u.bytes;
        CUresult r = cu.DeviceGet(&d, i);
        if (!r)
            r = cu.DeviceGetUuid(&u, d);
        if (!r)
            r = cu.DeviceTotalMem(&tm, d);
        printf("dev%d_rc=%d\n", i, r);
        if (!r)
            printf("dev%d_uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\ndev%d_total=%"
                   "zu\n",
                   i, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                   b[15], i, tm);
    }
    return 0;
}

/* graph memory nodes: counted from the launch (or upload) that maps them until
 * a trim; a node or launch that would pass the limit is refused; at every step
 * the library's count (limit - free) is printed beside the driver's own free
 * memory (the real library, opened behind the stand-in's back). */
static CUresult (*real_info)(size_t *, size_t *);

static void gstep(const char *tag)
{
    size_t f = 0, t = 0, rf = 0, rt = 0;
    cuuint64_t res = 0;
    cu.MemGetInfo(&f, &t);
    real_info(&rf, &rt);
    cu.GraphMemAttr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &res);
    printf("%s_free=%zu\n%s_total=%zu\n%s_real_free=%zu\n%s_real_total=%zu\n%s_graph_reserved=%llu\n", tag, f, tag, t,
           tag, rf, tag, rt, tag, (unsigned long long)res);
}

/* a graph that allocates size bytes and, with_free, frees them again */
static CUresult graph_alloc(CUgraph *g, size_t size, int with_free)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    CUgraphNode a, f;
    CUresult r;

    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = size;
    if ((r = cu.GraphCreate(g, 0)) || (r = cu.GraphAddMemAlloc(&a, *g, NULL, 0, &p)))
        return r;
    return with_free ? cu.GraphAddMemFree(&f, *g, &a, 1, p.dptr) : CUDA_SUCCESS;
}

static int scenario_graphmem(const char *real_path)
{
    void *h = dlopen(real_path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    CUgraph ga, gb, gc, gover;
    CUgraphExec a, b, c;
    CUdeviceptr plain, pc;
    CUstream s;
    size_t f, t;

    if (!h || !(real_info = (__typeof__(real_info))dlsym(h, "cuMemGetInfo_v2"))) {
        printf("error=%s\n", dlerror());
        return 1;
    }
    gstep("start");
    /* A: 512 MiB allocated and freed inside the graph */
    printf("a_add=%d\n", graph_alloc(&ga, 512 * MiB, 1));
    printf("a_inst=%d\n", cu.GraphInstantiate(&a, ga, 0));
    gstep("a_inst");
    printf("a_launch=%d\n", cu.GraphLaunch(a, NULL));
    cu.CtxSynchronize();
    gstep("a_launch");
    printf("a_relaunch=%d\n", cu.GraphLaunch(a, NULL));
    cu.CtxSynchronize();
    gstep("a_relaunch");
    printf("a_trim=%d\n", cu.GraphMemTrim(dev));
    gstep("a_trim");
    /* a node that cannot fit beside what the container holds: refused at once */
    cu.MemGetInfo(&f, &t);
    printf("over_add=%d\n", graph_alloc(&gover, f + 2 * MiB, 1));
    gstep("over");
    printf("a_upload=%d\n", cu.GraphUpload(a, NULL));
    gstep("a_upload");
    /* B: 1 GiB fits when it is added, not when it is launched beside 800 MiB */
    printf("b_add=%d\n", graph_alloc(&gb, 1024 * MiB, 1));
    printf("b_inst=%d\n", cu.GraphInstantiate(&b, gb, 0));
    printf("plain_alloc=%d\n", cu.MemAlloc(&plain, 800 * MiB));
    gstep("plain");
    printf("b_launch_over=%d\n", cu.GraphLaunch(b, NULL));
    gstep("b_refused");
    printf("plain_freed=%d\n", cu.MemFree(plain));
    printf("b_launch=%d\n", cu.GraphLaunch(b, NULL));
    cu.CtxSynchronize();
    gstep("b_launch");
    /* C: captured stream-ordered allocation of 256 MiB */
    cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING);
    printf("c_begin=%d\n", cu.BeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    printf("c_alloc=%d\n", cu.MemAllocAsync(&pc, 256 * MiB, s));
    printf("c_free=%d\n", cu.MemFreeAsync(pc, s));
    printf("c_end=%d\n", cu.EndCapture(s, &gc));
    printf("c_inst=%d\n", cu.GraphInstantiate(&c, gc, 0));
    gstep("c_inst");
    printf("c_launch=%d\n", cu.GraphLaunch(c, s));
    cu.StreamSynchronize(s);
    gstep("c_launch");
    /* destroyed execs: the driver decides when their memory goes (here: at the trim) */
    printf("destroy=%d,%d,%d\n", cu.GraphExecDestroy(a), cu.GraphExecDestroy(b), cu.GraphExecDestroy(c));
    gstep("destroyed");
    printf("end_trim=%d\n", cu.GraphMemTrim(dev));
    cu.GraphDestroy(ga);
    cu.GraphDestroy(gb);
    cu.GraphDestroy(gc);
    gstep("end");
    return 0;
}

/* Peer access and copies between CUDA ordinals 0 and 1: N MiB on each,
 * a pattern copied 0 -> 1 and back with cuMemcpyPeer; each device's free
 * memory as the program sees it at every step. */
static int scenario_peer(size_t n)
{
    CUdevice d[2];
    CUcontext c[2];
    CUdeviceptr p[2];
    size_t f, t;
    int can = -1, ok = 1;
    unsigned char *buf = malloc(n);
    for (int i = 0; i < 2; i++)
        if (cu.DeviceGet(&d[i], i) || cu.PrimaryRetain(&c[i], d[i])) {
            printf("error=device %d\n", i);
            return 3;
        }
#define FREES(tag)                                                                                                     \
    for (int i = 0; i < 2; i++) {                                                                                      \
        cu.CtxSetCurrent(c[i]);                                                                                        \
        f = t = 0;                                                                                                     \
        cu.MemGetInfo(&f, &t);                                                                                         \
        printf("%s_free%d=%zu\n%s_total%d=%zu\n", tag, i, f, tag, i, t);                                               \
    }
    printf("can_access=%d,%d\n", cu.CanAccessPeer(&can, d[0], d[1]), can);
    cu.CtxSetCurrent(c[0]);
    printf("enable_peer=%d\n", cu.EnablePeer(c[1], 0));
    FREES("before");
    for (int i = 0; i < 2; i++) {
        cu.CtxSetCurrent(c[i]);
        printf("alloc%d=%d\n", i, cu.MemAlloc(&p[i], n));
    }
    FREES("alloc");
    for (size_t k = 0; k < n; k++)
        buf[k] = (unsigned char)(k * 7 + 1);
    cu.CtxSetCurrent(c[0]);
    printf("htod=%d\n", cu.MemcpyHtoD(p[0], buf, n));
    printf("peer01=%d\n", cu.MemcpyPeer(p[1], c[1], p[0], c[0], n));
    cu.CtxSetCurrent(c[1]);
    printf("peer10=%d\n", cu.MemcpyPeer(p[0], c[0], p[1], c[1], n));
    memset(buf, 0, n);
    cu.CtxSetCurrent(c[0]);
    printf("dtoh=%d\n", cu.MemcpyDtoH(buf, p[0], n));
    for (size_t k = 0; k < n; k++)
        if (buf[k] != (unsigned char)(k * 7 + 1))
            ok = 0;
    printf("copy_ok=%d\n", ok);
    FREES("copied");
    for (int i = 0; i < 2; i++) {
        cu.CtxSetCurrent(c[i]);
        cu.MemFree(p[i]);
    }
    FREES("freed");
#undef FREES
    free(buf);
    return 0;
}

/* VMM memory outlives its handle while mapped (the driver frees it when
 * the last handle and the last mapping are gone). MODE:
 *   release   create, map, release the handle, then unmap
 *   retain    create, map, retain from the address, release twice, unmap
 *             (NCCL's free: retain, release, unmap, release)
 * Free memory at each step. */
static int scenario_vmmmap(const char *mode, size_t n)
{
    CUmemGenericAllocationHandle h, h2;
    CUdeviceptr va;
    CUmemAllocationProp prop;
    size_t f, t;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
#define STEP(tag, call)                                                                                                \
    do {                                                                                                               \
        CUresult r_ = (call);                                                                                          \
        f = t = 0;                                                                                                     \
        cu.MemGetInfo(&f, &t);                                                                                         \
        printf("%s=%d\n%s_free=%zu\n", tag, r_, tag, f);                                                               \
    } while (0)
    info("before");
    STEP("create", cu.MemCreate(&h, n, &prop, 0));
    STEP("reserve", cu.MemAddressReserve(&va, n, 0, 0, 0));
    STEP("map", cu.MemMap(va, n, 0, h, 0));
    if (strcmp(mode, "retain") == 0) {
        STEP("retain", cu.MemRetain(&h2, (void *)(uintptr_t)va));
        STEP("release1", cu.MemRelease(h2));
        STEP("unmap", cu.MemUnmap(va, n));
        STEP("release2", cu.MemRelease(h));
    } else {
        STEP("release", cu.MemRelease(h));
        STEP("unmap", cu.MemUnmap(va, n));
    }
    STEP("addrfree", cu.MemAddressFree(va, n));
#undef STEP
    return 0;
}

static int scenario_closed(void)
{
    int n = -1;
    CUdeviceptr p;
    size_t f, t;
    printf("init=%d\n", cu.Init ? cu.Init(0) : -1);
    printf("count=%d\n", cu.DeviceGetCount ? cu.DeviceGetCount(&n) : -1);
    printf("alloc=%d\n", cu.MemAlloc ? cu.MemAlloc(&p, 1) : -1);
    printf("meminfo=%d\n", cu.MemGetInfo ? cu.MemGetInfo(&f, &t) : -1);
    printf("sync=%d\n", cu.CtxSynchronize ? cu.CtxSynchronize() : -1);
    return 0;
}

int main(int argc, char **argv)
{
    const char *s = argc > 1 ? argv[1] : "info";

    setvbuf(stdout, NULL, _IOLBF, 0);
    resolve();
    if (strcmp(s, "closed") == 0)
        return scenario_closed();
    setup();
    if (strcmp(s, "info") == 0) {
        info("now");
        return 0;
    }
    if (strcmp(s, "devices") == 0)
        return scenario_devices();
    if (strcmp(s, "fill") == 0 && argc > 3)
        return scenario_fill(argv[2], (size_t)strtoull(argv[3], NULL, 0) * MiB);
    if (strcmp(s, "one") == 0 && argc > 3)
        return scenario_one(argv[2], (size_t)strtoull(argv[3], NULL, 0) * MiB);
    if (strcmp(s, "grab") == 0 && argc > 5)
        return scenario_grab(argv[2], (size_t)strtoull(argv[3], NULL, 0) * MiB, argv[4], argv[5]);
    if (strcmp(s, "fork") == 0)
        return scenario_fork();
    if (strcmp(s, "threads") == 0)
        return scenario_threads(argc > 2 ? atoi(argv[2]) : 32);
    if (strcmp(s, "hold") == 0 && argc > 2)
        return scenario_hold((size_t)strtoull(argv[2], NULL, 0) * MiB);
    if (strcmp(s, "pattern") == 0 && argc > 2)
        return scenario_pattern((size_t)strtoull(argv[2], NULL, 0) * MiB);
    if (strcmp(s, "unknown-free") == 0 && argc > 2)
        return scenario_unknown_free(argv[2]);
    if (strcmp(s, "peer") == 0 && argc > 2)
        return scenario_peer((size_t)strtoull(argv[2], NULL, 0) * MiB);
    if (strcmp(s, "vmmmap") == 0 && argc > 3)
        return scenario_vmmmap(argv[2], (size_t)strtoull(argv[3], NULL, 0) * MiB);
    if (strcmp(s, "graphmem") == 0 && argc > 2)
        return scenario_graphmem(argv[2]);
    if (strcmp(s, "legacy") == 0) {
        /* the 32-bit v1 entry point, as an old binary linked it */
        CUresult (*legacy)(CUdeviceptr_v1 *, unsigned) = (__typeof__(legacy))dlsym(RTLD_DEFAULT, "cuMemAlloc");
        CUdeviceptr_v1 p;
        printf("legacy_alloc=%d\n", legacy ? legacy(&p, 1 << 20) : -1);
        return 0;
    }
    printf("error=unknown scenario %s\n", s);
    return 2;
}
