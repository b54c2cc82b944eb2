/* cuGetProcAddress: base name + cudaVersion + flags -> the versioned symbol.
 * Table (edit by hand; the extern declarations must name every symbol). Each row: base
 * name, CUDA version that introduced that variant, its symbol, and the per-thread
 * default stream variant (_ptsz/_ptds) if the driver has one. The newest row whose
 * version <= cudaVersion wins, as in the real driver. */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <string.h>

#define F(x) extern char x[];
F(cuArray3DCreate_v2)
F(cuArray3DGetDescriptor_v2)
F(cuArrayCreate_v2)
F(cuArrayDestroy)
F(cuArrayGetDescriptor_v2)
F(cuCheckpointProcessCheckpoint)
F(cuCheckpointProcessGetRestoreThreadId)
F(cuCheckpointProcessGetState)
F(cuCheckpointProcessLock)
F(cuCheckpointProcessRestore)
F(cuCheckpointProcessUnlock)
F(cuCtxCreate)
F(cuCtxFromGreenCtx)
F(cuDevResourceGenerateDesc)
F(cuDeviceGetDevResource)
F(cuGreenCtxCreate)
F(cuGreenCtxDestroy)
F(cuCtxCreate_v2)
F(cuCtxCreate_v3)
F(cuCtxCreate_v4)
F(cuCtxDestroy)
F(cuCtxDestroy_v2)
F(cuCtxDisablePeerAccess)
F(cuCtxEnablePeerAccess)
F(cuCtxGetApiVersion)
F(cuCtxGetCacheConfig)
F(cuCtxGetCurrent)
F(cuCtxGetDevice)
F(cuCtxGetExecAffinity)
F(cuDeviceGetExecAffinitySupport)
F(cuCtxGetFlags)
F(cuCtxGetId)
F(cuCtxGetLimit)
F(cuCtxGetSharedMemConfig)
F(cuCtxGetStreamPriorityRange)
F(cuCtxPopCurrent_v2)
F(cuCtxPushCurrent_v2)
F(cuCtxResetPersistingL2Cache)
F(cuCtxSetCacheConfig)
F(cuCtxSetCurrent)
F(cuCtxSetFlags)
F(cuCtxSetLimit)
F(cuCtxSetSharedMemConfig)
F(cuCtxSynchronize)
F(cuDeviceCanAccessPeer)
F(cuDeviceComputeCapability)
F(cuDeviceGet)
F(cuDeviceGetAttribute)
F(cuDeviceGetByPCIBusId)
F(cuDeviceGetCount)
F(cuDeviceGetDefaultMemPool)
F(cuDeviceGetGraphMemAttribute)
F(cuDeviceGetLuid)
F(cuDeviceGetMemPool)
F(cuDeviceGetName)
F(cuDeviceGetP2PAttribute)
F(cuDeviceGetPCIBusId)
F(cuDeviceGetTexture1DLinearMaxWidth)
F(cuDeviceGetUuid)
F(cuDeviceGetUuid_v2)
F(cuDeviceGraphMemTrim)
F(cuDevicePrimaryCtxGetState)
F(cuDevicePrimaryCtxRelease)
F(cuDevicePrimaryCtxRelease_v2)
F(cuDevicePrimaryCtxReset)
F(cuDevicePrimaryCtxReset_v2)
F(cuDevicePrimaryCtxRetain)
F(cuDevicePrimaryCtxSetFlags)
F(cuDevicePrimaryCtxSetFlags_v2)
F(cuDeviceSetGraphMemAttribute)
F(cuDeviceSetMemPool)
F(cuDeviceTotalMem)
F(cuDeviceTotalMem_v2)
F(cuDriverGetVersion)
F(cuEventCreate)
F(cuEventDestroy_v2)
F(cuEventElapsedTime)
F(cuEventElapsedTime_v2)
F(cuEventQuery)
F(cuEventRecord)
F(cuEventRecordWithFlags)
F(cuEventRecordWithFlags_ptsz)
F(cuEventRecord_ptsz)
F(cuEventSynchronize)
F(cuFuncGetAttribute)
F(cuFuncGetName)
F(cuFuncSetAttribute)
F(cuFuncSetCacheConfig)
F(cuGetErrorName)
F(cuGetErrorString)
F(cuGetExportTable)
F(cuGraphAddEmptyNode)
F(cuGraphAddHostNode)
F(cuGraphAddKernelNode)
F(cuGraphAddKernelNode_v2)
F(cuGraphAddMemAllocNode)
F(cuGraphAddMemFreeNode)
F(cuGraphCreate)
F(cuGraphDestroy)
F(cuGraphExecDestroy)
F(cuGraphGetNodes)
F(cuGraphInstantiate)
F(cuGraphInstantiateWithFlags)
F(cuGraphInstantiateWithParams)
F(cuGraphInstantiateWithParams_ptsz)
F(cuGraphInstantiate_v2)
F(cuGraphLaunch)
F(cuGraphLaunch_ptsz)
F(cuGraphMemAllocNodeGetParams)
F(cuGraphMemFreeNodeGetParams)
F(cuGraphNodeGetType)
F(cuGraphUpload)
F(cuGraphUpload_ptsz)
F(cuInit)
F(cuKernelGetFunction)
F(cuLaunchCooperativeKernel)
F(cuLaunchCooperativeKernel_ptsz)
F(cuLaunchCooperativeKernelMultiDevice)
F(cuLaunchHostFunc)
F(cuLaunchHostFunc_ptsz)
F(cuLaunchKernel)
F(cuLaunchKernelEx)
F(cuLaunchKernelEx_ptsz)
F(cuLaunchKernel_ptsz)
F(cuLibraryGetGlobal)
F(cuLibraryGetKernel)
F(cuLibraryGetModule)
F(cuLibraryLoadData)
F(cuLibraryUnload)
F(cuMemAddressFree)
F(cuMemAddressReserve)
F(cuMemAllocAsync)
F(cuMemAllocAsync_ptsz)
F(cuMemAllocFromPoolAsync)
F(cuMemAllocFromPoolAsync_ptsz)
F(cuMemAllocHost_v2)
F(cuMemAllocManaged)
F(cuMemAllocPitch_v2)
F(cuMemAlloc_v2)
F(cuMemCreate)
F(cuMemFreeAsync)
F(cuMemFreeAsync_ptsz)
F(cuMemFreeHost)
F(cuMemFree_v2)
F(cuMemGetAccess)
F(cuMemGetAddressRange_v2)
F(cuMemGetAllocationGranularity)
F(cuMemGetAllocationPropertiesFromHandle)
F(cuMemGetInfo_v2)
F(cuMemHostAlloc)
F(cuMemHostGetDevicePointer_v2)
F(cuMemHostGetFlags)
F(cuMemHostRegister)
F(cuMemHostRegister_v2)
F(cuMemHostUnregister)
F(cuMemMap)
F(cuMemPoolCreate)
F(cuMemPoolDestroy)
F(cuMemPoolGetAttribute)
F(cuMemPoolSetAccess)
F(cuMemPoolSetAttribute)
F(cuMemPoolTrimTo)
F(cuMemRelease)
F(cuMemRetainAllocationHandle)
F(cuMemSetAccess)
F(cuMemUnmap)
F(cuMemcpy)
F(cuMemcpy2DAsync_v2)
F(cuMemcpy2DAsync_v2_ptsz)
F(cuMemcpy2DUnaligned_v2)
F(cuMemcpy2DUnaligned_v2_ptds)
F(cuMemcpy2D_v2)
F(cuMemcpy2D_v2_ptds)
F(cuMemcpyAsync)
F(cuMemcpyAsync_ptsz)
F(cuMemcpyDtoDAsync_v2)
F(cuMemcpyDtoDAsync_v2_ptsz)
F(cuMemcpyDtoD_v2)
F(cuMemcpyDtoD_v2_ptds)
F(cuMemcpyDtoHAsync_v2)
F(cuMemcpyDtoHAsync_v2_ptsz)
F(cuMemcpyDtoH_v2)
F(cuMemcpyDtoH_v2_ptds)
F(cuMemcpyHtoDAsync_v2)
F(cuMemcpyHtoDAsync_v2_ptsz)
F(cuMemcpyHtoD_v2)
F(cuMemcpyHtoD_v2_ptds)
F(cuMemcpyPeer)
F(cuMemcpyPeerAsync)
F(cuMemcpy_ptds)
F(cuMemsetD16Async)
F(cuMemsetD16Async_ptsz)
F(cuMemsetD16_v2)
F(cuMemsetD16_v2_ptds)
F(cuMemsetD2D16_v2)
F(cuMemsetD2D32Async)
F(cuMemsetD2D32_v2)
F(cuMemsetD2D8Async)
F(cuMemsetD2D8_v2)
F(cuMemsetD2D8_v2_ptds)
F(cuMemsetD32Async)
F(cuMemsetD32Async_ptsz)
F(cuMemsetD32_v2)
F(cuMemsetD32_v2_ptds)
F(cuMemsetD8Async)
F(cuMemsetD8Async_ptsz)
F(cuMemsetD8_v2)
F(cuMemsetD8_v2_ptds)
F(cuMipmappedArrayCreate)
F(cuMipmappedArrayDestroy)
F(cuModuleGetFunction)
F(cuModuleGetGlobal_v2)
F(cuModuleGetLoadingMode)
F(cuModuleLoad)
F(cuModuleLoadData)
F(cuModuleLoadDataEx)
F(cuModuleLoadFatBinary)
F(cuModuleUnload)
F(cuOccupancyMaxActiveBlocksPerMultiprocessor)
F(cuPointerGetAttribute)
F(cuPointerGetAttributes)
F(cuProfilerStart)
F(cuProfilerStop)
F(cuStreamAddCallback)
F(cuStreamAddCallback_ptsz)
F(cuStreamBeginCapture)
F(cuStreamBeginCapture_ptsz)
F(cuStreamBeginCapture_v2)
F(cuStreamBeginCapture_v2_ptsz)
F(cuStreamCreate)
F(cuStreamCreateWithPriority)
F(cuStreamDestroy_v2)
F(cuStreamEndCapture)
F(cuStreamEndCapture_ptsz)
F(cuStreamGetCaptureInfo)
F(cuStreamGetCaptureInfo_ptsz)
F(cuStreamGetCaptureInfo_v2)
F(cuStreamGetCaptureInfo_v2_ptsz)
F(cuStreamGetCaptureInfo_v3)
F(cuStreamGetCaptureInfo_v3_ptsz)
F(cuStreamGetCtx)
F(cuStreamGetCtx_ptsz)
F(cuStreamGetFlags)
F(cuStreamGetFlags_ptsz)
F(cuStreamGetId)
F(cuStreamGetId_ptsz)
F(cuStreamGetPriority)
F(cuStreamGetPriority_ptsz)
F(cuStreamIsCapturing)
F(cuStreamIsCapturing_ptsz)
F(cuStreamQuery)
F(cuStreamQuery_ptsz)
F(cuStreamSynchronize)
F(cuStreamSynchronize_ptsz)
F(cuStreamWaitEvent)
F(cuStreamWaitEvent_ptsz)
F(cuThreadExchangeStreamCaptureMode)
#undef F
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

