/* The one table of hooked symbols.
 *
 * Every name here gets a C wrapper instead of a trampoline. The generator
 * (gen-stubs.sh) reads this file to leave these names out of the trampolines,
 * and procaddr.c expands the CUDA list to map "real address -> our wrapper".
 * Keep one name per line in the form HOOK_CUDA(name) / HOOK_NVML(name). */
#ifndef HOOK_CUDA
#define HOOK_CUDA(name)
#endif
#ifndef HOOK_NVML
#define HOOK_NVML(name)
#endif
/* USE_*: real entry points the wrappers call but do not wrap (trampolines) */
#ifndef USE_CUDA
#define USE_CUDA(name)
#endif
#ifndef USE_NVML
#define USE_NVML(name)
#endif

/* driver entry lookup: the route cudart 12/13 takes for everything */
HOOK_CUDA(cuGetProcAddress)
HOOK_CUDA(cuGetProcAddress_v2)

/* the spatial mode: client settings and the MPS check (mps.c) */
HOOK_CUDA(cuInit)

/* linear device memory */
HOOK_CUDA(cuMemAlloc_v2)
HOOK_CUDA(cuMemAllocPitch_v2)
HOOK_CUDA(cuMemAllocManaged)
HOOK_CUDA(cuMemFree_v2)
/* legacy 32-bit entry points: refused or answered with the container view */
HOOK_CUDA(cuMemAlloc)
HOOK_CUDA(cuMemAllocPitch)
HOOK_CUDA(cuMemGetInfo)
HOOK_CUDA(cuDeviceTotalMem)
HOOK_CUDA(cuArrayCreate)
HOOK_CUDA(cuArray3DCreate)

/* stream-ordered allocator */
HOOK_CUDA(cuMemAllocAsync)
HOOK_CUDA(cuMemAllocAsync_ptsz)
HOOK_CUDA(cuMemAllocFromPoolAsync)
HOOK_CUDA(cuMemAllocFromPoolAsync_ptsz)
HOOK_CUDA(cuMemFreeAsync)
HOOK_CUDA(cuMemFreeAsync_ptsz)
HOOK_CUDA(cuMemPoolTrimTo)
HOOK_CUDA(cuMemPoolDestroy)

/* graph memory nodes: the device's graph memory pool (graphmem.c; launches in launch.c) */
HOOK_CUDA(cuGraphAddMemAllocNode)
HOOK_CUDA(cuGraphInstantiate)
HOOK_CUDA(cuGraphInstantiate_v2)
HOOK_CUDA(cuGraphInstantiateWithFlags)
HOOK_CUDA(cuGraphInstantiateWithParams)
HOOK_CUDA(cuGraphInstantiateWithParams_ptsz)
HOOK_CUDA(cuGraphUpload)
HOOK_CUDA(cuGraphUpload_ptsz)
HOOK_CUDA(cuGraphExecDestroy)
HOOK_CUDA(cuDeviceGraphMemTrim)

/* virtual memory management */
HOOK_CUDA(cuMemCreate)
HOOK_CUDA(cuMemRelease)
HOOK_CUDA(cuMemRetainAllocationHandle)
HOOK_CUDA(cuMemMap)
HOOK_CUDA(cuMemUnmap)

/* arrays */
HOOK_CUDA(cuArrayCreate_v2)
HOOK_CUDA(cuArray3DCreate_v2)
HOOK_CUDA(cuArrayDestroy)
HOOK_CUDA(cuMipmappedArrayCreate)
HOOK_CUDA(cuMipmappedArrayDestroy)

/* contexts: their footprint is device memory too */
HOOK_CUDA(cuDevicePrimaryCtxRetain)
HOOK_CUDA(cuDevicePrimaryCtxRelease_v2)
HOOK_CUDA(cuDevicePrimaryCtxReset_v2)
HOOK_CUDA(cuCtxCreate_v2)
HOOK_CUDA(cuCtxCreate_v3)
HOOK_CUDA(cuCtxCreate_v4)
HOOK_CUDA(cuCtxDestroy_v2)
/* the v1 exports: older binaries call them; the same contexts, the same counts */
HOOK_CUDA(cuCtxCreate)
HOOK_CUDA(cuCtxDestroy)
HOOK_CUDA(cuDevicePrimaryCtxRelease)
HOOK_CUDA(cuDevicePrimaryCtxReset)
HOOK_CUDA(cuGreenCtxCreate)
HOOK_CUDA(cuGreenCtxDestroy)

/* context limits that hold device memory (limits.c) */
HOOK_CUDA(cuCtxSetLimit)

/* module and library data; stack grown for a function's frame (modules.c) */
HOOK_CUDA(cuModuleLoad)
HOOK_CUDA(cuModuleLoadData)
HOOK_CUDA(cuModuleLoadDataEx)
HOOK_CUDA(cuModuleLoadFatBinary)
HOOK_CUDA(cuModuleUnload)
HOOK_CUDA(cuModuleGetFunction)
HOOK_CUDA(cuLibraryLoadData)
HOOK_CUDA(cuLibraryLoadFromFile)
HOOK_CUDA(cuLibraryUnload)
HOOK_CUDA(cuLibraryGetKernel)
HOOK_CUDA(cuLibraryGetModule)
HOOK_CUDA(cuLibraryGetGlobal)
HOOK_CUDA(cuKernelGetFunction)

