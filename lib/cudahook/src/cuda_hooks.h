/* Prototypes of the CUDA wrappers, and how they reach the real entry points
 * (REAL, REALT) and the loader (READY). Shared by every file of the CUDA stand-in. */
#ifndef VGPU_CUDA_HOOKS_H
#define VGPU_CUDA_HOOKS_H
#include "cuda_abi.h"
#include "cuda_table.h"
#include "vgpu.h"
#include "routes.h" /* wrappers of limits.c, modules.c and the v1 and green context exports */

#define REAL(name)        ((__typeof__(&name))vgpu_table[VGPU_IDX_##name])
#define REALT(type, name) ((type)vgpu_table[VGPU_IDX_##name])
/* In every wrapper first: the library resolves itself, or fails closed. */
#define READY()                                                                                                        \
    do {                                                                                                               \
        if (!vgpu_ready())                                                                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                                                         \
    } while (0)

#define E VGPU_EXPORT
E CUresult cuInit(unsigned int flags);
E CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
E CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                               CUdriverProcAddressQueryResult *status);
E CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
E CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem);
E CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
E CUresult cuMemFree_v2(CUdeviceptr dptr);
E CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
E CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int w, unsigned int h, unsigned int e);
E CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
E CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
E CUresult cuArrayCreate(CUarray *arr, const void *desc_v1);
E CUresult cuArray3DCreate(CUarray *arr, const void *desc_v1);
E CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s);
E CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s);
E CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s);
E CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s);
E CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
E CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s);
E CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
E CUresult cuMemPoolDestroy(CUmemoryPool pool);
E CUresult cuGraphAddMemAllocNode(CUgraphNode *pn, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                  CUDA_MEM_ALLOC_NODE_PARAMS *p);
E CUresult cuGraphInstantiate(CUgraphExec *pe, CUgraph g, CUgraphNode *errNode, char *log, size_t logSize);
E CUresult cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph g, CUgraphNode *errNode, char *log, size_t logSize);
E CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph g, unsigned long long flags);
E CUresult cuGraphInstantiateWithParams(CUgraphExec *pe, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p);
E CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *pe, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p);
E CUresult cuGraphUpload(CUgraphExec e, CUstream s);
E CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s);
E CUresult cuGraphExecDestroy(CUgraphExec e);
E CUresult cuDeviceGraphMemTrim(CUdevice dev);
E CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                       unsigned long long flags);
E CUresult cuMemRelease(CUmemGenericAllocationHandle h);
E CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr);
E CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                    unsigned long long flags);
E CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
E CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *desc);
E CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc);
E CUresult cuArrayDestroy(CUarray arr);
E CUresult cuMipmappedArrayCreate(CUmipmappedArray *h, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels);
E CUresult cuMipmappedArrayDestroy(CUmipmappedArray h);
E CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
E CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
E CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
E CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
E CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned int flags, CUdevice dev);
E CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev);
E CUresult cuCtxDestroy_v2(CUcontext ctx);
E CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
E CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
E CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shmem, CUstream s, void **params, void **extra);
E CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **params, void **extra);
E CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
E CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
E CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shmem, CUstream s, void **params);
E CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                          unsigned bz, unsigned shmem, CUstream s, void **params);
E CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n, unsigned int flags);
E CUresult cuGraphLaunch(CUgraphExec g, CUstream s);
E CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s);
E CUresult cuStreamBeginCapture(CUstream s);
E CUresult cuStreamBeginCapture_ptsz(CUstream s);
E CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m);
E CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m);
E CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                       size_t n, CUstreamCaptureMode m);
E CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                            const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode m);
E CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
E CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g);
#undef E

typedef CUresult (*cuCtxGetDevice_t)(CUdevice *);
typedef CUresult (*cuCtxGetExecAffinity_t)(CUexecAffinityParam *, CUexecAffinityType);
typedef CUresult (*cuDeviceGetUuid_t)(CUuuid *, CUdevice);
typedef CUresult (*cuDeviceGetMemPool_t)(CUmemoryPool *, CUdevice);
typedef CUresult (*cuMemPoolGetAttribute_t)(CUmemoryPool, CUmemPool_attribute, void *);
typedef CUresult (*cuDevicePrimaryCtxGetState_t)(CUdevice, unsigned int *, int *);
typedef CUresult (*cuGraphGetNodes_t)(CUgraph, CUgraphNode *, size_t *);
typedef CUresult (*cuGraphNodeGetType_t)(CUgraphNode, CUgraphNodeType *);
typedef CUresult (*cuGraphMemAllocNodeGetParams_t)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *);
typedef CUresult (*cuDeviceGetGraphMemAttribute_t)(CUdevice, CUgraphMem_attribute, void *);
#endif
