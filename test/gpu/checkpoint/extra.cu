// More targets for the checkpoint probe (probe.sh), for the cases a
// suspension must know about before relying on it:
//   extra ctx N GIB SECS         N driver-API contexts in one process, GIB each
//   extra ipc-export FILE GIB SECS  memory exported over CUDA IPC (handle in FILE)
//   extra ipc-import FILE SECS      the importer of that memory
// Each prints "ready pid=N", then checks its memory's first and last words
// every 0.2 s for SECS, printing a line a second; status 0 when every check
// matched.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CU(x)                                                                  \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char *n_ = "?";                                                    \
      cuGetErrorName(r_, &n_);                                                 \
      printf("extra: %s: %s\n", #x, n_);                                       \
      fflush(stdout);                                                          \
      exit(3);                                                                 \
    }                                                                          \
  } while (0)
#define RT(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      printf("extra: %s: %s\n", #x, cudaGetErrorName(e_));                     \
      fflush(stdout);                                                          \
      exit(3);                                                                 \
    }                                                                          \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// check(i): 0 when region i reads back as written
typedef int (*check_fn)(int i);

static int run(int n, double secs, check_fn check) {
  printf("ready pid=%d\n", getpid());
  fflush(stdout);
  double t0 = now(), lastprint = t0, last = t0, gapmax = 0;
  unsigned long bad = 0, checks = 0;
  while (now() - t0 < secs) {
    for (int i = 0; i < n; i++, checks++)
      bad += check(i) != 0;
    double t = now();
    if (t - last > gapmax)
      gapmax = t - last;
    last = t;
    if (t - lastprint >= 1.0) {
      printf("t=%.1f checks=%lu bad=%lu gap_max_ms=%.0f\n", t - t0, checks, bad, gapmax * 1e3);
      fflush(stdout);
      lastprint = t;
    }
    usleep(200000);
  }
  printf("done checks=%lu bad=%lu gap_max_ms=%.0f\n", checks, bad, gapmax * 1e3);
  return bad == 0 ? 0 : 1;
}

static CUcontext ctxs[16];
static CUdeviceptr ptrs[16];
static size_t words;

static int check_ctx(int i) {
  unsigned int a = 0, b = 0;
  CU(cuCtxPushCurrent(ctxs[i]));
  CU(cuMemcpyDtoH(&a, ptrs[i], 4));
  CU(cuMemcpyDtoH(&b, ptrs[i] + (words - 1) * 4, 4));
  CU(cuCtxPopCurrent(NULL));
  return !(a == 0xC0DE0000u + i && b == a);
}

static unsigned char *ipc_ptr;
static size_t ipc_bytes;

static int check_ipc(int i) {
  (void)i;
  unsigned char a = 0, b = 0;
  RT(cudaMemcpy(&a, ipc_ptr, 1, cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(&b, ipc_ptr + ipc_bytes - 1, 1, cudaMemcpyDeviceToHost));
  return !(a == 0x5A && b == 0x5A);
}

int main(int argc, char **argv) {
  if (argc >= 5 && !strcmp(argv[1], "ctx")) {
    int n = atoi(argv[2]);
    if (n < 1 || n > 16)
      n = 2;
    size_t bytes = (size_t)(atof(argv[3]) * (1ull << 30));
    words = bytes / 4;
    CU(cuInit(0));
    CUdevice d;
    CU(cuDeviceGet(&d, 0));
    for (int i = 0; i < n; i++) {
#if CUDA_VERSION >= 13000
      CU(cuCtxCreate(&ctxs[i], NULL, 0, d));
#else
      CU(cuCtxCreate(&ctxs[i], 0, d));
#endif
      CU(cuMemAlloc(&ptrs[i], bytes));
      CU(cuMemsetD32(ptrs[i], 0xC0DE0000u + i, words));
      CU(cuCtxSynchronize());
      CU(cuCtxPopCurrent(NULL));
    }
    return run(n, atof(argv[4]), check_ctx);
  }
  if (argc >= 5 && !strcmp(argv[1], "ipc-export")) {
    ipc_bytes = (size_t)(atof(argv[3]) * (1ull << 30));
    RT(cudaMalloc(&ipc_ptr, ipc_bytes));
    RT(cudaMemset(ipc_ptr, 0x5A, ipc_bytes));
    RT(cudaDeviceSynchronize());
    cudaIpcMemHandle_t h;
    RT(cudaIpcGetMemHandle(&h, ipc_ptr));
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(&h, sizeof h, 1, f) != 1 || fclose(f))
      return 4;
    return run(1, atof(argv[4]), check_ipc);
  }
  if (argc >= 4 && !strcmp(argv[1], "ipc-import")) {
    cudaIpcMemHandle_t h;
    FILE *f = fopen(argv[2], "rb");
    if (!f || fread(&h, sizeof h, 1, f) != 1)
      return 4;
    fclose(f);
    RT(cudaIpcOpenMemHandle((void **)&ipc_ptr, h, cudaIpcMemLazyEnablePeerAccess));
    ipc_bytes = 1; // first byte only: the importer does not know the size
    return run(1, atof(argv[3]), check_ipc);
  }
  fprintf(stderr, "usage: extra ctx N GIB SECS | ipc-export FILE GIB SECS | ipc-import FILE SECS\n");
  return 2;
}
