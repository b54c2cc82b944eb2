/* Test client for the compute limit (lib/cudahook/compute_test.go). Linked with
 * -lcuda against the simulated driver, run under LD_PRELOAD of the stand-in.
 *
 * Usage: compute MODE; after its setup it prints "ready" and reads
 * "START_NS END_NS" from stdin, then
 *   launches simulated kernels in a loop until END_NS (CLOCK_MONOTONIC) and
 *   counts those whose launch call returned within [START_NS, END_NS). At most
 *   DEPTH launches are in flight (an event after each; the one DEPTH back is
 *   waited for), so an unlimited run keeps the device fed without queueing
 *   seconds ahead, even when this process is scheduled late. One launch is
 *   2 ms of device time in every mode.
 * MODE:
 *   kernel     cuLaunchKernel on a created stream
 *   ex         cuLaunchKernelEx on a created stream
 *   coop       cuLaunchCooperativeKernel on a created stream
 *   ptsz       cuLaunchKernel_ptsz on stream 0 (the per-thread default stream)
 *   procaddr   cuLaunchKernel from cuGetProcAddress_v2(PER_THREAD_DEFAULT_STREAM), stream 0
 *   graph      cuGraphLaunch of a captured graph of two 1 ms kernels
 *   graph_ptsz cuGraphLaunch_ptsz of that graph on stream 0
 *   multi      cuLaunchCooperativeKernelMultiDevice on devices 0 and 1
 *   mixed      cuLaunchKernel, 0.5 ms and 3.5 ms kernels by turns on two streams
 *              (2 ms a launch on average; estimates are wrong every time)
 *   tiny       cuLaunchKernel, 10 us and 30 us kernels by turns (20 us a launch on average)
 *   skewed     cuLaunchKernel, 800 kernels of 30 us then two of 100 ms, on one stream:
 *              279 us a launch on average, what one estimate per device makes
 *              of a training step (mostly short kernels, a few long GEMMs)
 *   threads    cuLaunchKernel from 4 threads, each on its own stream
 *   contexts   cuLaunchKernel in a new context every 25 launches: created and
 *              destroyed (cuCtxCreate_v2/cuCtxDestroy_v2), or the primary one
 *              retained and released until inactive, by turns; the last
 *              launches of each are still running when the context goes
 *   capture    kernel, while a second thread captures (GLOBAL mode) two launches
 *              into a graph every 3 ms: the stand-in's own event calls must not
 *              break those captures (the main thread stays in GLOBAL mode but
 *              for its own fences)
 *   starve     kernel, plus a second thread that times cuStreamQuery,
 *              cuEventRecord+cuEventQuery and cuStreamSynchronize meanwhile
 *   idle       kernel, then cuCtxSynchronize and 1.2 s without launching, by
 *              turns: each launch is measured only after that pause
 *   latency [GAP_US [N]]  N (1) 1 ms kernels (cuLaunchKernel, then
 *              cuStreamSynchronize), then GAP_US (8000) without: a light
 *              tenant's requests, or with N > 1 a server's bursts; prints the
 *              first launch-to-done
 *              times within the window (lat_n, lat_p50_ns, lat_p90_ns,
 *              lat_p99_ns, lat_max_ns)
 *   matrix US N  cuLaunchKernel of a US-microsecond kernel on N streams by turns;
 *              matrix US graph: cuGraphLaunch of a captured graph of 4 of them
 * COMPUTE_DEVICE=N: the CUDA ordinal of the one-device modes (default 0).
 * Prints key=value lines. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda_abi.h"

CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamQuery(CUstream);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventRecord_ptsz(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuEventQuery(CUevent);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   CUstream, void **);
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *, unsigned, unsigned);
CUresult cuStreamBeginCapture_v2(CUstream, CUstreamCaptureMode);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphLaunch_ptsz(CUgraphExec, CUstream);
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *);
CUresult cuGraphDestroy(CUgraph);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
int simgpu_busy_ns(int ordinal, uint64_t from_ns, uint64_t to_ns, uint64_t *busy_ns);

typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define CHECK(what, call)                                                                                              \
    do {                                                                                                               \
        CUresult r_ = (call);                                                                                          \
        if (r_ != CUDA_SUCCESS) {                                                                                      \
            printf("error=%s %d\n", what, r_);                                                                         \
            exit(3);                                                                                                   \
        }                                                                                                              \
    } while (0)

#define DEPTH      64
#define SKEW_EVERY 802 /* mode skewed: 800 kernels of 30 us, then two of 100 ms */
static const char *image = "busy_2000us half_1000us short_500us long_3500us tiny_10us tiny_30us huge_100000us";
static CUstream stream;
static volatile int done;
static uint64_t max_query_ns, queries;

