/* nvidia-smi for the simulated GPU: a small NVML client. It dlopens
 * "libnvidia-ml.so.1" by that name (not a path) so that an interposer that
 * owns that SONAME (ld.so.preload / LD_PRELOAD) sees its calls, like the real
 * nvidia-smi. Supports the default table and -L. */
#define _GNU_SOURCE
#include "nvml_abi.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SYMS(X)                                                                                               \
    X(nvmlInit_v2, nvmlReturn_t, (void))                                                                      \
    X(nvmlShutdown, nvmlReturn_t, (void))                                                                     \
    X(nvmlErrorString, const char *, (nvmlReturn_t))                                                          \
    X(nvmlSystemGetDriverVersion, nvmlReturn_t, (char *, unsigned))                                           \
    X(nvmlSystemGetCudaDriverVersion, nvmlReturn_t, (int *))                                                  \
    X(nvmlDeviceGetCount_v2, nvmlReturn_t, (unsigned *))                                                      \
    X(nvmlDeviceGetHandleByIndex_v2, nvmlReturn_t, (unsigned, nvmlDevice_t *))                                \
    X(nvmlDeviceGetName, nvmlReturn_t, (nvmlDevice_t, char *, unsigned))                                      \
    X(nvmlDeviceGetUUID, nvmlReturn_t, (nvmlDevice_t, char *, unsigned))                                      \
    X(nvmlDeviceGetPciInfo_v3, nvmlReturn_t, (nvmlDevice_t, nvmlPciInfo_t *))                                 \
    X(nvmlDeviceGetMemoryInfo, nvmlReturn_t, (nvmlDevice_t, nvmlMemory_t *))                                  \
    X(nvmlDeviceGetUtilizationRates, nvmlReturn_t, (nvmlDevice_t, nvmlUtilization_t *))                       \
    X(nvmlDeviceGetTemperature, nvmlReturn_t, (nvmlDevice_t, int, unsigned *))                                \
    X(nvmlDeviceGetPowerUsage, nvmlReturn_t, (nvmlDevice_t, unsigned *))                                      \
    X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlReturn_t, (nvmlDevice_t, unsigned *, nvmlProcessInfo_t *)) \
    X(nvmlSystemGetProcessName, nvmlReturn_t, (unsigned, char *, unsigned))

#define DECL(n, r, a) static r(*p_##n) a;
SYMS(DECL)

static int load(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display Driver is properly installed and present in your system.\n");
        return -1;
    }
#define LOAD(n, r, a)                                    \
    if (!(p_##n = (r(*) a)dlsym(h, #n))) {               \
        fprintf(stderr, "nvidia-smi: %s missing\n", #n); \
        return -1;                                       \
    }
    SYMS(LOAD)
    return 0;
}

int main(int argc, char **argv)
{
    int list = argc > 1 && (strcmp(argv[1], "-L") == 0 || strcmp(argv[1], "--list-gpus") == 0);
    if (argc > 1 && !list) {
        fprintf(stderr, "nvidia-smi (simulated): only the default view and -L are supported\n");
        return 2;
    }
    if (load() < 0) return 9;
    nvmlReturn_t r = p_nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n");
        return 9;
    }
    unsigned n = 0;
    p_nvmlDeviceGetCount_v2(&n);
    if (list) {
        for (unsigned i = 0; i < n; i++) {
            nvmlDevice_t d;
            char name[96] = "", uuid[96] = "";
            if (p_nvmlDeviceGetHandleByIndex_v2(i, &d)) continue;
            p_nvmlDeviceGetName(d, name, sizeof name);
            p_nvmlDeviceGetUUID(d, uuid, sizeof uuid);
            printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        }
        if (n == 0) printf("No devices found.\n");
        p_nvmlShutdown();
        return n ? 0 : 6;
    }
    char drv[80] = "";
    int cuda = 0;
    p_nvmlSystemGetDriverVersion(drv, sizeof drv);
    p_nvmlSystemGetCudaDriverVersion(&cuda);
    time_t now = time(NULL);
    char ts[64];
    strftime(ts, sizeof ts, "%a %b %e %H:%M:%S %Y", localtime(&now));
    printf("%s\n", ts);
    printf("+-----------------------------------------------------------------------------------------+\n");
    char cv[16];
    snprintf(cv, sizeof cv, "%d.%d", cuda / 1000, (cuda % 1000) / 10);
    printf("| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-8s |\n", drv, drv, cv);
    printf("|-----------------------------------------+------------------------+----------------------+\n");
    printf("| GPU  Name                               | Bus-Id                 |          GPU-Util    |\n");
    printf("| Temp  Pwr   UUID                        |           Memory-Usage |                      |\n");
    printf("|=========================================+========================+======================|\n");
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d;
        if (p_nvmlDeviceGetHandleByIndex_v2(i, &d)) continue;
        char name[96] = "", uuid[96] = "";
        nvmlPciInfo_t pci;
        nvmlMemory_t mem = {0};
        nvmlUtilization_t u = {0};
        unsigned temp = 0, pw = 0;
        p_nvmlDeviceGetName(d, name, sizeof name);
        p_nvmlDeviceGetUUID(d, uuid, sizeof uuid);
        memset(&pci, 0, sizeof pci);
        p_nvmlDeviceGetPciInfo_v3(d, &pci);
        p_nvmlDeviceGetMemoryInfo(d, &mem);
        p_nvmlDeviceGetUtilizationRates(d, &u);
        p_nvmlDeviceGetTemperature(d, 0, &temp);
        p_nvmlDeviceGetPowerUsage(d, &pw);
        printf("| %3u  %-34.34s | %-22s | %19u%% |\n", i, name, pci.busId, u.gpu);
        printf("| %3uC %4uW %-29.29s | %8lluMiB / %7lluMiB |                      |\n", temp, pw / 1000, uuid,
               mem.used >> 20, mem.total >> 20);
        printf("+-----------------------------------------+------------------------+----------------------+\n");
    }
    printf("\n+-----------------------------------------------------------------------------------------+\n");
    printf("| Processes:                                                                              |\n");
    printf("|  GPU        PID   Process name                                              GPU Memory |\n");
    printf("|=========================================================================================|\n");
    int any = 0;
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d;
        if (p_nvmlDeviceGetHandleByIndex_v2(i, &d)) continue;
        nvmlProcessInfo_t infos[64];
        unsigned cnt = 64;
        if (p_nvmlDeviceGetComputeRunningProcesses_v3(d, &cnt, infos) != NVML_SUCCESS) continue;
        for (unsigned k = 0; k < cnt; k++) {
            char pname[256] = "";
            p_nvmlSystemGetProcessName(infos[k].pid, pname, sizeof pname);
            printf("|  %3u   %8u   %-52.52s %8lluMiB |\n", i, infos[k].pid, pname, infos[k].usedGpuMemory >> 20);
            any = 1;
        }
    }
    if (!any) printf("|  No running processes found                                                             |\n");
    printf("+-----------------------------------------------------------------------------------------+\n");
    p_nvmlShutdown();
    return 0;
}
