// spin: a busy tenant whose device time the device counts itself, for
// bench/gpu/shares.sh (WORKLOAD=spin): a referee that depends neither on the
// library's events nor on NVML's sampling.
//
// Every launch has one block per SM; each block spins until it has been
// running for DUR_NS, reading %globaltimer in a loop and adding only advances
// shorter than GAP_NS: a longer one means the block was switched out while
// another context ran (time-slicing), and is not counted. So a launch is
// DUR_NS of this process's device time, wherever it was preempted, and
// launches * DUR_NS / window is the process's device-time share.
//
//   spin busy SECS [READY]
// Prints 'pid N' at once; after a warm-up (and writing READY) launches back
// to back, 10 per synchronize, for SECS (LOOP_AT, Unix time, starts the
// timing there; SIGTERM ends it early); then 'window T0 T1', 'busy_per_s R'
// (launches a second), 'active_pct P' and 'switched_out_ms M' (time the
// blocks spent switched out, summed over blocks, divided by the block count).
// Then 'timeline BIN0 P P P ...': per 100 ms of the device's %globaltimer
// (BIN0 = the first bin's number, globaltimer / 100 ms, so that two tenants'
// timelines line up), the percent of the bin that the launches ending in it
// stand for (1 ms each, by block 0's %globaltimer at its end).
// CYCLE=BUSY_MS,IDLE_MS: busy, then idle (no launch), by turns from the
// window's start (a tenant that sleeps and wakes). WARM_BUSY=1: launches
// back to back from the warm-up to LOOP_AT too, not counted.
// SPIN_DEVICE picks the CUDA device (default 0).
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static const unsigned long long DUR_NS = 1000000ULL; // 1 ms of device time a launch
static const unsigned long long GAP_NS = 20000ULL;   // advances from 20 us up: switched out

__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin(unsigned long long dur, unsigned long long gap, unsigned long long *out, unsigned long long *stamp)
{
    unsigned long long prev = globaltimer(), active = 0, away = 0;
    if (stamp && threadIdx.x == 0 && blockIdx.x == 0)
        stamp[0] = prev;
    while (active < dur) {
        unsigned long long now = globaltimer(), d = now - prev;
        if (d < gap)
            active += d;
        else
            away += d;
        prev = now;
    }
    if (threadIdx.x == 0)
        atomicAdd(out, away);
    if (stamp && threadIdx.x == 0 && blockIdx.x == 0)
        stamp[1] = globaltimer();
}

static volatile sig_atomic_t stop;
static void on_term(int) { stop = 1; }

static double unix_now()
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec / 1e6;
}

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "spin: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[1], "busy") != 0) {
        fprintf(stderr, "usage: spin busy SECS [READY]\n");
        return 2;
    }
    double secs = atof(argv[2]), at = getenv("LOOP_AT") ? atof(getenv("LOOP_AT")) : 0;
    const char *ready = argc > 3 ? argv[3] : "";
    int sms = 0;
    unsigned long long *away_d, away = 0;
    long n = 0;

    signal(SIGTERM, on_term);
    printf("pid %d\n", getpid());
    fflush(stdout);
    int dev = getenv("SPIN_DEVICE") ? atoi(getenv("SPIN_DEVICE")) : 0;
    check(cudaSetDevice(dev), "cudaSetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count");
    check(cudaMalloc(&away_d, sizeof *away_d), "cudaMalloc");
    for (int i = 0; i < 10; i++)
        spin<<<sms, 32>>>(DUR_NS, GAP_NS, away_d, NULL);
    check(cudaDeviceSynchronize(), "warm-up");
    long maxn = (long)(secs * 1100) + 100; // at most one launch a ms of the window
    unsigned long long *stamps_d;
    check(cudaMalloc(&stamps_d, 2 * sizeof(unsigned long long) * maxn), "cudaMalloc stamps");
    check(cudaMemset(stamps_d, 0, 2 * sizeof(unsigned long long) * maxn), "cudaMemset stamps");
    long busy_ms = 0, idle_ms = 0;
    if (getenv("CYCLE"))
        sscanf(getenv("CYCLE"), "%ld,%ld", &busy_ms, &idle_ms);
    check(cudaMemset(away_d, 0, sizeof *away_d), "cudaMemset");
    if (*ready) {
        FILE *f = fopen(ready, "w");
        if (f)
            fclose(f);
    }
    // WARM_BUSY=1: busy until the window too (uncounted), as a tenant that
    // has been busy for a while, not one that starts at the window
    int warm_busy = getenv("WARM_BUSY") && atoi(getenv("WARM_BUSY"));
    while (!stop && unix_now() < at) {
        if (!warm_busy) {
            usleep(1000);
            continue;
        }
        for (int i = 0; i < 10; i++)
            spin<<<sms, 32>>>(DUR_NS, GAP_NS, away_d, NULL);
        check(cudaDeviceSynchronize(), "warm launches");
    }
    double w0 = unix_now();
    while (!stop && unix_now() - w0 < secs) {
        if (busy_ms > 0 && fmod((unix_now() - w0) * 1000, (double)(busy_ms + idle_ms)) >= busy_ms) {
            usleep(1000);
            continue;
        }
        for (int i = 0; i < 10; i++)
            spin<<<sms, 32>>>(DUR_NS, GAP_NS, away_d, n + i < maxn ? stamps_d + 2 * (n + i) : NULL);
        check(cudaDeviceSynchronize(), "launches");
        n += 10;
    }
    double w1 = unix_now();
    check(cudaMemcpy(&away, away_d, sizeof away, cudaMemcpyDeviceToHost), "cudaMemcpy");
    printf("window %.3f %.3f\n", w0, w1);
    printf("busy_per_s %.3f\n", n / (w1 - w0));
    printf("active_pct %.2f\n", 100.0 * n * (DUR_NS / 1e9) / (w1 - w0));
    printf("switched_out_ms %.1f\n", away / 1e6 / sms);
    long m = n < maxn ? n : maxn;
    unsigned long long *st = (unsigned long long *)calloc(2 * (m + 1), sizeof *st);
    check(cudaMemcpy(st, stamps_d, 2 * sizeof *st * m, cudaMemcpyDeviceToHost), "cudaMemcpy stamps");
    const unsigned long long BIN = 100000000ULL;
    unsigned long long lo = ~0ULL, hi = 0;
    for (long i = 0; i < m; i++)
        if (st[2 * i + 1] > st[2 * i]) {
            lo = st[2 * i + 1] < lo ? st[2 * i + 1] : lo;
            hi = st[2 * i + 1] > hi ? st[2 * i + 1] : hi;
        }
    if (hi > lo) {
        long nb = (long)(hi / BIN - lo / BIN) + 1;
        double *cov = (double *)calloc(nb, sizeof *cov);
        // each launch is DUR_NS of this process's device time (switched-out
        // time not counted), put in the bin where it ended
        for (long i = 0; i < m; i++)
            if (st[2 * i + 1] > st[2 * i])
                cov[st[2 * i + 1] / BIN - lo / BIN] += (double)DUR_NS;
        printf("timeline %llu", lo / BIN);
        for (long b = 0; b < nb; b++)
            printf(" %.0f", 100.0 * cov[b] / BIN);
        printf("\n");
    }
    fflush(stdout);
    return 0;
}
