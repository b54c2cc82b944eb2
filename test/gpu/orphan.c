/* The fork trick on a real driver (test/gpu/orphan.sh):
 *   orphan MIB [SLEEP_S] [LIB]
 * loads LIB (default libcuda.so.1; "driver": the real driver by its path
 * under /usr/lib/vgpu/driver, around vgpu's library), allocates MIB with
 * cuMemAlloc, waits SLEEP_S seconds (default 1), forks a child that keeps
 * every descriptor (the driver's too) and sleeps, and exits. Prints
 * parent_pid=, allocated_mib=, child_pid=. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: orphan MIB [SLEEP_S] [LIB|driver]\n");
        return 2;
    }
    unsigned long long mib = strtoull(argv[1], NULL, 10);
    int wait_s = argc > 2 ? atoi(argv[2]) : 1;
    const char *lib = argc > 3 ? argv[3] : "libcuda.so.1";
    glob_t g;
    if (strcmp(lib, "driver") == 0) {
        lib = NULL;
        if (glob("/usr/lib/vgpu/driver/libcuda.so.[0-9]*", 0, NULL, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc && !lib; i++) {
                struct stat sb;
                if (stat(g.gl_pathv[i], &sb) == 0 && sb.st_size > 0)
                    lib = g.gl_pathv[i];
            }
        if (!lib) {
            printf("error=no driver under /usr/lib/vgpu/driver\n");
            return 1;
        }
    }
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("error=dlopen %s: %s\n", lib, dlerror());
        return 1;
    }
    CUresult (*init)(unsigned) = dlsym(h, "cuInit");
    CUresult (*devget)(CUdevice *, int) = dlsym(h, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
    CUresult (*alloc)(CUdeviceptr *, size_t) = dlsym(h, "cuMemAlloc_v2");
    CUdevice d;
    CUcontext c;
    CUdeviceptr p;
    CUresult rc;
    if (!init || !devget || !retain || !setcur || !alloc) {
        printf("error=dlsym\n");
        return 1;
    }
    if ((rc = init(0)) || (rc = devget(&d, 0)) || (rc = retain(&c, d)) || (rc = setcur(c)) ||
        (rc = alloc(&p, (size_t)(mib << 20)))) {
        printf("error=cuda %d\n", rc);
        return 1;
    }
    printf("parent_pid=%d allocated_mib=%llu lib=%s\n", (int)getpid(), mib, lib);
    fflush(stdout);
    sleep(wait_s);
    pid_t child = fork();
    if (child == 0)
        for (;;)
            pause();
    printf("child_pid=%d\n", (int)child);
    fflush(stdout);
    return child > 0 ? 0 : 1;
}
