/* Test client for the shared accounting of one container (shared_test.go):
 * many processes, random allocations and frees, SIGKILL at any moment, fork.
 * Linked with -lcuda against the simulator and run under LD_PRELOAD of the
 * stand-ins, as client.c's "link" route. Prints "key=value" lines.
 *
 *   shared churn ITERS MAXMIB SEED   ready; waits for a line; ITERS random
 *                                    alloc/free; frees all, releases the context;
 *                                    prints stats; waits for stdin EOF
 *   shared survivor MAXMIB SEED [REGION]  ready; waits for a line; alloc/free until
 *                                    a line "stop"; prints stats and what it holds;
 *                                    waits for EOF. With REGION (the vgpu.region
 *                                    file) it checks after each of its operations
 *                                    that its slot counts exactly what it holds
 *                                    plus its context (selfcheck=... mismatches N)
 *   shared victim MAXMIB SEED        ready; alloc/free and cuMemGetInfo (a dead-slot
 *                                    scan under the region's lock) until killed
 *   shared sampler                   NVML memory info (the library's usage, read
 *                                    under the region's mutex) until a line / EOF
 *   shared fork-hold                 1 GiB in the parent, fork, 1 GiB in the child;
 *                                    child pauses until SIGTERM (dies holding it);
 *                                    the parent answers "info", "reap", "free"
 *
 * Instrumented waits: pthread_mutex_lock is interposed (this executable is
 * searched before libc, and the preloaded stand-in binds through the global
 * scope) and every lock of the region's mutex is timed: lock_waits,
 * max_lock_wait_ns, longwaitN=start duration rc for waits over 50 ms. Every
 * driver call is timed too (max_call_ns). pthread_mutex_consistent is
 * interposed to count recoveries of the region's mutex (ownerdead_region):
 * each one is a process that died holding it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cuda_abi.h"
#include "nvml_abi.h"
#include "vgpu_region.h"

CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemGetInfo_v2(size_t *, size_t *);

#define MiB     (1024ull * 1024)
#define MAXLIVE 32

/* ---- robust-mutex recoveries (interposed) ---- */
static void *recovered[4096];
static int nrecovered;
int pthread_mutex_consistent(pthread_mutex_t *m)
{
    static int (*real)(pthread_mutex_t *);
    if (!real)
        real = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_consistent");
    int i = __atomic_fetch_add(&nrecovered, 1, __ATOMIC_RELAXED);
    if (i < 4096)
        recovered[i] = m;
    return real(m);
}

/* the mapping of vgpu.region in this process (found once the library mapped it) */
static unsigned long region_lo, region_hi;
static void find_region(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (strstr(line, "vgpu.region") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            region_lo = lo, region_hi = hi;
    }
    fclose(f);
}

/* recoveries of the region's mutex */
static int region_recoveries(void)
{
    int n = 0;
    for (int i = 0; i < nrecovered && i < 4096; i++)
        if ((unsigned long)recovered[i] >= region_lo && (unsigned long)recovered[i] < region_hi)
            n++;
    return n;
}

/* ---- waits on the region's mutex (interposed: the stand-in's calls reach us first) ---- */
static uint64_t now_ns(void);
static uint64_t lock_waits, max_lock_wait_ns, slow_lock_waits;
static uint64_t long_at[64], long_dur[64];
static int long_dead[64], nlong; /* waits over 50 ms: when, how long, the lock's return */
int pthread_mutex_lock(pthread_mutex_t *m)
{
    static int (*real)(pthread_mutex_t *);
    uint64_t t0, d;
    int r;
    if (!real)
        real = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    if ((unsigned long)m < region_lo || (unsigned long)m >= region_hi)
        return real(m);
    t0 = now_ns();
    r = real(m);
    d = now_ns() - t0;
    lock_waits++; /* under the region's mutex itself */
    if (d > max_lock_wait_ns)
        max_lock_wait_ns = d;
    if (d > 50000000ull && nlong < 64)
        long_at[nlong] = t0, long_dur[nlong] = d, long_dead[nlong++] = r;
    if (d > 100000000ull)
        slow_lock_waits++;
    return r;
}

