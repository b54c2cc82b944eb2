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
#include <cuda_runtime.h>
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

__global__ void spin(unsigned long long dur, unsigned long long gap, unsigned long long *out)
{
    unsigned long long prev = globaltimer(), active = 0, away = 0;
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
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
    check(cudaMalloc(&away_d, sizeof *away_d), "cudaMalloc");
    for (int i = 0; i < 10; i++)
        spin<<<sms, 32>>>(DUR_NS, GAP_NS, away_d);
    check(cudaDeviceSynchronize(), "warm-up");
    check(cudaMemset(away_d, 0, sizeof *away_d), "cudaMemset");
    if (*ready) {
        FILE *f = fopen(ready, "w");
        if (f)
            fclose(f);
    }
    while (!stop && unix_now() < at)
        usleep(1000);
    double w0 = unix_now();
    while (!stop && unix_now() - w0 < secs) {
        for (int i = 0; i < 10; i++)
            spin<<<sms, 32>>>(DUR_NS, GAP_NS, away_d);
        check(cudaDeviceSynchronize(), "launches");
        n += 10;
    }
    double w1 = unix_now();
    check(cudaMemcpy(&away, away_d, sizeof away, cudaMemcpyDeviceToHost), "cudaMemcpy");
    printf("window %.3f %.3f\n", w0, w1);
    printf("busy_per_s %.3f\n", n / (w1 - w0));
    printf("active_pct %.2f\n", 100.0 * n * (DUR_NS / 1e9) / (w1 - w0));
    printf("switched_out_ms %.1f\n", away / 1e6 / sms);
    fflush(stdout);
    return 0;
}
