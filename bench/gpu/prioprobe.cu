// prioprobe: the two tenants of bench/gpu/priority-probe.sh and
// bench/gpu/priority.sh, with no framework in the way.
//
//   prioprobe light REQS INTERVAL_US KERNEL_US [CALIBRATED GO]
//     A latency-sensitive tenant: REQS requests, one every INTERVAL_US
//     (open loop on a fixed grid; a late request starts at once), each one
//     kernel of KERNEL_US of device time on every SM, waited for. Per
//     request: the host's time at the launch call, the kernel's first block
//     start and last block end by %globaltimer, the host's time after the
//     wait. Prints 'light n=N start_p50_ms A start_p99_ms B done_p50_ms C
//     done_p99_ms D dev_p50_ms E calib_rtt_us F neg_start N'.
//       start  launch call -> first block running (what a tenant waits
//              before its work starts)
//       done   launch call -> the wait returns (what a client sees)
//       dev    first block start -> last block end (the kernel itself,
//              stretched when its context is switched out or its blocks
//              wait for SMs)
//     %globaltimer is put on the host's clock by the round trip of a
//     one-thread kernel, the shortest of 50 taken before any neighbour
//     starts: with CALIBRATED and GO it writes CALIBRATED after that and
//     waits for GO to exist (the script starts the neighbour in between).
//     calib_rtt_us bounds the error of 'start' (half of it either way);
//     neg_start counts starts that came out before their launch (should be
//     0 or a few within that error).
//     RAW=FILE also writes every request's three figures (ms) there;
//     MAX_S=S stops issuing requests after S seconds (a slow setting then
//     reports fewer than REQS, n= says how many).
//   prioprobe flood KERNEL_US SECS READY
//     A batch tenant: kernels of KERNEL_US of device time, DEPTH (4) in
//     flight at any moment, for at most SECS or until SIGTERM; writes READY
//     after its warm-up. Prints 'flood n=N kernels_per_s R active_pct P'.
//
// Both kernels spin on %globaltimer counting only advances shorter than
// GAP_NS, so time their context spends switched out does not count: a
// kernel is KERNEL_US of its own device time whatever the SM clock is.
// Each block takes a large slice of shared memory (flood 160 KiB, light
// 96 KiB; an SM has 228 KiB) so that a light block cannot sit beside a flood
// block on one SM: under MPS, where the clients' blocks share the SMs, the
// light kernel must wait for SMs as it would beside a real kernel that
// fills them (a 32-thread spinner would leave room and hide the wait).
// FLOOD_WAVES (default 1) splits a flood kernel into that many waves of
// blocks, each block KERNEL_US / waves: 1 is the worst case for MPS (an SM
// is held for the whole kernel), more waves look like a GEMM's tiles.
#include <algorithm>
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <vector>

static const unsigned long long GAP_NS = 20000ULL; // advances from 20 us up: switched out
static const int FLOOD_SMEM = 160 * 1024;
static const int LIGHT_SMEM = 96 * 1024;
static const int THREADS = 256;
static const int DEPTH = 4;

__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spins for dur ns of this block's own running time; block 0 stamps its
// start, every block its end (the latest wins).
__global__ void spin(unsigned long long dur, unsigned long long *stamp)
{
    unsigned long long prev = globaltimer(), active = 0;
    if (stamp && threadIdx.x == 0 && blockIdx.x == 0)
        stamp[0] = prev;
    while (active < dur) {
        unsigned long long now = globaltimer(), d = now - prev;
        if (d < GAP_NS)
            active += d;
        prev = now;
    }
    // dynamic shared memory is reserved at the launch, used or not
    if (stamp && threadIdx.x == 0)
        atomicMax(&stamp[1], globaltimer());
}

__global__ void stamp_now(unsigned long long *out) { out[0] = globaltimer(); }

static volatile sig_atomic_t stop;
static void on_term(int) { stop = 1; }

static long long now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "prioprobe: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

