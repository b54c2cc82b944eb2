/* A hostile tenant for the vgpu node tests (docs/node.md): takes more device
 * memory than its container's limit by a route the in-process library cannot
 * close, then holds it until stdin closes.
 *   vgpu-attack region MIB   allocates through the stand-in (libcuda.so.1) in
 *                            256 MiB steps, zeroing every slot's usage
 *                            counters in /run/vgpu/shared/vgpu.region before
 *                            each step (attack 1)
 *   vgpu-attack driver MIB   dlopens the real driver by its full path under
 *                            /usr/lib/vgpu/driver and allocates from it (attack 2)
 *   vgpu-attack ns MIB       attack 4: a user and mount namespace of its own,
 *                            /etc/ld.so.preload bound over by /dev/null and a
 *                            tmpfs over /run/vgpu (quota and region hidden), then
 *                            itself again, without the library, as "driver MIB"
 *   vgpu-attack honest MIB   allocates through the stand-in, as any program
 *                            does (the library refuses what passes the limit)
 *   vgpu-attack busy 0 [US]  compute (below) through the stand-in: an honest busy
 *                            tenant the library paces to its limit
 *   vgpu-attack compute 0 [US]  dlopens the real driver by its full path and
 *                            keeps the GPU busy with kernels of US µs (default
 *                            2000), four queued at a time, for ever (a compute
 *                            bypass; kernels of seconds keep the GPU busy while
 *                            the process is frozen: freezing cannot hold it)
 *   vgpu-attack gpuspin CUBIN [NS]  the real driver by its full path; loads
 *                            CUBIN (test/gpu/spin.cu) and launches its spin
 *                            kernel, NS ns a launch (default 2 ms), for ever (a
 *                            compute bypass on a GPU)
 *   vgpu-attack orphan MIB   the real driver by its full path: allocates MIB,
 *                            waits a second (vgpu node sees it), forks a child
 *                            that keeps the driver's descriptors and sleeps,
 *                            and exits: the memory stays, the driver lists the
 *                            exited pid for it (prints "orphaned=CHILD_PID")
 *   vgpu-attack burst MIB [ON_MS OFF_MS]  the real driver by its full path:
 *                            holds MIB for ON_MS (default 300), frees it for
 *                            OFF_MS (default 300), for ever; prints
 *                            "burst_ns=T" (CLOCK_REALTIME) at its first burst
 * Prints "held_mib=N" once it holds N MiB; with a third argument LIMIT_MIB,
 * also "crossed_ns=T" (CLOCK_REALTIME) when its holding first passed LIMIT_MIB. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <sys/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../../../lib/cudahook/include/vgpu_region.h" /* the layout the library keeps */

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

#define MiB  (1024ULL * 1024ULL)
#define STEP (256 * MiB)