/* ---- timing ---- */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static uint64_t max_call_ns, slow_calls, calls;
static uint64_t slow_at[16], slow_dur[16];
static const char *slow_what[16];
#define TIMED(expr)                                                                                                    \
    ({                                                                                                                 \
        uint64_t t0_ = now_ns();                                                                                       \
        CUresult r_ = (expr);                                                                                          \
        uint64_t d_ = now_ns() - t0_;                                                                                  \
        calls++;                                                                                                       \
        if (d_ > max_call_ns)                                                                                          \
            max_call_ns = d_;                                                                                          \
        if (d_ > 100000000ull && slow_calls < 16)                                                                      \
            slow_at[slow_calls] = t0_, slow_dur[slow_calls] = d_, slow_what[slow_calls] = #expr;                       \
        if (d_ > 100000000ull)                                                                                         \
            slow_calls++;                                                                                              \
        r_;                                                                                                            \
    })

static CUdevice dev;
static void setup(void)
{
    CUcontext ctx;
    CUresult r;
    if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) || (r = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
        (r = cuCtxSetCurrent(ctx))) {
        printf("error=setup %d\n", r);
        exit(3);
    }
}

/* xorshift: reproducible per seed */
static uint64_t rng;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ---- one process's allocations ---- */
static CUdeviceptr live[MAXLIVE];
static size_t live_size[MAXLIVE];
static int nlive;
static uint64_t own, refused, errors;
static uint64_t now_ns(void);
static void selfcheck(const char *what, size_t n);

/* a size in 512-byte steps up to maxmib MiB */
static size_t rsize(uint64_t maxmib) { return (size_t)(1 + rnd() % (maxmib * 2048)) * 512; }

static void op(uint64_t maxmib)
{
    if (nlive == MAXLIVE || (nlive > 0 && rnd() % 2)) {
        int i = (int)(rnd() % (uint64_t)nlive);
        if (TIMED(cuMemFree_v2(live[i])) != CUDA_SUCCESS)
            errors++;
        own -= live_size[i];
        selfcheck("free", live_size[i]);
        live[i] = live[nlive - 1];
        live_size[i] = live_size[nlive - 1];
        nlive--;
        return;
    }
    size_t n = rsize(maxmib);
    CUresult r = TIMED(cuMemAlloc_v2(&live[nlive], n));
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        refused++;
        selfcheck("refused", n);
        return;
    }
    if (r != CUDA_SUCCESS) {
        errors++;
        selfcheck("error", n);
        return;
    }
    live_size[nlive++] = n;
    own += n;
    selfcheck("alloc", n);
}

static void free_all(void)
{
    while (nlive > 0) {
        nlive--;
        if (TIMED(cuMemFree_v2(live[nlive])) != CUDA_SUCCESS)
            errors++;
        own -= live_size[nlive];
    }
}

/* self-check (survivor with a region path): after each of our own operations
 * our slot must count exactly what we hold plus the context */