struct procent {
    const char *base;
    int ver;
    void *fn, *pt;
};

static const struct procent procs[] = {
    {"cuInit", 2000, (void *)cuInit, NULL},
    {"cuDriverGetVersion", 2020, (void *)cuDriverGetVersion, NULL},
    {"cuGetErrorString", 6000, (void *)cuGetErrorString, NULL},
    {"cuGetErrorName", 6000, (void *)cuGetErrorName, NULL},
    {"cuGetExportTable", 3000, (void *)cuGetExportTable, NULL},
    {"cuGetProcAddress", 11030, (void *)cuGetProcAddress, NULL},
    {"cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2, NULL},
    {"cuDeviceGet", 2000, (void *)cuDeviceGet, NULL},
    {"cuDeviceGetCount", 2000, (void *)cuDeviceGetCount, NULL},
    {"cuDeviceGetName", 2000, (void *)cuDeviceGetName, NULL},
    {"cuDeviceGetUuid", 9020, (void *)cuDeviceGetUuid, NULL},
    {"cuDeviceGetUuid", 11040, (void *)cuDeviceGetUuid_v2, NULL},
    {"cuDeviceGetLuid", 10000, (void *)cuDeviceGetLuid, NULL},
    {"cuDeviceTotalMem", 2000, (void *)cuDeviceTotalMem, NULL},
    {"cuDeviceTotalMem", 3020, (void *)cuDeviceTotalMem_v2, NULL},
    {"cuDeviceGetAttribute", 2000, (void *)cuDeviceGetAttribute, NULL},
    {"cuDeviceComputeCapability", 2000, (void *)cuDeviceComputeCapability, NULL},
    {"cuDeviceGetPCIBusId", 4010, (void *)cuDeviceGetPCIBusId, NULL},
    {"cuDeviceGetByPCIBusId", 4010, (void *)cuDeviceGetByPCIBusId, NULL},
    {"cuDeviceCanAccessPeer", 4000, (void *)cuDeviceCanAccessPeer, NULL},
    {"cuDeviceGetP2PAttribute", 8000, (void *)cuDeviceGetP2PAttribute, NULL},
    {"cuDeviceGetTexture1DLinearMaxWidth", 11010, (void *)cuDeviceGetTexture1DLinearMaxWidth, NULL},
    {"cuDevicePrimaryCtxRetain", 7000, (void *)cuDevicePrimaryCtxRetain, NULL},
    {"cuDevicePrimaryCtxRelease", 7000, (void *)cuDevicePrimaryCtxRelease, NULL},
    {"cuDevicePrimaryCtxRelease", 11000, (void *)cuDevicePrimaryCtxRelease_v2, NULL},
    {"cuDevicePrimaryCtxReset", 7000, (void *)cuDevicePrimaryCtxReset, NULL},
    {"cuDevicePrimaryCtxReset", 11000, (void *)cuDevicePrimaryCtxReset_v2, NULL},
    {"cuDevicePrimaryCtxSetFlags", 7000, (void *)cuDevicePrimaryCtxSetFlags, NULL},
    {"cuDevicePrimaryCtxSetFlags", 11000, (void *)cuDevicePrimaryCtxSetFlags_v2, NULL},
    {"cuDevicePrimaryCtxGetState", 7000, (void *)cuDevicePrimaryCtxGetState, NULL},
    {"cuCtxCreate", 2000, (void *)cuCtxCreate, NULL},
    {"cuCtxCreate", 3020, (void *)cuCtxCreate_v2, NULL},
    {"cuCtxCreate", 11040, (void *)cuCtxCreate_v3, NULL},
    {"cuCtxCreate", 12050, (void *)cuCtxCreate_v4, NULL},
    {"cuCtxDestroy", 2000, (void *)cuCtxDestroy, NULL},
    {"cuDeviceGetDevResource", 12040, (void *)cuDeviceGetDevResource, NULL},
    {"cuDevResourceGenerateDesc", 12040, (void *)cuDevResourceGenerateDesc, NULL},
    {"cuGreenCtxCreate", 12040, (void *)cuGreenCtxCreate, NULL},
    {"cuCtxFromGreenCtx", 12040, (void *)cuCtxFromGreenCtx, NULL},
    {"cuGreenCtxDestroy", 12040, (void *)cuGreenCtxDestroy, NULL},
    {"cuCtxDestroy", 4000, (void *)cuCtxDestroy_v2, NULL},
    {"cuCtxPushCurrent", 4000, (void *)cuCtxPushCurrent_v2, NULL},
    {"cuCtxPopCurrent", 4000, (void *)cuCtxPopCurrent_v2, NULL},
    {"cuCtxSetCurrent", 4000, (void *)cuCtxSetCurrent, NULL},
    {"cuCtxGetCurrent", 4000, (void *)cuCtxGetCurrent, NULL},
    {"cuCtxGetDevice", 2000, (void *)cuCtxGetDevice, NULL},
    {"cuCtxGetExecAffinity", 11040, (void *)cuCtxGetExecAffinity, NULL},
    {"cuDeviceGetExecAffinitySupport", 11040, (void *)cuDeviceGetExecAffinitySupport, NULL},
    {"cuCtxSynchronize", 2000, (void *)cuCtxSynchronize, NULL},
    {"cuCtxGetFlags", 7000, (void *)cuCtxGetFlags, NULL},
    {"cuCtxSetFlags", 12010, (void *)cuCtxSetFlags, NULL},
    {"cuCtxGetId", 12000, (void *)cuCtxGetId, NULL},
    {"cuCtxGetApiVersion", 3020, (void *)cuCtxGetApiVersion, NULL},
    {"cuCtxGetLimit", 3010, (void *)cuCtxGetLimit, NULL},
    {"cuCtxSetLimit", 3010, (void *)cuCtxSetLimit, NULL},
    {"cuCtxGetCacheConfig", 3020, (void *)cuCtxGetCacheConfig, NULL},
    {"cuCtxSetCacheConfig", 3020, (void *)cuCtxSetCacheConfig, NULL},
    {"cuCtxGetSharedMemConfig", 4020, (void *)cuCtxGetSharedMemConfig, NULL},
    {"cuCtxSetSharedMemConfig", 4020, (void *)cuCtxSetSharedMemConfig, NULL},
    {"cuCtxGetStreamPriorityRange", 5050, (void *)cuCtxGetStreamPriorityRange, NULL},
    {"cuCtxResetPersistingL2Cache", 11000, (void *)cuCtxResetPersistingL2Cache, NULL},
    {"cuCtxEnablePeerAccess", 4000, (void *)cuCtxEnablePeerAccess, NULL},
    {"cuCtxDisablePeerAccess", 4000, (void *)cuCtxDisablePeerAccess, NULL},
    {"cuModuleLoad", 2000, (void *)cuModuleLoad, NULL},
    {"cuModuleLoadData", 2000, (void *)cuModuleLoadData, NULL},
    {"cuModuleLoadDataEx", 2010, (void *)cuModuleLoadDataEx, NULL},
    {"cuModuleLoadFatBinary", 2000, (void *)cuModuleLoadFatBinary, NULL},
    {"cuModuleUnload", 2000, (void *)cuModuleUnload, NULL},
    {"cuModuleGetFunction", 2000, (void *)cuModuleGetFunction, NULL},
    {"cuModuleGetGlobal", 3020, (void *)cuModuleGetGlobal_v2, NULL},
    {"cuLibraryGetGlobal", 12000, (void *)cuLibraryGetGlobal, NULL},
    {"cuLibraryGetModule", 12000, (void *)cuLibraryGetModule, NULL},
    {"cuModuleGetLoadingMode", 11070, (void *)cuModuleGetLoadingMode, NULL},
    {"cuLibraryLoadData", 12000, (void *)cuLibraryLoadData, NULL},
    {"cuLibraryUnload", 12000, (void *)cuLibraryUnload, NULL},
    {"cuLibraryGetKernel", 12000, (void *)cuLibraryGetKernel, NULL},
    {"cuKernelGetFunction", 12000, (void *)cuKernelGetFunction, NULL},
    {"cuFuncGetAttribute", 2020, (void *)cuFuncGetAttribute, NULL},
    {"cuFuncSetAttribute", 9000, (void *)cuFuncSetAttribute, NULL},
    {"cuFuncSetCacheConfig", 3000, (void *)cuFuncSetCacheConfig, NULL},
    {"cuFuncGetName", 12030, (void *)cuFuncGetName, NULL},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, (void *)cuOccupancyMaxActiveBlocksPerMultiprocessor, NULL},
    {"cuCheckpointProcessGetRestoreThreadId", 12080, (void *)cuCheckpointProcessGetRestoreThreadId, NULL},
    {"cuCheckpointProcessGetState", 12080, (void *)cuCheckpointProcessGetState, NULL},
    {"cuCheckpointProcessLock", 12080, (void *)cuCheckpointProcessLock, NULL},
    {"cuCheckpointProcessCheckpoint", 12080, (void *)cuCheckpointProcessCheckpoint, NULL},
    {"cuCheckpointProcessRestore", 12080, (void *)cuCheckpointProcessRestore, NULL},
    {"cuCheckpointProcessUnlock", 12080, (void *)cuCheckpointProcessUnlock, NULL},
    {"cuMemGetInfo", 3020, (void *)cuMemGetInfo_v2, NULL},
    {"cuMemAlloc", 3020, (void *)cuMemAlloc_v2, NULL},
    {"cuMemAllocPitch", 3020, (void *)cuMemAllocPitch_v2, NULL},
    {"cuMemFree", 3020, (void *)cuMemFree_v2, NULL},
    {"cuMemGetAddressRange", 3020, (void *)cuMemGetAddressRange_v2, NULL},
    {"cuMemAllocManaged", 6000, (void *)cuMemAllocManaged, NULL},
    {"cuMemAllocHost", 3020, (void *)cuMemAllocHost_v2, NULL},
    {"cuMemHostAlloc", 2020, (void *)cuMemHostAlloc, NULL},
    {"cuMemFreeHost", 2000, (void *)cuMemFreeHost, NULL},
    {"cuMemHostGetDevicePointer", 3020, (void *)cuMemHostGetDevicePointer_v2, NULL},
    {"cuMemHostGetFlags", 2030, (void *)cuMemHostGetFlags, NULL},
    {"cuMemHostRegister", 4000, (void *)cuMemHostRegister, NULL},
    {"cuMemHostRegister", 6050, (void *)cuMemHostRegister_v2, NULL},
    {"cuMemHostUnregister", 4000, (void *)cuMemHostUnregister, NULL},
    {"cuMemcpy", 4000, (void *)cuMemcpy, (void *)cuMemcpy_ptds},
    {"cuMemcpyAsync", 4000, (void *)cuMemcpyAsync, (void *)cuMemcpyAsync_ptsz},
    {"cuMemcpyPeer", 4000, (void *)cuMemcpyPeer, NULL},
    {"cuMemcpyPeerAsync", 4000, (void *)cuMemcpyPeerAsync, NULL},
    {"cuMemcpyHtoD", 3020, (void *)cuMemcpyHtoD_v2, (void *)cuMemcpyHtoD_v2_ptds},
    {"cuMemcpyDtoH", 3020, (void *)cuMemcpyDtoH_v2, (void *)cuMemcpyDtoH_v2_ptds},
    {"cuMemcpyDtoD", 3020, (void *)cuMemcpyDtoD_v2, (void *)cuMemcpyDtoD_v2_ptds},
    {"cuMemcpyHtoDAsync", 3020, (void *)cuMemcpyHtoDAsync_v2, (void *)cuMemcpyHtoDAsync_v2_ptsz},
    {"cuMemcpyDtoHAsync", 3020, (void *)cuMemcpyDtoHAsync_v2, (void *)cuMemcpyDtoHAsync_v2_ptsz},
    {"cuMemcpyDtoDAsync", 3020, (void *)cuMemcpyDtoDAsync_v2, (void *)cuMemcpyDtoDAsync_v2_ptsz},
    {"cuMemcpy2D", 3020, (void *)cuMemcpy2D_v2, (void *)cuMemcpy2D_v2_ptds},
    {"cuMemcpy2DUnaligned", 3020, (void *)cuMemcpy2DUnaligned_v2, (void *)cuMemcpy2DUnaligned_v2_ptds},
    {"cuMemcpy2DAsync", 3020, (void *)cuMemcpy2DAsync_v2, (void *)cuMemcpy2DAsync_v2_ptsz},
    {"cuMemsetD8", 3020, (void *)cuMemsetD8_v2, (void *)cuMemsetD8_v2_ptds},
    {"cuMemsetD16", 3020, (void *)cuMemsetD16_v2, (void *)cuMemsetD16_v2_ptds},
    {"cuMemsetD32", 3020, (void *)cuMemsetD32_v2, (void *)cuMemsetD32_v2_ptds},
    {"cuMemsetD8Async", 3020, (void *)cuMemsetD8Async, (void *)cuMemsetD8Async_ptsz},
    {"cuMemsetD16Async", 3020, (void *)cuMemsetD16Async, (void *)cuMemsetD16Async_ptsz},
    {"cuMemsetD32Async", 3020, (void *)cuMemsetD32Async, (void *)cuMemsetD32Async_ptsz},
    {"cuMemsetD2D8", 3020, (void *)cuMemsetD2D8_v2, (void *)cuMemsetD2D8_v2_ptds},
    {"cuMemsetD2D16", 3020, (void *)cuMemsetD2D16_v2, NULL},
    {"cuMemsetD2D32", 3020, (void *)cuMemsetD2D32_v2, NULL},
    {"cuMemsetD2D8Async", 3020, (void *)cuMemsetD2D8Async, NULL},
    {"cuMemsetD2D32Async", 3020, (void *)cuMemsetD2D32Async, NULL},
    {"cuArrayCreate", 3020, (void *)cuArrayCreate_v2, NULL},
    {"cuArray3DCreate", 3020, (void *)cuArray3DCreate_v2, NULL},
    {"cuArrayDestroy", 2000, (void *)cuArrayDestroy, NULL},
    {"cuArrayGetDescriptor", 3020, (void *)cuArrayGetDescriptor_v2, NULL},
    {"cuArray3DGetDescriptor", 3020, (void *)cuArray3DGetDescriptor_v2, NULL},
    {"cuMipmappedArrayCreate", 5000, (void *)cuMipmappedArrayCreate, NULL},
    {"cuMipmappedArrayDestroy", 5000, (void *)cuMipmappedArrayDestroy, NULL},
    {"cuMemAddressReserve", 10020, (void *)cuMemAddressReserve, NULL},
    {"cuMemAddressFree", 10020, (void *)cuMemAddressFree, NULL},
    {"cuMemCreate", 10020, (void *)cuMemCreate, NULL},
    {"cuMemRelease", 10020, (void *)cuMemRelease, NULL},
    {"cuMemMap", 10020, (void *)cuMemMap, NULL},
    {"cuMemUnmap", 10020, (void *)cuMemUnmap, NULL},
    {"cuMemSetAccess", 10020, (void *)cuMemSetAccess, NULL},
    {"cuMemGetAccess", 10020, (void *)cuMemGetAccess, NULL},
    {"cuMemGetAllocationGranularity", 10020, (void *)cuMemGetAllocationGranularity, NULL},
    {"cuMemGetAllocationPropertiesFromHandle", 10020, (void *)cuMemGetAllocationPropertiesFromHandle, NULL},
    {"cuMemRetainAllocationHandle", 11000, (void *)cuMemRetainAllocationHandle, NULL},
    {"cuMemAllocAsync", 11020, (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz},
    {"cuMemFreeAsync", 11020, (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz},
    {"cuMemAllocFromPoolAsync", 11020, (void *)cuMemAllocFromPoolAsync, (void *)cuMemAllocFromPoolAsync_ptsz},
    {"cuMemPoolCreate", 11020, (void *)cuMemPoolCreate, NULL},
    {"cuMemPoolDestroy", 11020, (void *)cuMemPoolDestroy, NULL},
    {"cuMemPoolTrimTo", 11020, (void *)cuMemPoolTrimTo, NULL},
    {"cuMemPoolSetAttribute", 11020, (void *)cuMemPoolSetAttribute, NULL},
    {"cuMemPoolGetAttribute", 11020, (void *)cuMemPoolGetAttribute, NULL},
    {"cuMemPoolSetAccess", 11020, (void *)cuMemPoolSetAccess, NULL},
    {"cuDeviceGetDefaultMemPool", 11020, (void *)cuDeviceGetDefaultMemPool, NULL},
    {"cuDeviceGetMemPool", 11020, (void *)cuDeviceGetMemPool, NULL},
    {"cuDeviceSetMemPool", 11020, (void *)cuDeviceSetMemPool, NULL},
    {"cuPointerGetAttribute", 4000, (void *)cuPointerGetAttribute, NULL},
    {"cuPointerGetAttributes", 7000, (void *)cuPointerGetAttributes, NULL},
    {"cuStreamCreate", 2000, (void *)cuStreamCreate, NULL},
    {"cuStreamCreateWithPriority", 5050, (void *)cuStreamCreateWithPriority, NULL},
    {"cuStreamDestroy", 4000, (void *)cuStreamDestroy_v2, NULL},
    {"cuStreamSynchronize", 2000, (void *)cuStreamSynchronize, (void *)cuStreamSynchronize_ptsz},
    {"cuStreamQuery", 2000, (void *)cuStreamQuery, (void *)cuStreamQuery_ptsz},
    {"cuStreamWaitEvent", 3020, (void *)cuStreamWaitEvent, (void *)cuStreamWaitEvent_ptsz},
    {"cuStreamGetPriority", 5050, (void *)cuStreamGetPriority, (void *)cuStreamGetPriority_ptsz},
    {"cuStreamGetFlags", 5050, (void *)cuStreamGetFlags, (void *)cuStreamGetFlags_ptsz},
    {"cuStreamGetCtx", 9020, (void *)cuStreamGetCtx, (void *)cuStreamGetCtx_ptsz},
    {"cuStreamGetId", 12000, (void *)cuStreamGetId, (void *)cuStreamGetId_ptsz},
    {"cuStreamAddCallback", 5000, (void *)cuStreamAddCallback, (void *)cuStreamAddCallback_ptsz},
    {"cuStreamBeginCapture", 10000, (void *)cuStreamBeginCapture, (void *)cuStreamBeginCapture_ptsz},
    {"cuStreamBeginCapture", 10010, (void *)cuStreamBeginCapture_v2, (void *)cuStreamBeginCapture_v2_ptsz},
    {"cuStreamEndCapture", 10000, (void *)cuStreamEndCapture, (void *)cuStreamEndCapture_ptsz},
    {"cuStreamIsCapturing", 10000, (void *)cuStreamIsCapturing, (void *)cuStreamIsCapturing_ptsz},
    {"cuStreamGetCaptureInfo", 10010, (void *)cuStreamGetCaptureInfo, (void *)cuStreamGetCaptureInfo_ptsz},
    {"cuStreamGetCaptureInfo", 11030, (void *)cuStreamGetCaptureInfo_v2, (void *)cuStreamGetCaptureInfo_v2_ptsz},
    {"cuStreamGetCaptureInfo", 12030, (void *)cuStreamGetCaptureInfo_v3, (void *)cuStreamGetCaptureInfo_v3_ptsz},
    {"cuThreadExchangeStreamCaptureMode", 10010, (void *)cuThreadExchangeStreamCaptureMode, NULL},
    {"cuEventCreate", 2000, (void *)cuEventCreate, NULL},
    {"cuEventRecord", 2000, (void *)cuEventRecord, (void *)cuEventRecord_ptsz},
    {"cuEventRecordWithFlags", 11010, (void *)cuEventRecordWithFlags, (void *)cuEventRecordWithFlags_ptsz},
    {"cuEventQuery", 2000, (void *)cuEventQuery, NULL},
    {"cuEventSynchronize", 2000, (void *)cuEventSynchronize, NULL},
    {"cuEventDestroy", 4000, (void *)cuEventDestroy_v2, NULL},
    {"cuEventElapsedTime", 2000, (void *)cuEventElapsedTime, NULL},
    {"cuEventElapsedTime", 12080, (void *)cuEventElapsedTime_v2, NULL},
    {"cuLaunchKernel", 4000, (void *)cuLaunchKernel, (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 11060, (void *)cuLaunchKernelEx, (void *)cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", 9000, (void *)cuLaunchCooperativeKernel, (void *)cuLaunchCooperativeKernel_ptsz},
    {"cuLaunchCooperativeKernelMultiDevice", 9000, (void *)cuLaunchCooperativeKernelMultiDevice, NULL},
    {"cuLaunchHostFunc", 10000, (void *)cuLaunchHostFunc, (void *)cuLaunchHostFunc_ptsz},
    {"cuGraphCreate", 10000, (void *)cuGraphCreate, NULL},
    {"cuGraphDestroy", 10000, (void *)cuGraphDestroy, NULL},
    {"cuGraphAddKernelNode", 10000, (void *)cuGraphAddKernelNode, NULL},
    {"cuGraphAddKernelNode", 12000, (void *)cuGraphAddKernelNode_v2, NULL},
    {"cuGraphAddEmptyNode", 10000, (void *)cuGraphAddEmptyNode, NULL},
    {"cuGraphAddHostNode", 10000, (void *)cuGraphAddHostNode, NULL},
    {"cuGraphAddMemAllocNode", 11040, (void *)cuGraphAddMemAllocNode, NULL},
    {"cuGraphAddMemFreeNode", 11040, (void *)cuGraphAddMemFreeNode, NULL},
    {"cuGraphGetNodes", 10000, (void *)cuGraphGetNodes, NULL},
    {"cuGraphNodeGetType", 10000, (void *)cuGraphNodeGetType, NULL},
    {"cuGraphMemAllocNodeGetParams", 11040, (void *)cuGraphMemAllocNodeGetParams, NULL},
    {"cuGraphMemFreeNodeGetParams", 11040, (void *)cuGraphMemFreeNodeGetParams, NULL},
    {"cuDeviceGraphMemTrim", 11040, (void *)cuDeviceGraphMemTrim, NULL},
    {"cuDeviceGetGraphMemAttribute", 11040, (void *)cuDeviceGetGraphMemAttribute, NULL},
    {"cuDeviceSetGraphMemAttribute", 11040, (void *)cuDeviceSetGraphMemAttribute, NULL},
    {"cuGraphInstantiate", 10000, (void *)cuGraphInstantiate, NULL},
    {"cuGraphInstantiate", 11000, (void *)cuGraphInstantiate_v2, NULL},
    {"cuGraphInstantiate", 12000, (void *)cuGraphInstantiateWithFlags, NULL},
    {"cuGraphInstantiateWithFlags", 11040, (void *)cuGraphInstantiateWithFlags, NULL},
    {"cuGraphInstantiateWithParams", 12000, (void *)cuGraphInstantiateWithParams, (void *)cuGraphInstantiateWithParams_ptsz},
    {"cuGraphExecDestroy", 10000, (void *)cuGraphExecDestroy, NULL},
    {"cuGraphLaunch", 10000, (void *)cuGraphLaunch, (void *)cuGraphLaunch_ptsz},
    {"cuGraphUpload", 11010, (void *)cuGraphUpload, (void *)cuGraphUpload_ptsz},
    {"cuProfilerStart", 4000, (void *)cuProfilerStart, NULL},
    {"cuProfilerStop", 4000, (void *)cuProfilerStop, NULL},
};

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn || (flags & ~(cuuint64_t)3)) return CUDA_ERROR_INVALID_VALUE;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct procent *best = NULL;
    int found = 0;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        if (strcmp(procs[i].base, symbol) != 0) continue;
        found = 1;
        if (procs[i].ver <= cudaVersion && (!best || procs[i].ver > best->ver)) best = &procs[i];
    }
    *pfn = NULL;
    if (!best) {
        if (status) *status = found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = per_thread && best->pt ? best->pt : best->fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

/* Works before cuInit: the runtime resolves cuInit itself through it. */
SIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