static void zero_region(void)
{
    int fd = open("/run/vgpu/shared/vgpu.region", O_RDWR);
    if (fd < 0)
        return;
    size_t size = VGPU_REGION_HEADER + (size_t)VGPU_REGION_SLOTS * VGPU_REGION_SLOT_SIZE;
    char *r = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (r == MAP_FAILED)
        return;
    struct vgpu_region_slot *slots = (struct vgpu_region_slot *)(r + VGPU_REGION_HEADER);
    for (unsigned i = 0; i < VGPU_REGION_SLOTS; i++)
        if (*(volatile uint32_t *)&slots[i].state == 1)
            memset(slots[i].usage, 0, sizeof slots[i].usage);
    munmap(r, size);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: vgpu-attack region|driver MIB\n");
        return 2;
    }
    if (strcmp(argv[1], "ns") == 0) {
        char map[64];
        int uid = (int)getuid(), gid = (int)getgid();
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            perror("unshare");
            printf("error=unshare\n");
            return 1;
        }
        /* map ourselves when allowed (mapping the parent's root needs
         * CAP_SETFCAP, which runc's default set lacks): the capabilities in
         * the new namespace, all we need for the mounts, do not depend on it */
        int fd = open("/proc/self/setgroups", O_WRONLY);
        if (fd >= 0) {
            (void)!write(fd, "deny", 4);
            close(fd);
        }
        snprintf(map, sizeof map, "0 %d 1", uid);
        if ((fd = open("/proc/self/uid_map", O_WRONLY)) >= 0) {
            (void)!write(fd, map, strlen(map));
            close(fd);
        }
        snprintf(map, sizeof map, "0 %d 1", gid);
        if ((fd = open("/proc/self/gid_map", O_WRONLY)) >= 0) {
            (void)!write(fd, map, strlen(map));
            close(fd);
        }
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("/dev/null", "/etc/ld.so.preload", NULL, MS_BIND, NULL) != 0 ||
            mount("tmpfs", "/run/vgpu", "tmpfs", 0, NULL) != 0) {
            perror("mount");
            printf("error=mount\n");
            return 1;
        }
        fflush(stdout);
        execl("/proc/self/exe", argv[0], "driver", argv[2], argc > 3 ? argv[3] : NULL, (char *)NULL);
        printf("error=exec\n");
        return 1;
    }
    int zero = strcmp(argv[1], "region") == 0;
    int busy = strcmp(argv[1], "busy") == 0; /* compute 0 through the library */
    int region = zero || busy || strcmp(argv[1], "honest") == 0, compute = busy || strcmp(argv[1], "compute") == 0;
    unsigned long long want = strtoull(argv[2], NULL, 10) * MiB;
    const char *lib = "libcuda.so.1";
    glob_t g;
    if (!region) {
        if (glob("/usr/lib/vgpu/driver/libcuda.so.[0-9]*", 0, NULL, &g) != 0 || g.gl_pathc < 1) {
            printf("error=no real driver under /usr/lib/vgpu/driver\n");
            return 1;
        }
        /* the shared test rootfs keeps empty mount points of other driver
         * versions: the one mounted here is the one with content */
        lib = NULL;
        for (size_t i = 0; i < g.gl_pathc && !lib; i++) {
            struct stat sb;
            if (stat(g.gl_pathv[i], &sb) == 0 && sb.st_size > 0)
                lib = g.gl_pathv[i];
        }
        if (!lib) {
            printf("error=no real driver under /usr/lib/vgpu/driver\n");
            return 1;
        }
    }
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL | (region ? 0 : RTLD_DEEPBIND));
    if (!h) {
        printf("error=dlopen %s: %s\n", lib, dlerror());
        return 1;
    }
    CUresult (*init)(unsigned) = dlsym(h, "cuInit");
    CUresult (*devget)(CUdevice *, int) = dlsym(h, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = dlsym(h, "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = dlsym(h, "cuCtxSetCurrent");
    CUresult (*alloc)(CUdeviceptr *, size_t) = dlsym(h, "cuMemAlloc_v2");
    if (!init || !devget || !retain || !setcur || !alloc) {
        printf("error=dlsym\n");
        return 1;
    }
    CUdevice d;
    CUcontext c;
    CUresult rc;
    if ((rc = init(0)) || (rc = devget(&d, 0)) || (rc = retain(&c, d)) || (rc = setcur(c))) {
        printf("error=init %d\n", rc);
        return 1;
    }
    if (strcmp(argv[1], "gpuspin") == 0) {
        CUresult (*load)(void **, const char *) = dlsym(h, "cuModuleLoad");
        CUresult (*getf)(void **, void *, const char *) = dlsym(h, "cuModuleGetFunction");
        CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                           void **, void **) = dlsym(h, "cuLaunchKernel");
        CUresult (*sync)(void) = dlsym(h, "cuCtxSynchronize");
        void *mod, *fn;
        if (!load || !getf || !launch || !sync || (rc = load(&mod, argv[2])) || (rc = getf(&fn, mod, "spin"))) {
            printf("error=module %d\n", rc);
            return 1;
        }
        long long ns = argc > 3 ? strtoll(argv[3], NULL, 10) : 2000000;
        void *args[] = {&ns};
        printf("computing=1\n");
        fflush(stdout);
        for (;;) {
            for (int i = 0; i < 4; i++)
                if ((rc = launch(fn, 1024, 1, 1, 128, 1, 1, 0, NULL, args, NULL))) {
                    printf("launch_rc=%d\n", rc);
                    return 1;
                }
            sync();
        }
    }
    if (strcmp(argv[1], "burst") == 0) {
        CUresult (*mfree)(CUdeviceptr) = dlsym(h, "cuMemFree_v2");
        long on = argc > 3 ? atol(argv[3]) : 300, off = argc > 4 ? atol(argv[4]) : 300;
        if (!mfree) {
            printf("error=dlsym cuMemFree_v2\n");
            return 1;
        }
        for (int first = 1;; first = 0) {
            CUdeviceptr p;
            if ((rc = alloc(&p, want))) {
                printf("alloc_rc=%d\n", rc);
                return 1;
            }
            if (first) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                printf("burst_ns=%llu\n",
                       (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec);
                fflush(stdout);
            }
            usleep(on * 1000);
            mfree(p);
            usleep(off * 1000);
        }
    }
    if (compute) {
        CUresult (*load)(void **, const void *) = dlsym(h, "cuModuleLoadData");
        CUresult (*getf)(void **, void *, const char *) = dlsym(h, "cuModuleGetFunction");
        CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                           void **, void **) = dlsym(h, "cuLaunchKernel");
        CUresult (*sync)(void) = dlsym(h, "cuCtxSynchronize");
        void *mod, *fn;
        char kname[64]; /* the simulated GPU: a kernel lasts the µs its name ends in */
        snprintf(kname, sizeof kname, "busy_%lluus", argc > 3 ? strtoull(argv[3], NULL, 10) : 2000ULL);
        if (!load || !getf || !launch || !sync || (rc = load(&mod, kname)) || (rc = getf(&fn, mod, kname))) {
            printf("error=module %d\n", rc);
            return 1;
        }
        printf("computing=1\n");
        fflush(stdout);
        for (;;) {
            for (int i = 0; i < 4; i++)
                if ((rc = launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL))) {
                    printf("launch_rc=%d\n", rc);
                    return 1;
                }
            sync();
        }
    }
    unsigned long long held = 0, limit = argc > 3 ? strtoull(argv[3], NULL, 10) * MiB : 0, crossed = 0;
    while (held < want) {
        CUdeviceptr p;
        if (zero)
            zero_region();
        if ((rc = alloc(&p, STEP)) != 0) {
            printf("alloc_rc=%d\n", rc);
            break;
        }
        held += STEP;
        if (limit && !crossed && held > limit) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            crossed = (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
        }
    }
    if (crossed)
        printf("crossed_ns=%llu\n", crossed);
    printf("held_mib=%llu\n", held / MiB);
    fflush(stdout);
    if (strcmp(argv[1], "orphan") == 0) {
        sleep(1);
        pid_t child = fork();
        if (child == 0)
            for (;;)
                pause();
        printf("orphaned=%d\n", (int)child);
        fflush(stdout);
        return child > 0 ? 0 : 1;
    }
    char ch;
    while (read(0, &ch, 1) > 0)
        ;
    return 0;
}
