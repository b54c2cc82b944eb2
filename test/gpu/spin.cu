// A kernel that keeps its SM busy for ns nanoseconds (globaltimer), for the
// compute bypass of test/gpu/node.sh: nvcc -cubin -arch=sm_90 -o spin.cubin spin.cu
extern "C" __global__ void spin(long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while ((long long)(now - start) < ns);
}
