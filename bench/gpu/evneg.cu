#include <cstdio>
#include <cuda.h>
int main(){ cuInit(0); CUdevice d; cuDeviceGet(&d,0); CUcontext c; cuDevicePrimaryCtxRetain(&c,d); cuCtxSetCurrent(c);
 CUevent a,b; cuEventCreate(&a,0); cuEventCreate(&b,0); cuEventRecord(a,0); cuEventRecord(b,0); cuCtxSynchronize();
 float ms=0; CUresult r=cuEventElapsedTime(&ms,b,a); printf("elapsed(later,earlier)=%d %f\n",(int)r,ms);
 r=cuEventElapsedTime(&ms,a,b); printf("elapsed(earlier,later)=%d %f\n",(int)r,ms); return 0;}
