// Launch-path micro-benchmarks (bench/gpu/run.sh runs them native and under
// the library): empty-kernel launch rate, cudaMalloc/cudaFree pairs.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
__global__ void empty() {}
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "launch";
    cudaFree(0);
    if (!strcmp(what, "launch")) {
        const int n = 200000;
        for (int i = 0; i < 1000; i++) empty<<<1, 1>>>();
        cudaDeviceSynchronize();
        double t0 = now();
        for (int i = 0; i < n; i++) empty<<<1, 1>>>();
        cudaDeviceSynchronize();
        printf("launch_per_s %.0f\n", n / (now() - t0));
    } else {
        const int n = 20000;
        void *p;
        double t0 = now();
        for (int i = 0; i < n; i++) { cudaMalloc(&p, 1 << 20); cudaFree(p); }
        printf("malloc_free_per_s %.0f\n", n / (now() - t0));
    }
    return 0;
}