/* what programs see */
HOOK_CUDA(cuMemGetInfo_v2)
HOOK_CUDA(cuDeviceTotalMem_v2)

/* launches: paced by the compute limit (launch.c) */
HOOK_CUDA(cuLaunchKernel)
HOOK_CUDA(cuLaunchKernel_ptsz)
HOOK_CUDA(cuLaunchKernelEx)
HOOK_CUDA(cuLaunchKernelEx_ptsz)
HOOK_CUDA(cuLaunchCooperativeKernel)
HOOK_CUDA(cuLaunchCooperativeKernel_ptsz)
HOOK_CUDA(cuLaunchCooperativeKernelMultiDevice)
HOOK_CUDA(cuGraphLaunch)
HOOK_CUDA(cuGraphLaunch_ptsz)
/* captures: counted, so that launches ask the driver whether their stream
 * captures only while one may (capture.c) */
HOOK_CUDA(cuStreamBeginCapture)
HOOK_CUDA(cuStreamBeginCapture_ptsz)
HOOK_CUDA(cuStreamBeginCapture_v2)
HOOK_CUDA(cuStreamBeginCapture_v2_ptsz)
HOOK_CUDA(cuStreamBeginCaptureToGraph)
HOOK_CUDA(cuStreamBeginCaptureToGraph_ptsz)
HOOK_CUDA(cuStreamEndCapture)
HOOK_CUDA(cuStreamEndCapture_ptsz)

USE_CUDA(cuCtxGetDevice)
USE_CUDA(cuDeviceGetUuid)
USE_CUDA(cuDeviceGetUuid_v2)
USE_CUDA(cuDeviceGetMemPool)
USE_CUDA(cuMemPoolGetAttribute)
USE_CUDA(cuDevicePrimaryCtxGetState)
USE_CUDA(cuCtxPushCurrent_v2)
USE_CUDA(cuCtxPopCurrent_v2)
USE_CUDA(cuCtxGetCurrent)
USE_CUDA(cuStreamGetCtx)
USE_CUDA(cuStreamIsCapturing)
USE_CUDA(cuStreamIsCapturing_ptsz)
USE_CUDA(cuEventCreate)
USE_CUDA(cuEventDestroy_v2)
USE_CUDA(cuEventRecord)
USE_CUDA(cuEventRecord_ptsz)
USE_CUDA(cuEventQuery)
USE_CUDA(cuEventElapsedTime)
USE_CUDA(cuEventElapsedTime_v2)
USE_CUDA(cuThreadExchangeStreamCaptureMode)
USE_CUDA(cuGraphGetNodes)
USE_CUDA(cuGraphNodeGetType)
USE_CUDA(cuGraphMemAllocNodeGetParams)
USE_CUDA(cuDeviceGetGraphMemAttribute)
USE_CUDA(cuCtxGetLimit)
USE_CUDA(cuDeviceGetAttribute)
USE_CUDA(cuDeviceGetCount)
USE_CUDA(cuCtxGetExecAffinity)
USE_CUDA(cuFuncGetAttribute)
USE_CUDA(cuCtxFromGreenCtx)
USE_CUDA(cuModuleGetLoadingMode)

/* NVML */
HOOK_NVML(nvmlInit)
HOOK_NVML(nvmlInit_v2)
HOOK_NVML(nvmlInitWithFlags)
HOOK_NVML(nvmlDeviceGetCount)
HOOK_NVML(nvmlDeviceGetCount_v2)
HOOK_NVML(nvmlDeviceGetHandleByIndex)
HOOK_NVML(nvmlDeviceGetHandleByIndex_v2)
HOOK_NVML(nvmlDeviceGetHandleByUUID)
HOOK_NVML(nvmlDeviceGetHandleByPciBusId)
HOOK_NVML(nvmlDeviceGetHandleByPciBusId_v2)
HOOK_NVML(nvmlDeviceGetHandleBySerial)
HOOK_NVML(nvmlDeviceGetIndex)
HOOK_NVML(nvmlDeviceGetMemoryInfo)
HOOK_NVML(nvmlDeviceGetMemoryInfo_v2)
HOOK_NVML(nvmlDeviceGetComputeRunningProcesses)
HOOK_NVML(nvmlDeviceGetComputeRunningProcesses_v2)
HOOK_NVML(nvmlDeviceGetComputeRunningProcesses_v3)
HOOK_NVML(nvmlDeviceGetGraphicsRunningProcesses)
HOOK_NVML(nvmlDeviceGetGraphicsRunningProcesses_v2)
HOOK_NVML(nvmlDeviceGetGraphicsRunningProcesses_v3)
HOOK_NVML(nvmlDeviceGetMPSComputeRunningProcesses)
HOOK_NVML(nvmlDeviceGetMPSComputeRunningProcesses_v2)
HOOK_NVML(nvmlDeviceGetMPSComputeRunningProcesses_v3)
HOOK_NVML(nvmlDeviceGetProcessUtilization)
HOOK_NVML(nvmlDeviceGetRunningProcessDetailList)
HOOK_NVML(nvmlDeviceSetMemoryLimits_v1)
HOOK_NVML(nvmlDeviceGetMemoryLimits_v1)

USE_NVML(nvmlDeviceGetUUID)

#undef HOOK_CUDA
#undef HOOK_NVML
#undef USE_CUDA
#undef USE_NVML