static void *watcher(void *arg)
{
    CUcontext ctx = arg;
    CUstream s2;
    CUevent e;
    cuCtxSetCurrent(ctx);
    CHECK("watcher stream", cuStreamCreate(&s2, 0));
    CHECK("watcher event", cuEventCreate(&e, 0));
    while (!done) {
        uint64_t t0 = now_ns(), d;
        CUresult q = cuStreamQuery(stream);
        if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
            CHECK("cuStreamQuery", q);
        CHECK("cuEventRecord", cuEventRecord(e, s2));
        q = cuEventQuery(e);
        if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
            CHECK("cuEventQuery", q);
        CHECK("cuStreamSynchronize", cuStreamSynchronize(s2));
        d = now_ns() - t0;
        if (d > max_query_ns)
            max_query_ns = d;
        queries++;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

struct loop {
    CUcontext ctx;
    CUfunction f;
    uint64_t start, end, launches, counted;
};

/* one thread of mode threads: kernel launches on its own stream */
static void *launcher(void *arg)
{
    struct loop *l = arg;
    CUstream s;
    CUevent fence[DEPTH];
    uint64_t t;
    int k = 0;

    CHECK("set", cuCtxSetCurrent(l->ctx));
    CHECK("stream", cuStreamCreate(&s, 0));
    for (int i = 0; i < DEPTH; i++)
        CHECK("event", cuEventCreate(&fence[i], CU_EVENT_DISABLE_TIMING));
    while ((t = now_ns()) < l->end) {
        CHECK("cuLaunchKernel", cuLaunchKernel(l->f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
        l->launches++;
        t = now_ns();
        if (t >= l->start && t < l->end)
            l->counted++;
        CHECK("cuEventSynchronize", cuEventSynchronize(fence[k % DEPTH]));
        CHECK("cuEventRecord", cuEventRecord(fence[k % DEPTH], s));
        k++;
    }
    CHECK("sync", cuStreamSynchronize(s));
    return NULL;
}

/* mode capture: GLOBAL-mode captures in a second thread */
static uint64_t captures_ok, captures_failed;
static void *capturer(void *arg)
{
    struct loop *l = arg;
    CUstream cs;
    CUgraph g;
    CUgraphExec x;
    CUresult r;

    CHECK("set", cuCtxSetCurrent(l->ctx));
    CHECK("stream", cuStreamCreate(&cs, 0));
    while (now_ns() < l->end) {
        struct timespec ts = {0, 3000000};
        CHECK("begin capture", cuStreamBeginCapture_v2(cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
        r = cuLaunchKernel(l->f, 1, 1, 1, 32, 1, 1, 0, cs, NULL, NULL);
        nanosleep(&ts, NULL); /* the main thread launches (and the stand-in harvests) meanwhile */
        if (r == CUDA_SUCCESS)
            r = cuLaunchKernel(l->f, 1, 1, 1, 32, 1, 1, 0, cs, NULL, NULL);
        if (cuStreamEndCapture(cs, &g) != CUDA_SUCCESS || r != CUDA_SUCCESS) { /* invalidated */
            captures_failed++;
            continue;
        }
        CHECK("instantiate", cuGraphInstantiateWithFlags(&x, g, 0));
        CHECK("exec destroy", cuGraphExecDestroy(x));
        CHECK("graph destroy", cuGraphDestroy(g));
        captures_ok++;
    }
    return NULL;
}

/* mode contexts: contexts come and go under the launches */
static void contexts(CUdevice d, struct loop *l)
{
    for (int cycle = 0; now_ns() < l->end; cycle++) {
        CUcontext c;
        CUmodule m;
        CUfunction f;
        CUstream s;
        uint64_t t;
        if (cycle % 2 == 0) {
            CHECK("cuCtxCreate_v2", cuCtxCreate_v2(&c, 0, d));
        } else {
            CHECK("retain", cuDevicePrimaryCtxRetain(&c, d));
            CHECK("set", cuCtxSetCurrent(c));
        }
        CHECK("load", cuModuleLoadData(&m, image));
        CHECK("function", cuModuleGetFunction(&f, m, "busy_2000us"));
        CHECK("stream", cuStreamCreate(&s, 0));
        for (int i = 0; i < 25 && (t = now_ns()) < l->end; i++) {
            CHECK("cuLaunchKernel", cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
            l->launches++;
            t = now_ns();
            if (t >= l->start && t < l->end)
                l->counted++;
        }
        if (cycle % 2 == 0) {
            CHECK("cuCtxDestroy_v2", cuCtxDestroy_v2(c));
        } else {
            CHECK("unset", cuCtxSetCurrent(NULL));
            CHECK("release", cuDevicePrimaryCtxRelease_v2(d));
        }
    }
}

/* COMPUTE_SLOT="T_MS PHASE WIDTH": how much of device 0's busy time in the
 * window fell inside the slots [k*T + PHASE%, k*T + (PHASE+WIDTH)% + 3 ms)
 * of CLOCK_MONOTONIC (3 ms: a 2 ms kernel started at the end of its slot) */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* mode latency: a light tenant's requests, each timed from its launch call
 * to its end */
static void latency(CUfunction k, uint64_t start, uint64_t end, long gap_us, int burst)
{
    static uint64_t lat[8192];
    int n = 0;
    uint64_t t;

    while ((t = now_ns()) < end) {
        for (int i = 0; i < burst; i++)
            CHECK("cuLaunchKernel", cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
        CHECK("cuStreamSynchronize", cuStreamSynchronize(stream));
        if (t >= start && n < (int)(sizeof lat / sizeof lat[0]))
            lat[n++] = now_ns() - t;
        struct timespec gap = {gap_us / 1000000, gap_us % 1000000 * 1000};
        nanosleep(&gap, NULL);
    }
    qsort(lat, (size_t)n, sizeof lat[0], cmp_u64);
    printf("lat_n=%d\nlat_p50_ns=%llu\nlat_p90_ns=%llu\nlat_p99_ns=%llu\nlat_max_ns=%llu\n", n,
           (unsigned long long)(n ? lat[n / 2] : 0), (unsigned long long)(n ? lat[n * 9 / 10] : 0),
           (unsigned long long)(n ? lat[n * 99 / 100] : 0), (unsigned long long)(n ? lat[n - 1] : 0));
}

static void slot_report(uint64_t start, uint64_t end)
{
    const char *e = getenv("COMPUTE_SLOT");
    uint64_t t, ph, w, in = 0, x;

    if (!e || sscanf(e, "%lu %lu %lu", &t, &ph, &w) != 3 || t == 0)
        return;
    t *= 1000000ULL;
    for (uint64_t k = start / t; k * t < end; k++) {
        uint64_t a = k * t + t / 100 * ph, b = a + t / 100 * w + 3000000ULL;
        if (a < start)
            a = start;
        if (b > end)
            b = end;
        if (a < b && simgpu_busy_ns(0, a, b, &x) == 0)
            in += x;
    }
    printf("slot_busy_ns=%llu\n", (unsigned long long)in);
}

int main(int argc, char **argv)
{
    CUdevice dev[2];
    CUcontext ctx[2];
    CUmodule mod;
    CUfunction f, half, shortk, longk, hugek, tiny[2], mf[2];
    CUstream other;
    CUstream ms[2];
    CUgraph graph;
    CUgraphExec exec = NULL;
    CUevent fence[2][DEPTH];
    launch_t fn = cuLaunchKernel;
    pthread_t th;
    const char *mode;
    uint64_t start, end, t, launches = 0, counted = 0, busy = 0, busy1 = 0;
    int ndev = 1, k = 0;

    mode = argc > 1 ? argv[1] : "";
    if (argc != (strcmp(mode, "matrix") == 0 ? 4 : 2) && !(strcmp(mode, "latency") == 0 && argc <= 4)) {
        fprintf(stderr, "usage: compute MODE | compute latency [GAP_US [N]] | compute matrix US N|graph\n");
        return 2;
    }
    if (strcmp(mode, "multi") == 0)
        ndev = 2;
    CHECK("cuInit", cuInit(0));
    int first = ndev == 1 && getenv("COMPUTE_DEVICE") ? atoi(getenv("COMPUTE_DEVICE")) : 0;
    for (int i = ndev - 1; i >= 0; i--) {
        CHECK("cuDeviceGet", cuDeviceGet(&dev[i], first + i));
        CHECK("retain", cuDevicePrimaryCtxRetain(&ctx[i], dev[i]));
        CHECK("set", cuCtxSetCurrent(ctx[i]));
        CHECK("load", cuModuleLoadData(&mod, image));
        CHECK("function", cuModuleGetFunction(&mf[i], mod, "busy_2000us"));
        CHECK("stream", cuStreamCreate(&ms[i], 0));
        for (int k = 0; k < DEPTH; k++)
            CHECK("event", cuEventCreate(&fence[i][k], CU_EVENT_DISABLE_TIMING));
    }
    /* device 0 current from here on */
    f = mf[0];
    stream = ms[0];
    CHECK("function", cuModuleGetFunction(&half, mod, "half_1000us"));
    CHECK("function", cuModuleGetFunction(&shortk, mod, "short_500us"));
    CHECK("function", cuModuleGetFunction(&longk, mod, "long_3500us"));
    CHECK("function", cuModuleGetFunction(&hugek, mod, "huge_100000us"));
    CHECK("stream", cuStreamCreate(&other, 0));
    CHECK("function", cuModuleGetFunction(&tiny[0], mod, "tiny_10us"));
    CHECK("function", cuModuleGetFunction(&tiny[1], mod, "tiny_30us"));
    if (strncmp(mode, "graph", 5) == 0) {
        /* captured launches are not paced (they do not run): the graph is */
        CHECK("capture", cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CHECK("captured launch", cuLaunchKernel(half, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
        CHECK("captured launch", cuLaunchKernel(half, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
        CHECK("end capture", cuStreamEndCapture(stream, &graph));
        CHECK("instantiate", cuGraphInstantiateWithFlags(&exec, graph, 0));
    }
    if (strcmp(mode, "procaddr") == 0) {
        CUdriverProcAddressQueryResult st;
        CHECK("cuGetProcAddress_v2", cuGetProcAddress_v2("cuLaunchKernel", (void **)&fn, 13000,
                                                         CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
        /* the stand-in's own export of the per-thread variant, i.e. its wrapper */
        printf("procaddr_is_wrapper=%d\n", fn == (launch_t)cuLaunchKernel_ptsz);
    }
    CUstream mstreams[4];
    CUfunction mk = NULL;
    int mn = 0;
    if (strcmp(mode, "matrix") == 0) {
        static char mimage[32];
        CUmodule mm;
        snprintf(mimage, sizeof mimage, "m_%sus", argv[2]);
        CHECK("load", cuModuleLoadData(&mm, mimage));
        CHECK("function", cuModuleGetFunction(&mk, mm, mimage));
        if (strcmp(argv[3], "graph") == 0) {
            CHECK("capture", cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
            for (int i = 0; i < 4; i++)
                CHECK("captured launch", cuLaunchKernel(mk, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
            CHECK("end capture", cuStreamEndCapture(stream, &graph));
            CHECK("instantiate", cuGraphInstantiateWithFlags(&exec, graph, 0));
        } else {
            mn = atoi(argv[3]);
            if (mn < 1 || mn > 4) {
                fprintf(stderr, "matrix: 1..4 streams\n");
                return 2;
            }
            for (int i = 0; i < mn; i++)
                CHECK("stream", cuStreamCreate(&mstreams[i], 0));
        }
    }
    printf("ready\n");
    fflush(stdout);
    if (scanf("%llu %llu", (unsigned long long *)&start, (unsigned long long *)&end) != 2) {
        printf("error=no window on stdin\n");
        return 2;
    }
    if (strcmp(mode, "latency") == 0) {
        latency(half, start, end, argc >= 3 ? atol(argv[2]) : 8000, argc == 4 ? atoi(argv[3]) : 1);
        goto report;
    }
    if (strcmp(mode, "starve") == 0)
        pthread_create(&th, NULL, watcher, ctx[0]);
    struct loop cl = {ctx[0], half, start, end, 0, 0};
    if (strcmp(mode, "capture") == 0)
        pthread_create(&th, NULL, capturer, &cl);
    if (strcmp(mode, "threads") == 0 || strcmp(mode, "contexts") == 0) {
        struct loop l[4];
        pthread_t ths[4];
        int n = strcmp(mode, "threads") == 0 ? 4 : 1;
        for (int i = 0; i < n; i++) {
            memset(&l[i], 0, sizeof l[i]);
            l[i].ctx = ctx[0];
            l[i].f = f;
            l[i].start = start;
            l[i].end = end;
        }
        if (n == 1) {
            CHECK("unset", cuCtxSetCurrent(NULL));
            CHECK("release", cuDevicePrimaryCtxRelease_v2(dev[0])); /* inactive: each retain makes a new one */
            contexts(dev[0], &l[0]);
        } else {
            for (int i = 0; i < n; i++)
                pthread_create(&ths[i], NULL, launcher, &l[i]);
            for (int i = 0; i < n; i++)
                pthread_join(ths[i], NULL);
        }
        for (int i = 0; i < n; i++) {
            launches += l[i].launches;
            counted += l[i].counted;
        }
        goto report;
    }
    struct timespec cpu0, cpu1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0); /* the launching thread's CPU: the library's cost per launch */
    while ((t = now_ns()) < end) {
        if (strcmp(mode, "kernel") == 0 || strcmp(mode, "starve") == 0 || strcmp(mode, "capture") == 0) {
            CHECK("cuLaunchKernel", cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
        } else if (strcmp(mode, "idle") == 0) {
            struct timespec pause = {1, 200000000};
            CHECK("cuLaunchKernel", cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
            CHECK("cuCtxSynchronize", cuCtxSynchronize());
            nanosleep(&pause, NULL);
        } else if (strcmp(mode, "matrix") == 0) {
            if (mn)
                CHECK("cuLaunchKernel", cuLaunchKernel(mk, 1, 1, 1, 32, 1, 1, 0, mstreams[k % mn], NULL, NULL));
            else
                CHECK("cuGraphLaunch", cuGraphLaunch(exec, stream));
        } else if (strcmp(mode, "mixed") == 0) {
            CHECK("cuLaunchKernel", k % 2 ? cuLaunchKernel(longk, 1, 1, 1, 32, 1, 1, 0, other, NULL, NULL)
                                          : cuLaunchKernel(shortk, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
        } else if (strcmp(mode, "skewed") == 0) {
            CHECK("cuLaunchKernel", cuLaunchKernel(k % SKEW_EVERY < SKEW_EVERY - 2 ? tiny[1] : hugek, 1, 1, 1, 32, 1, 1,
                                                   0, stream, NULL, NULL));
        } else if (strcmp(mode, "tiny") == 0) {
            CHECK("cuLaunchKernel", cuLaunchKernel(tiny[k % 2], 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
        } else if (strcmp(mode, "ptsz") == 0) {
            CHECK("cuLaunchKernel_ptsz", cuLaunchKernel_ptsz(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        } else if (strcmp(mode, "procaddr") == 0) {
            CHECK("cuLaunchKernel (per-thread)", fn(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        } else if (strcmp(mode, "ex") == 0) {
            CUlaunchConfig c;
            memset(&c, 0, sizeof c);
            c.gridDimX = c.gridDimY = c.gridDimZ = 1;
            c.blockDimX = 32;
            c.blockDimY = c.blockDimZ = 1;
            c.hStream = stream;
            CHECK("cuLaunchKernelEx", cuLaunchKernelEx(&c, f, NULL, NULL));
        } else if (strcmp(mode, "allocfree") == 0) {
            CUdeviceptr d;
            CHECK("cuMemAlloc", cuMemAlloc_v2(&d, 1 << 20));
            CHECK("cuMemFree", cuMemFree_v2(d));
        } else if (strcmp(mode, "coop") == 0) {
            CHECK("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, NULL));
        } else if (strcmp(mode, "graph") == 0) {
            CHECK("cuGraphLaunch", cuGraphLaunch(exec, stream));
        } else if (strcmp(mode, "graph_ptsz") == 0) {
            CHECK("cuGraphLaunch_ptsz", cuGraphLaunch_ptsz(exec, NULL));
        } else if (strcmp(mode, "multi") == 0) {
            CUDA_LAUNCH_PARAMS p[2];
            memset(p, 0, sizeof p);
            for (int i = 0; i < 2; i++) {
                p[i].function = mf[i];
                p[i].gridDimX = p[i].gridDimY = p[i].gridDimZ = 1;
                p[i].blockDimX = 32;
                p[i].blockDimY = p[i].blockDimZ = 1;
                p[i].hStream = ms[i];
            }
            CHECK("cuLaunchCooperativeKernelMultiDevice", cuLaunchCooperativeKernelMultiDevice(p, 2, 0));
        } else {
            printf("error=unknown mode %s\n", mode);
            return 2;
        }
        launches++;
        t = now_ns();
        if (t >= start && t < end)
            counted++;
        /* the fence DEPTH launches back, then this launch's fence (relaxed,
         * as a program must while another thread captures in GLOBAL mode) */
        CUstreamCaptureMode cm = CU_STREAM_CAPTURE_MODE_RELAXED;
        CHECK("relax", cuThreadExchangeStreamCaptureMode(&cm));
        for (int i = 0; i < ndev; i++) {
            CUevent e = fence[i][k % DEPTH];
            CHECK("cuEventSynchronize", cuEventSynchronize(e));
            if (strstr(mode, "ptsz") || strcmp(mode, "procaddr") == 0)
                CHECK("cuEventRecord_ptsz", cuEventRecord_ptsz(e, NULL));
            else
                CHECK("cuEventRecord", cuEventRecord(e, strcmp(mode, "mixed") == 0 && k % 2 ? other
                                                        : mn                                ? mstreams[k % mn]
                                                                                            : ms[i]));
        }
        CHECK("unrelax", cuThreadExchangeStreamCaptureMode(&cm));
        k++;
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
    printf("cpu_ns=%lld\n", (long long)(cpu1.tv_sec - cpu0.tv_sec) * 1000000000LL + (cpu1.tv_nsec - cpu0.tv_nsec));
    CHECK("cuCtxSynchronize", cuCtxSynchronize());
    if (ndev == 2)
        CHECK("sync device 1", cuStreamSynchronize(ms[1]));
    if (strcmp(mode, "starve") == 0) {
        done = 1;
        pthread_join(th, NULL);
        printf("max_query_ns=%llu\nqueries=%llu\n", (unsigned long long)max_query_ns, (unsigned long long)queries);
    }
    if (strcmp(mode, "capture") == 0) {
        pthread_join(th, NULL);
        printf("captures_ok=%llu\ncaptures_failed=%llu\n", (unsigned long long)captures_ok,
               (unsigned long long)captures_failed);
    }
report:
    simgpu_busy_ns(0, start, end, &busy);
    slot_report(start, end);
    if (ndev == 2)
        simgpu_busy_ns(1, start, end, &busy1);
    printf("launches=%llu\ncounted=%llu\nwindow_ns=%llu\nbusy0_ns=%llu\nbusy1_ns=%llu\n", (unsigned long long)launches,
           (unsigned long long)counted, (unsigned long long)(end - start), (unsigned long long)busy,
           (unsigned long long)busy1);
    return 0;
}
