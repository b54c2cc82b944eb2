/* The part of the NVML ABI that vgpu and its simulated GPU use.
 *
 * Written from the published NVML API reference; values and layouts are checked
 * against the real nvml.h by test/gpu/abi_check.c on the GPU machine. */
#ifndef VGPU_NVML_ABI_H
#define VGPU_NVML_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

#define NVML_DEVICE_NAME_BUFFER_SIZE           64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE        96
#define NVML_DEVICE_UUID_BUFFER_SIZE           80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE        96
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE     32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE  16
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE   80

/* nvmlDevice{Set,Get}MemoryLimits_v1 (driver r615, nvml.h of go-nvml
 * v0.13.4-1): a cgroup's device memory limits; nameSpace is the full sysfs
 * path of the cgroup. Soft 0 and hard NVML_DEVICE_MEMORY_LIMIT_MAX: no limit. */
#define NVML_DEVICE_MEMORY_LIMIT_MAX 0xFFFFFFFFFFFFFFFFULL
typedef struct {
    const char *nameSpace;
    unsigned long long softLimit;
    unsigned long long hardLimit;
} nvmlSetMemoryLimits_v1_t;

typedef struct {
    const char *nameSpace;
    unsigned long long softLimit;
    unsigned long long hardLimit;
    unsigned long long currentUsed;
} nvmlGetMemoryLimits_v1_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U))
#define nvmlMemory_v2                  NVML_STRUCT_VERSION(Memory, 2)

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* nvmlDeviceGetComputeRunningProcesses_v3 */
typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* the _v2 entry points use the same layout; the v1 one has no instance ids */
typedef struct nvmlProcessInfo_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct nvmlProcessUtilizationSample_st {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/* nvmlDeviceGetRunningProcessDetailList (driver 550+) */
typedef struct nvmlProcessDetail_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;

typedef struct nvmlProcessDetailList_v1_st {
    unsigned int version;
    unsigned int mode;
    unsigned int numProcArrayEntries;
    nvmlProcessDetail_v1_t *procArray;
} nvmlProcessDetailList_v1_t;
typedef nvmlProcessDetailList_v1_t nvmlProcessDetailList_t;

#define NVML_VALUE_NOT_AVAILABLE (-1)

#ifdef __cplusplus
}
#endif
#endif /* VGPU_NVML_ABI_H */
