// A CUDA C program as nvcc builds it by default (static cudart: the runtime
// reaches the driver through cuGetProcAddress_v2 only). Prints what it sees
// and how much it can allocate in 256 MiB steps.
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
__global__ void touch(char *p) { p[threadIdx.x] = 1; }
int main() {
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    printf("cudaMemGetInfo: %s total=%zu MiB free=%zu MiB\n", cudaGetErrorName(e), total_b >> 20, free_b >> 20);
    std::vector<void *> held;
    for (;;) {
        void *p = nullptr;
        e = cudaMalloc(&p, 256u << 20);
        if (e != cudaSuccess) break;
        touch<<<1, 32>>>((char *)p);
        held.push_back(p);
    }
    cudaGetLastError();
    printf("cudaMalloc 256 MiB x %zu = %zu MiB, then %s\n", held.size(), held.size() * 256, cudaGetErrorName(e));
    for (void *p : held) cudaFree(p);
    size_t n = held.size();
    held.clear();
    for (size_t i = 0; i < n; i++) {
        void *p = nullptr;
        if (cudaMalloc(&p, 256u << 20) != cudaSuccess) break;
        held.push_back(p);
    }
    printf("after freeing: again %zu x 256 MiB\n", held.size());
    e = cudaDeviceSynchronize();
    printf("sync: %s\n", cudaGetErrorName(e));
    return 0;
}
