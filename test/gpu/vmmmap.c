/* VMM memory held through a mapping after its handle is released: the driver
 * keeps it until the last mapping goes, so under a memory limit it must still
 * count. Build: nvcc -o vmmmap test/gpu/vmmmap.c -lcuda
 *   vmmmap MIB N [WAIT]   N times: create MIB MiB, map it, release the handle
 *                         (stops at the first refusal); prints the free memory
 *                         the program sees; "mapped=K" then waits for the file
 *                         WAIT (up to 60 s); then unmaps everything.
 * Prints key=value lines. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: vmmmap MIB N [WAIT]\n");
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0) << 20, f = 0, t = 0;
    int n = atoi(argv[2]), k = 0;
    CUdevice dev;
    CUcontext ctx;
    CUresult r;
    CUdeviceptr va[256];
    if (n > 256)
        n = 256;
    if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) || (r = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
        (r = cuCtxSetCurrent(ctx))) {
        printf("error=init %d\n", r);
        return 1;
    }
    cuMemGetInfo(&f, &t);
    printf("total_mib=%zu\nstart_free_mib=%zu\n", t >> 20, f >> 20);
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (; k < n; k++) {
        CUmemGenericAllocationHandle h;
        if ((r = cuMemCreate(&h, size, &prop, 0)) != CUDA_SUCCESS) {
            printf("create_refused_at=%d\ncreate_err=%d\n", k, r);
            break;
        }
        if ((r = cuMemAddressReserve(&va[k], size, 0, 0, 0)) || (r = cuMemMap(va[k], size, 0, h, 0)) ||
            (r = cuMemSetAccess(va[k], size, &acc, 1)) || (r = cuMemsetD8(va[k], 1, size)) || (r = cuMemRelease(h))) {
            printf("error=map %d at %d\n", r, k);
            return 1;
        }
        cuCtxSynchronize();
        cuMemGetInfo(&f, &t);
        printf("free_mib_after_%d=%zu\n", k, f >> 20);
    }
    printf("mapped=%d\n", k);
    fflush(stdout);
    for (int i = 0; i < 600 && argc > 3 && access(argv[3], F_OK) != 0; i++)
        usleep(100000);
    for (int i = 0; i < k; i++)
        if ((r = cuMemUnmap(va[i], size)) || (r = cuMemAddressFree(va[i], size))) {
            printf("error=unmap %d\n", r);
            return 1;
        }
    cuMemGetInfo(&f, &t);
    printf("end_free_mib=%zu\n", f >> 20);
    return 0;
}