#include <fcntl.h>
#include <sys/mman.h>
static const struct vgpu_region_slot *region_slots;
static volatile const uint64_t *my_usage;
static volatile const uint32_t *my_state;
static uint64_t base, mismatches;
static void selfcheck_init(const char *path)
{
    int fd = open(path, O_RDONLY);
    const size_t size = VGPU_REGION_HEADER + (size_t)VGPU_REGION_SLOTS * VGPU_REGION_SLOT_SIZE;
    const char *region;
    if (fd < 0 || (region = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        printf("error=selfcheck %s\n", path);
        exit(3);
    }
    region_slots = (const struct vgpu_region_slot *)(region + VGPU_REGION_HEADER);
    for (unsigned i = 0; i < VGPU_REGION_SLOTS; i++) {
        const struct vgpu_region_slot *sl = &region_slots[i];
        if (sl->state == 1 && sl->pid == (uint32_t)getpid()) {
            my_state = &sl->state;
            my_usage = &sl->usage[0];
            base = *my_usage;
        }
    }
    if (!my_usage) {
        printf("error=selfcheck no slot\n");
        exit(3);
    }
}
static void selfcheck(const char *what, size_t n)
{
    if (my_usage && (*my_usage != base + own || *my_state != 1)) {
        if (mismatches++ < 8)
            printf("mismatch%d=%llu %s %zu slot=%llu state=%u want=%llu\n", (int)mismatches - 1,
                   (unsigned long long)now_ns(), what, n, (unsigned long long)*my_usage, *my_state,
                   (unsigned long long)(base + own));
        base = *my_usage - own;
    }
}

static void stats(void)
{
    printf("lock_waits=%llu\nmax_lock_wait_ns=%llu\nslow_lock_waits=%llu\n", (unsigned long long)lock_waits,
           (unsigned long long)max_lock_wait_ns, (unsigned long long)slow_lock_waits);
    printf("calls=%llu\nmax_call_ns=%llu\nslow_calls=%llu\nrefused=%llu\nerrors=%llu\nownerdead_region=%d\n"
           "ownerdead_all=%d\nown=%llu\npid=%d\n",
           (unsigned long long)calls, (unsigned long long)max_call_ns, (unsigned long long)slow_calls,
           (unsigned long long)refused, (unsigned long long)errors, region_recoveries(), nrecovered,
           (unsigned long long)own, (int)getpid());
    for (int i = 0; i < nlong; i++)
        printf("longwait%d=%llu %llu %d\n", i, (unsigned long long)long_at[i], (unsigned long long)long_dur[i],
               long_dead[i]);
    if (my_usage)
        printf("selfcheck=slot %llu base %llu mismatches %llu\n", (unsigned long long)*my_usage,
               (unsigned long long)base, (unsigned long long)mismatches);
    for (uint64_t i = 0; i < slow_calls && i < 16; i++)
        printf("slow%d=%llu %llu %s\n", (int)i, (unsigned long long)slow_at[i], (unsigned long long)slow_dur[i],
               slow_what[i]);
}

static void wait_eof(void)
{
    char buf[256];
    while (read(0, buf, sizeof buf) > 0)
        ;
}

static int read_line(char *buf, size_t n)
{
    size_t i = 0;
    char c;
    while (i + 1 < n && read(0, &c, 1) == 1) {
        if (c == '\n')
            break;
        buf[i++] = c;
    }
    buf[i] = 0;
    return (int)i;
}

static volatile int stop;
static void *stdin_watch(void *a)
{
    char line[64];
    (void)a;
    while (read_line(line, sizeof line) > 0 && strcmp(line, "stop") != 0)
        ;
    stop = 1; /* "stop" or EOF */
    return NULL;
}

static void info(const char *tag)
{
    size_t f = 0, t = 0;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    printf("%s_rc=%d\n%s_free=%zu\n%s_total=%zu\n", tag, r, tag, f, tag, t);
}

static int fork_hold(void)
{
    CUdeviceptr p, q;
    char line[64];
    pid_t pid;
    int st;

    if (cuMemAlloc_v2(&p, 1024 * MiB)) {
        printf("error=parent alloc\n");
        return 1;
    }
    info("parent");
    pid = fork();
    if (pid == 0) {
        setup(); /* a fork child starts its own CUDA life */
        printf("child_alloc=%d\n", cuMemAlloc_v2(&q, 1024 * MiB));
        info("child");
        printf("child_pid=%d\n", (int)getpid());
        for (;;)
            pause(); /* until SIGTERM: exits holding its memory */
    }
    for (;;) {
        line[0] = 0;
        read_line(line, sizeof line);
        if (strcmp(line, "info") == 0) {
            info("now");
        } else if (strcmp(line, "reap") == 0) {
            kill(pid, SIGTERM);
            waitpid(pid, &st, 0);
            printf("reaped=%d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
        } else if (strcmp(line, "free") == 0) {
            printf("free_rc=%d\n", cuMemFree_v2(p));
            info("freed");
        } else if (line[0] == 0) {
            break; /* EOF */
        }
    }
    return 0;
}

/* NVML's used memory is the container's usage as the library counts it,
 * under the region's mutex: sample it until a line or EOF on stdin */
static int sampler(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW); /* the preloaded stand-in answers */
    int (*init)(void), (*byidx)(unsigned, nvmlDevice_t *), (*mem)(nvmlDevice_t, nvmlMemory_t *);
    nvmlDevice_t d;
    nvmlMemory_t m;
    uint64_t n = 0, over = 0, max = 0, total = 0;
    pthread_t t;

    if (!h || !(init = (int (*)(void))dlsym(h, "nvmlInit_v2")) ||
        !(byidx = (int (*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2")) ||
        !(mem = (int (*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo")) || init() != 0 ||
        byidx(0, &d) != 0) {
        printf("error=nvml\n");
        return 3;
    }
    pthread_create(&t, NULL, stdin_watch, NULL);
    printf("ready=1\n");
    while (!stop) {
        if (mem(d, &m) != 0) {
            printf("error=nvmlDeviceGetMemoryInfo\n");
            return 3;
        }
        n++;
        total = m.total;
        if (m.used > max)
            max = m.used;
        if (m.used > m.total)
            over++;
        usleep(2000);
    }
    printf("samples=%llu\nmax_used=%llu\nover=%llu\ntotal=%llu\ndone=1\n", (unsigned long long)n,
           (unsigned long long)max, (unsigned long long)over, (unsigned long long)total);
    return 0;
}

int main(int argc, char **argv)
{
    const char *s = argc > 1 ? argv[1] : "";
    char line[64];

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(s, "sampler") == 0)
        return sampler();
    setup();
    find_region();
    if (strcmp(s, "churn") == 0 && argc > 4) {
        long iters = atol(argv[2]);
        uint64_t maxmib = strtoull(argv[3], NULL, 0);
        rng = strtoull(argv[4], NULL, 0) * 2654435761ull + 1;
        printf("ready=1\n");
        read_line(line, sizeof line);
        for (long i = 0; i < iters; i++)
            op(maxmib);
        free_all();
        if (cuDevicePrimaryCtxRelease_v2(dev) != CUDA_SUCCESS)
            errors++;
        stats();
        printf("done=1\n");
        wait_eof();
        return 0;
    }
    if (strcmp(s, "survivor") == 0 && argc > 3) {
        pthread_t t;
        uint64_t maxmib = strtoull(argv[2], NULL, 0);
        rng = strtoull(argv[3], NULL, 0) * 2654435761ull + 1;
        if (argc > 4)
            selfcheck_init(argv[4]);
        printf("ready=1\n");
        read_line(line, sizeof line); /* "go": all started, contexts measured */
        pthread_create(&t, NULL, stdin_watch, NULL);
        while (!stop)
            op(maxmib);
        stats();
        printf("done=1\n");
        wait_eof();
        return 0;
    }
    if (strcmp(s, "victim") == 0 && argc > 3) {
        uint64_t maxmib = strtoull(argv[2], NULL, 0);
        size_t f, t;
        rng = strtoull(argv[3], NULL, 0) * 2654435761ull + 1;
        printf("ready=1\n");
        for (;;) {
            op(maxmib);
            cuMemGetInfo_v2(&f, &t); /* a dead-slot scan under the region's lock */
        }
    }
    if (strcmp(s, "fork-hold") == 0)
        return fork_hold();
    printf("error=usage\n");
    return 2;
}
