/* Facts about the real driver that the simulator and the library rely on:
 * context footprint, cuGetProcAddress mapping for versions and flags. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <cuda.h>
#include <nvml.h>
typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    void *hn = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h || !hn) {
        printf("dlopen failed %s\n", dlerror());
        return 1;
    }
    gpa_t gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = dlsym(h, "cuInit");
    printf("cuInit %d\n", init(0));
    const char *names[] = {"cuMemAlloc",
                           "cuMemGetInfo",
                           "cuCtxCreate",
                           "cuLaunchKernel",
                           "cuLaunchKernelEx",
                           "cuMemcpyHtoD",
                           "cuMemcpyAsync",
                           "cuStreamSynchronize",
                           "cuGraphLaunch",
                           "cuMemAllocAsync",
                           "cuMemAllocFromPoolAsync",
                           "cuMemFreeAsync",
                           "cuGetProcAddress",
                           "cuDeviceTotalMem",
                           "cuGraphInstantiate",
                           "cuStreamBeginCapture",
                           "cuMemAllocPitch",
                           "cuArrayCreate",
                           "cuArray3DCreate",
                           "cuDevicePrimaryCtxRelease",
                           "cuEventElapsedTime",
                           "cuLaunchCooperativeKernel",
                           "cuMemsetD8",
                           "cuMemsetD32Async",
                           "cuEventRecord",
                           "cuStreamQuery",
                           "cuCtxDestroy",
                           "cuMemcpy",
                           "cuMemcpyDtoH",
                           "cuStreamGetCaptureInfo",
                           "cuGraphAddKernelNode",
                           "cuLaunchHostFunc",
                           "cuMemFree",
                           "cuModuleGetGlobal",
                           "cuDeviceGetUuid",
                           "cuGraphExecUpdate",
                           "cuCtxGetDevice",
                           NULL};
    int versions[] = {3000, 3020, 11000, 12000, 12080, 13000};
    for (int i = 0; names[i]; i++) {
        for (unsigned v = 0; v < sizeof versions / sizeof versions[0]; v++) {
            for (int fl = 0; fl < 3; fl++) {
                void *p = NULL;
                CUdriverProcAddressQueryResult st = 99;
                CUresult r = gpa(names[i], &p, versions[v], (cuuint64_t)(fl == 0 ? 0 : fl == 1 ? 1 : 2), &st);
                Dl_info di;
                const char *sym = "?";
                if (p && dladdr(p, &di) && di.dli_sname)
                    sym = di.dli_sname;
                printf("gpa %s v%d f%d -> r=%d st=%d %s\n", names[i], versions[v], fl, r, st, p ? sym : "NULL");
            }
        }
    }
    nvmlReturn_t (*ninit)(void) = dlsym(hn, "nvmlInit_v2");
    nvmlReturn_t (*nh)(unsigned, nvmlDevice_t *) = dlsym(hn, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*nm)(nvmlDevice_t, nvmlMemory_t *) = dlsym(hn, "nvmlDeviceGetMemoryInfo");
    ninit();
    nvmlDevice_t d;
    nh(0, &d);
    nvmlMemory_t m0, m1, m2;
    nm(d, &m0);
    CUresult (*ret)(CUcontext *, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
    CUresult (*setc)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
    CUresult (*mgi)(size_t *, size_t *) = dlsym(h, "cuMemGetInfo_v2");
    CUresult (*ma)(CUdeviceptr *, size_t) = dlsym(h, "cuMemAlloc_v2");
    CUcontext c;
    printf("retain %d\n", ret(&c, 0));
    setc(c);
    size_t fr, tot;
    mgi(&fr, &tot);
    nm(d, &m1);
    printf("nvml before ctx used=%llu total=%llu; after used=%llu; ctx cost=%lld; cuMemGetInfo free=%zu total=%zu\n",
           m0.used, m0.total, m1.used, (long long)(m1.used - m0.used), fr, tot);
    CUdeviceptr p;
    ma(&p, 1);
    nm(d, &m2);
    size_t fr2;
    mgi(&fr2, &tot);
    printf("1-byte alloc: nvml used delta=%lld, cuMemGetInfo free delta=%lld\n", (long long)(m2.used - m1.used),
           (long long)fr - (long long)fr2);
    ma(&p, 3u << 20);
    size_t fr3;
    mgi(&fr3, &tot);
    printf("3MiB alloc: cuMemGetInfo free delta=%lld\n", (long long)fr2 - (long long)fr3);
    size_t pitch;
    CUdeviceptr pp;
    CUresult (*map)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) = dlsym(h, "cuMemAllocPitch_v2");
    printf("pitch r=%d ", map(&pp, &pitch, 1000, 10, 4));
    printf("pitch(1000)=%zu\n", pitch);
    return 0;
}
