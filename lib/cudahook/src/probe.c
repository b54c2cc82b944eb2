/* The memory probe (probe.h): the real NVML, opened privately, tells what a
 * driver call took of a device's memory. This process's own figure when the
 * driver lists it once; else the device's free memory before and after, which
 * other processes' activity blurs (clamped: never negative). */
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>
#include "nvml_abi.h"
#include "probe.h"
#include "quota.h"
#include "vgpu.h"

typedef int (*nvmlInit_t)(void);
typedef int (*nvmlGetByUUID_t)(const char *, nvmlDevice_t *);
typedef int (*nvmlMem_t)(nvmlDevice_t, nvmlMemory_t *);
typedef int (*nvmlProcs_t)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static nvmlGetByUUID_t nvml_by_uuid;
static nvmlMem_t nvml_mem;
static nvmlProcs_t nvml_procs;

static void nvml_open(void)
{
    void *h = dlopen(vgpu_q.driver_nvml, RTLD_LAZY | RTLD_LOCAL | RTLD_DEEPBIND);
    nvmlInit_t init;

    if (!h)
        return;
    init = (nvmlInit_t)dlsym(h, "nvmlInit_v2");
    nvml_by_uuid = (nvmlGetByUUID_t)dlsym(h, "nvmlDeviceGetHandleByUUID");
    nvml_mem = (nvmlMem_t)dlsym(h, "nvmlDeviceGetMemoryInfo");
    nvml_procs = (nvmlProcs_t)dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!init || !nvml_by_uuid || !nvml_mem || init() != NVML_SUCCESS)
        nvml_mem = NULL;
}

/* free bytes of quota device qi as the driver sees them; 0 = unknown */
static uint64_t device_free(int qi)
{
    nvmlDevice_t d;
    nvmlMemory_t m;

    pthread_once(&nvml_once, nvml_open);
    if (!nvml_mem || nvml_by_uuid(vgpu_q.dev[qi].uuid, &d) != NVML_SUCCESS || nvml_mem(d, &m) != NVML_SUCCESS)
        return 0;
    return m.free;
}

/* this process's device memory on qi in the driver's own per-process figure;
 * -1 when the driver does not list us (no context yet, or another PID
 * namespace: then only the device-wide figure is left), -2 when ambiguous */
static int process_used(int qi, uint64_t *out)
{
    nvmlDevice_t d;
    nvmlProcessInfo_t p[128];
    unsigned int n = 128;
    unsigned int me = (unsigned int)getpid();

    pthread_once(&nvml_once, nvml_open);
    if (!nvml_mem || !nvml_procs || nvml_by_uuid(vgpu_q.dev[qi].uuid, &d) != NVML_SUCCESS ||
        nvml_procs(d, &n, p) != NVML_SUCCESS)
        return -1;
    int found = 0;
    for (unsigned int i = 0; i < n && i < 128; i++)
        if (p[i].pid == me) {
            *out = p[i].usedGpuMemory;
            found++;
        }
    /* two entries with our PID: processes of other PID namespaces that the
     * driver lists by theirs; which one is us is unknown */
    return found == 1 ? 0 : found ? -2 : -1;
}

void vgpu_probe_take(int qi, struct vgpu_probe *p)
{
    int r = process_used(qi, &p->proc_used);

    p->has_proc = r == 0 ? 1 : r == -1 ? 0 : -1;
    if (p->has_proc != 1)
        p->proc_used = 0; /* not listed (yet): we hold nothing there */
    p->dev_free = device_free(qi);
}

/* What qi's memory grew by since before. Per-process when the driver lists us
 * once after (before may predate our first context: then we held 0) and that
 * figure grew, so other containers cannot land in it; else the device-wide
 * drop, clamped at 0. */
uint64_t vgpu_probe_cost(int qi, const struct vgpu_probe *before)
{
    struct vgpu_probe after;
    uint64_t per_proc = 0, dev;

    vgpu_probe_take(qi, &after);
    if (after.has_proc == 1 && before->has_proc >= 0)
        per_proc = vgpu_sub_clamp(after.proc_used, before->proc_used);
    dev = (before->dev_free && after.dev_free) ? vgpu_sub_clamp(before->dev_free, after.dev_free) : 0;
    /* a per-process figure that did not move while the device lost memory is
     * probably another namespace's process with our PID: the device-wide one */
    return per_proc ? per_proc : dev;
}