static double pct(std::vector<double> v, double p)
{
    if (v.empty())
        return -1;
    std::sort(v.begin(), v.end());
    size_t i = (size_t)(p / 100.0 * (v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

static int light(int argc, char **argv, int sms)
{
    long reqs = atol(argv[2]), interval_us = atol(argv[3]), kernel_us = atol(argv[4]);
    const char *calibrated = argc > 6 ? argv[5] : NULL, *go = argc > 6 ? argv[6] : NULL;
    if (reqs <= 0 || interval_us <= 0 || kernel_us <= 0) {
        fprintf(stderr, "prioprobe light: REQS, INTERVAL_US and KERNEL_US must be > 0\n");
        return 2;
    }
    check(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, LIGHT_SMEM), "light shared memory");
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    unsigned long long *st_d, *one_d, one;
    check(cudaMalloc(&st_d, 2 * sizeof *st_d * reqs), "cudaMalloc");
    check(cudaMemset(st_d, 0, 2 * sizeof *st_d * reqs), "cudaMemset");
    check(cudaMalloc(&one_d, sizeof *one_d), "cudaMalloc");
    for (int i = 0; i < 5; i++)
        spin<<<sms, THREADS, LIGHT_SMEM, s>>>(kernel_us * 1000ULL, NULL);
    check(cudaStreamSynchronize(s), "warm-up");
    // globaltimer -> host clock: the round trip of a one-thread kernel, the
    // shortest of 50 (alone on the GPU when CALIBRATED/GO are used)
    long long best_rtt = -1, offset = 0;
    for (int i = 0; i < 50; i++) {
        long long h0 = now_ns();
        stamp_now<<<1, 1, 0, s>>>(one_d);
        check(cudaMemcpyAsync(&one, one_d, sizeof one, cudaMemcpyDeviceToHost, s), "stamp copy");
        check(cudaStreamSynchronize(s), "stamp");
        long long h1 = now_ns();
        if (best_rtt < 0 || h1 - h0 < best_rtt) {
            best_rtt = h1 - h0;
            offset = (long long)one - (h0 + h1) / 2;
        }
    }
    if (calibrated) {
        touch(calibrated);
        for (int w = 0; access(go, F_OK) != 0; w++) {
            if (w > 120000) { // 120 s
                fprintf(stderr, "prioprobe light: no %s\n", go);
                return 1;
            }
            usleep(1000);
        }
    }
    std::vector<long long> launch(reqs), done(reqs);
    long long t0 = now_ns() + 1000000;
    double max_s = getenv("MAX_S") ? atof(getenv("MAX_S")) : 0;
    for (long i = 0; i < reqs && !stop; i++) {
        if (max_s > 0 && now_ns() - t0 > max_s * 1e9)
            break;
        long long at = t0 + i * interval_us * 1000LL;
        struct timespec ts = {(time_t)(at / 1000000000LL), (long)(at % 1000000000LL)};
        clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL);
        launch[i] = now_ns();
        spin<<<sms, THREADS, LIGHT_SMEM, s>>>(kernel_us * 1000ULL, st_d + 2 * i);
        check(cudaStreamSynchronize(s), "light request");
        done[i] = now_ns();
    }
    std::vector<unsigned long long> st(2 * reqs);
    check(cudaMemcpy(st.data(), st_d, 2 * sizeof st[0] * reqs, cudaMemcpyDeviceToHost), "stamps");
    std::vector<double> start, fin, dev;
    long neg = 0;
    FILE *raw = getenv("RAW") ? fopen(getenv("RAW"), "w") : NULL;
    for (long i = 0; i < reqs; i++) {
        if (!done[i] || !st[2 * i])
            continue;
        double a = ((long long)st[2 * i] - offset - launch[i]) / 1e6;
        double b = (done[i] - launch[i]) / 1e6;
        double c = ((long long)(st[2 * i + 1] - st[2 * i])) / 1e6;
        neg += a < 0;
        start.push_back(a);
        fin.push_back(b);
        dev.push_back(c);
        if (raw)
            fprintf(raw, "%.4f %.4f %.4f\n", a, b, c);
    }
    if (raw)
        fclose(raw);
    printf("light n=%zu start_p50_ms %.3f start_p99_ms %.3f done_p50_ms %.3f done_p99_ms %.3f "
           "dev_p50_ms %.3f dev_p99_ms %.3f start_max_ms %.3f calib_rtt_us %.1f neg_start %ld\n",
           start.size(), pct(start, 50), pct(start, 99), pct(fin, 50), pct(fin, 99), pct(dev, 50), pct(dev, 99),
           pct(start, 100), best_rtt / 1e3, neg);
    return 0;
}

static int flood(char **argv, int sms)
{
    long kernel_us = atol(argv[2]);
    double secs = atof(argv[3]);
    const char *ready = argv[4];
    int waves = getenv("FLOOD_WAVES") ? atoi(getenv("FLOOD_WAVES")) : 1;
    if (kernel_us <= 0 || secs <= 0 || waves <= 0) {
        fprintf(stderr, "prioprobe flood: KERNEL_US, SECS and FLOOD_WAVES must be > 0\n");
        return 2;
    }
    check(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, FLOOD_SMEM), "flood shared memory");
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    cudaEvent_t ev[DEPTH];
    for (int i = 0; i < DEPTH; i++)
        check(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming), "event");
    unsigned long long dur = kernel_us * 1000ULL / waves;
    for (int i = 0; i < 3; i++)
        spin<<<sms * waves, THREADS, FLOOD_SMEM, s>>>(dur, NULL);
    check(cudaStreamSynchronize(s), "warm-up");
    touch(ready);
    long n = 0, launched = 0;
    long long w0 = now_ns();
    while (!stop && (now_ns() - w0) / 1e9 < secs) {
        // keep DEPTH kernels queued: wait for the one launched DEPTH ago
        if (launched >= DEPTH) {
            check(cudaEventSynchronize(ev[launched % DEPTH]), "flood wait");
            n++;
        }
        spin<<<sms * waves, THREADS, FLOOD_SMEM, s>>>(dur, NULL);
        check(cudaEventRecord(ev[launched % DEPTH], s), "event record");
        launched++;
    }
    long long w1 = now_ns();
    printf("flood n=%ld kernels_per_s %.2f active_pct %.1f kernel_ms %.3f waves %d\n", n, n / ((w1 - w0) / 1e9),
           100.0 * n * kernel_us * 1e3 / (w1 - w0), kernel_us / 1e3, waves);
    fflush(stdout);
    // the queued kernels end on their own: exit without waiting for them
    // would leave them to the driver's teardown, which waits as well
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    if (argc < 5 || (strcmp(argv[1], "light") != 0 && strcmp(argv[1], "flood") != 0)) {
        fprintf(stderr, "usage: prioprobe light REQS INTERVAL_US KERNEL_US [CALIBRATED GO]\n"
                        "       prioprobe flood KERNEL_US SECS READY\n");
        return 2;
    }
    int sms = 0;
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
    int rc = strcmp(argv[1], "light") == 0 ? light(argc, argv, sms) : flood(argv, sms);
    fflush(stdout);
    return rc;
}
