// A CUDA process for the checkpoint probe (probe.sh): it fills GIB GiB with a
// known pattern and keeps verifying it on STREAMS streams, printing a line a
// second, so that a suspension shows as a gap and a bad restore as mismatches.
// Options: graph (verify through a CUDA graph), managed=MIB (also touch
// managed memory), spin_ms=N (start with one kernel of N ms).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define K 0x9E3779B97F4A7C15ull
#define CHECK(x)                                                               \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      printf("target: %s: %s\n", #x, cudaGetErrorName(e_));                    \
      fflush(stdout);                                                          \
      exit(3);                                                                 \
    }                                                                          \
  } while (0)

__global__ void fill(unsigned long long *p, size_t n, unsigned long long seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = (i * K) ^ seed;
}

__global__ void verify(const unsigned long long *p, size_t off, size_t n,
                       unsigned long long seed, unsigned long long *bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t j = off + i;
    if (p[j] != ((j * K) ^ seed))
      local++;
  }
  if (local)
    atomicAdd(bad, local);
}

__global__ void touch(unsigned int *m, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    m[i] += 1;
}

__global__ void spin(long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while ((long long)(t - t0) < ns);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: target GIB STREAMS SECONDS [graph] [managed=MIB] [spin_ms=N]\n");
    return 2;
  }
  double gib = atof(argv[1]);
  int ns = atoi(argv[2]);
  double secs = atof(argv[3]);
  int graph = 0;
  size_t managed = 0;
  long long spin_ms = 0;
  for (int i = 4; i < argc; i++) {
    if (!strcmp(argv[i], "graph"))
      graph = 1;
    else if (!strncmp(argv[i], "managed=", 8))
      managed = (size_t)atoll(argv[i] + 8) << 20;
    else if (!strncmp(argv[i], "spin_ms=", 8))
      spin_ms = atoll(argv[i] + 8);
  }
  if (ns < 1 || ns > 16)
    ns = 1;
  size_t n = (size_t)(gib * (1ull << 30)) / 8;
  unsigned long long seed = 0x5eed0000ull + (unsigned long long)getpid();
  unsigned long long *p, *bad;
  unsigned int *m = NULL;
  CHECK(cudaMalloc(&p, n * 8));
  CHECK(cudaMalloc(&bad, 8));
  CHECK(cudaMemset(bad, 0, 8));
  if (managed) {
    CHECK(cudaMallocManaged(&m, managed));
    memset(m, 0, managed);
  }
  fill<<<1024, 256>>>(p, n, seed);
  CHECK(cudaDeviceSynchronize());
  cudaStream_t st[16];
  for (int i = 0; i < ns; i++)
    CHECK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
  size_t chunk = (256ull << 20) / 8;
  if (chunk > n)
    chunk = n;
  size_t chunks = n / chunk;
  cudaGraphExec_t ge = NULL;
  if (graph) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(st[0], cudaStreamCaptureModeThreadLocal));
    for (size_t c = 0; c < chunks; c++)
      verify<<<264, 256, 0, st[0]>>>(p, c * chunk, chunk, seed, bad);
    CHECK(cudaStreamEndCapture(st[0], &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
  }
  printf("ready pid=%d gib=%.1f streams=%d graph=%d managed_mib=%zu\n", getpid(), gib, ns,
         graph, managed >> 20);
  fflush(stdout);
  if (spin_ms) {
    spin<<<1, 1, 0, st[0]>>>(spin_ms * 1000000ll);
    printf("spin launched ms=%lld\n", spin_ms);
    fflush(stdout);
  }
  double t0 = now(), last = t0, lastprint = t0, gapmax = 0;
  unsigned long iters = 0;
  size_t c = 0;
  while (now() - t0 < secs) {
    if (graph) {
      CHECK(cudaGraphLaunch(ge, st[0]));
    } else {
      for (int s = 0; s < ns; s++, c = (c + 1) % chunks)
        verify<<<264, 256, 0, st[s]>>>(p, c * chunk, chunk, seed, bad);
    }
    if (m)
      touch<<<264, 256, 0, st[0]>>>(m, managed / 4);
    CHECK(cudaDeviceSynchronize());
    iters++;
    double t = now();
    if (t - last > gapmax)
      gapmax = t - last;
    last = t;
    if (t - lastprint >= 1.0) {
      unsigned long long b;
      CHECK(cudaMemcpy(&b, bad, 8, cudaMemcpyDeviceToHost));
      printf("t=%.1f iters=%lu bad=%llu gap_max_ms=%.0f\n", t - t0, iters, b, gapmax * 1e3);
      fflush(stdout);
      lastprint = t;
    }
  }
  unsigned long long b;
  CHECK(cudaMemcpy(&b, bad, 8, cudaMemcpyDeviceToHost));
  if (m) {
    unsigned int first = m[0];
    printf("managed first=%u\n", first);
  }
  printf("done iters=%lu bad=%llu gap_max_ms=%.0f\n", iters, b, gapmax * 1e3);
  return b == 0 ? 0 : 1;
}
