// A module with a 1.75 GiB __device__ array (routes.cu "module"):
//   nvcc -cubin -arch=sm_90 -o big.cubin big.cu
__device__ char big[1879048192ULL];
extern "C" __global__ void touch() { big[blockIdx.x * 4096ULL + threadIdx.x] = 1; }
