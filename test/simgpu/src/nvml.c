/* Simulated libnvidia-ml: reads the same config and shared state as the
 * simulated libcuda, so memory used, processes and utilization are what the
 * CUDA processes did. NVML never holds a process slot. */
#define _GNU_SOURCE
#include "sim.h"
#include "nvml_abi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t nmu = PTHREAD_MUTEX_INITIALIZER;
static int nrefs;
static struct sim_env nenv;
static struct sim_state nst = {.fd = -1, .slot = -1};
static struct nvmlDevice_st {
    int idx;
} ndevs[SIM_MAX_DEV];

#define SIM_NVML_EXPORT SIM_EXPORT

static int inited(void)
{
    return __atomic_load_n(&nrefs, __ATOMIC_ACQUIRE) > 0;
}

/* a handle is valid only if it points at one of our visible devices */
static struct sim_devcfg *dev_of(nvmlDevice_t d, int *cfg)
{
    uintptr_t p = (uintptr_t)d, b = (uintptr_t)ndevs;
    if (p < b || p >= b + sizeof ndevs || (p - b) % sizeof ndevs[0]) return NULL;
    int i = (int)((p - b) / sizeof ndevs[0]);
    if (i >= nenv.nvis) return NULL;
    if (cfg) *cfg = nenv.vis[i];
    return &nenv.cfg.dev[nenv.vis[i]];
}

#define CHECK_DEV(d, cfgp)                          \
    if (!inited()) return NVML_ERROR_UNINITIALIZED; \
    struct sim_devcfg *dc = dev_of((d), (cfgp));    \
    if (!dc) return NVML_ERROR_INVALID_ARGUMENT;

static nvmlReturn_t init_flags(unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&nmu);
    if (nrefs > 0) {
        nrefs++;
        pthread_mutex_unlock(&nmu);
        return NVML_SUCCESS;
    }
    char why[PATH_MAX + 128];
    if (sim_load_env((void *)init_flags, &nenv, why, sizeof why) < 0) {
        sim_warn_once(why);
        pthread_mutex_unlock(&nmu);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (sim_state_open(nenv.simdir, &nst) < 0) {
        sim_warn_once("cannot open the shared state");
        pthread_mutex_unlock(&nmu);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    for (int i = 0; i < SIM_MAX_DEV; i++) ndevs[i].idx = i;
    __atomic_store_n(&nrefs, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&nmu);
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) { return init_flags(0); }
SIM_NVML_EXPORT nvmlReturn_t nvmlInit(void) { return init_flags(0); }
SIM_NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return init_flags(flags); }

SIM_NVML_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&nmu);
    if (nrefs == 0) {
        pthread_mutex_unlock(&nmu);
        return NVML_ERROR_UNINITIALIZED;
    }
    if (--nrefs == 0) sim_state_close(&nst);
    pthread_mutex_unlock(&nmu);
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t put_str(char *buf, unsigned int len, const char *s)
{
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len)
{
    if (!inited()) return NVML_ERROR_UNINITIALIZED;
    return put_str(v, len, SIM_DRIVER_VERSION_STR);
}

SIM_NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len)
{
    return put_str(v, len, "13." SIM_DRIVER_VERSION_STR); /* works before init, as the real one */
}

SIM_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = SIM_CUDA_VERSION;
    return NVML_SUCCESS;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

SIM_NVML_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int len)
{
    if (!inited()) return NVML_ERROR_UNINITIALIZED;
    if (!name || !len) return NVML_ERROR_INVALID_ARGUMENT;
    char p[64], buf[256];
    snprintf(p, sizeof p, "/proc/%u/cmdline", pid);
    FILE *f = fopen(p, "re");
    if (!f) return NVML_ERROR_NOT_FOUND;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    snprintf(name, len, "%s", buf);
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!inited()) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)nenv.nvis;
    return NVML_SUCCESS;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev)
{
    if (!inited()) return NVML_ERROR_UNINITIALIZED;
    if (!dev || index >= (unsigned)nenv.nvis) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &ndevs[index];
    return NVML_SUCCESS;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *dev) { return nvmlDeviceGetHandleByIndex_v2(index, dev); }

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev)
{
    if (!inited()) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < nenv.nvis; i++)
        if (strcasecmp(nenv.cfg.dev[nenv.vis[i]].uuid, uuid) == 0) {
            *dev = &ndevs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *dev)
{
    if (!inited()) return NVML_ERROR_UNINITIALIZED;
    if (!bus || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned a, b, c;
    if (sim_parse_pci(bus, &a, &b, &c)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < nenv.nvis; i++) {
        struct sim_devcfg *d = &nenv.cfg.dev[nenv.vis[i]];
        if (d->pci_domain == a && d->pci_bus == b && d->pci_dev == c) {
            *dev = &ndevs[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus, nvmlDevice_t *dev) { return nvmlDeviceGetHandleByPciBusId_v2(bus, dev); }

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len)
{
    CHECK_DEV(d, NULL);
    return put_str(name, len, dc->name);
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len)
{
    CHECK_DEV(d, NULL);
    return put_str(uuid, len, dc->uuid);
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int len)
{
    CHECK_DEV(d, NULL);
    char s[32];
    snprintf(s, sizeof s, "1650%02x%02x%02x%02x%02x", dc->uuid_bytes[11], dc->uuid_bytes[12], dc->uuid_bytes[13], dc->uuid_bytes[14], dc->uuid_bytes[15]);
    return put_str(serial, len, s);
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{
    CHECK_DEV(d, NULL);
    if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned)dc->minor;
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index)
{
    CHECK_DEV(d, NULL);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)(((struct nvmlDevice_st *)d) - ndevs);
    return NVML_SUCCESS;
}

#define SIM_PCI_DEVICE_ID 0x233010DEu /* H100 SXM5, vendor 10DE */
#define SIM_PCI_SUBSYS_ID 0x16C110DEu

static void fill_pci(const struct sim_devcfg *d, nvmlPciInfo_t *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.0", d->pci_domain & 0xffff, d->pci_bus, d->pci_dev);
    snprintf(p->busId, sizeof p->busId, "%08X:%02X:%02X.0", d->pci_domain, d->pci_bus, d->pci_dev);
    p->domain = d->pci_domain;
    p->bus = d->pci_bus;
    p->device = d->pci_dev;
    p->pciDeviceId = SIM_PCI_DEVICE_ID;
    p->pciSubSystemId = SIM_PCI_SUBSYS_ID;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    CHECK_DEV(d, NULL);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(dc, pci);
    return NVML_SUCCESS;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(d, pci); }

/* v1 layout: busId[16] then the five numbers and four reserved words (52 bytes) */
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, void *pci)
{
    CHECK_DEV(d, NULL);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlPciInfo_t full;
    fill_pci(dc, &full);
    unsigned char out[52] = {0};
    memcpy(out, full.busIdLegacy, 16);
    memcpy(out + 16, &full.domain, 20);
    memcpy(pci, out, sizeof out);
    return NVML_SUCCESS;
}

static void mem_numbers(int cfg, uint64_t cap, uint64_t *used)
{
    sim_lock(nst.sh);
    sim_reap_locked(&nst);
    *used = sim_used_locked(nst.sh, cfg);
    sim_unlock(nst.sh);
    if (*used > cap) *used = cap;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    int cfg;
    CHECK_DEV(d, &cfg);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t used;
    mem_numbers(cfg, sim_usable(dc), &used);
    m->total = dc->memory;
    m->used = used + dc->reserved; /* version 1 counts the driver's own as used */
    m->free = dc->memory - m->used;
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    int cfg;
    CHECK_DEV(d, &cfg);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    uint64_t used;
    mem_numbers(cfg, sim_usable(dc), &used);
    m->total = dc->memory;
    m->reserved = dc->reserved;
    m->used = used;
    m->free = sim_usable(dc) - used;
    return NVML_SUCCESS;
}

/* Remembers, in each slot, the pid this reader's namespace sees it under;
 * gives the remembered pid to a slot whose process is gone (exited, its
 * descriptors kept by a child it forked: the slot lives on). */
static void seen_pids(const int *slot, const int *pids, const uint32_t *ns, int *host, unsigned n)
{
    uint32_t self = sim_pidns();
    sim_lock(nst.sh);
    for (unsigned i = 0; i < n; i++) {
        struct sim_proc *p = &nst.sh->proc[slot[i]];
        if (!p->active || p->pid != pids[i] || p->pidns != ns[i]) continue; /* reaped or reused meanwhile */
        int at = -1;
        for (int j = 0; j < SIM_SEEN; j++)
            if (p->seen_ns[j] == self || (at < 0 && !p->seen_ns[j])) at = j;
        if (at < 0) at = SIM_SEEN - 1;
        if (host[i] > 0) {
            p->seen_ns[at] = self;
            p->seen_pid[at] = host[i];
        } else if (p->seen_ns[at] == self) {
            host[i] = p->seen_pid[at];
        }
    }
    sim_unlock(nst.sh);
}

/* processes with a context or memory on the device; mps: the MPS clients
 * instead, as the H200 (driver 580) listed them: a client from the moment it
 * connected (0 bytes before its context), and also among the compute
 * processes once it holds memory there; the MPS server only among those */
static nvmlReturn_t procs(nvmlDevice_t d, unsigned int *count, void *infos, size_t stride, int with_ids, int mps)
{
    int cfg;
    CHECK_DEV(d, &cfg);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    int pids[SIM_MAX_PROC], host[SIM_MAX_PROC], slot[SIM_MAX_PROC];
    uint32_t ns[SIM_MAX_PROC];
    unsigned long long mem[SIM_MAX_PROC];
    unsigned n = 0;
    sim_lock(nst.sh);
    sim_reap_locked(&nst);
    for (int i = 0; i < SIM_MAX_PROC; i++) {
        struct sim_proc *p = &nst.sh->proc[i];
        if (!p->active || (mps ? !p->mps : !p->nctx[cfg] && !p->mem[cfg])) continue;
        if (p->ckpt_state == SIM_PROC_CHECKPOINTED) continue; /* holds nothing on the device */
        pids[n] = p->pid;
        ns[n] = p->pidns;
        slot[n] = i;
        mem[n++] = p->mem[cfg];
    }
    sim_unlock(nst.sh);
    /* like the driver: pids as the caller sees them (host pids on the host);
     * a process the caller cannot see is not listed */
    sim_host_pids(pids, ns, host, n);
    seen_pids(slot, pids, ns, host, n);
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++)
        if (host[i] > 0) {
            pids[k] = host[i];
            mem[k++] = mem[i];
        }
    n = k;
    if (*count < n || (!infos && n)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        unsigned char *e = (unsigned char *)infos + i * stride;
        nvmlProcessInfo_t pi = {.pid = (unsigned)pids[i], .usedGpuMemory = mem[i], .gpuInstanceId = 0xFFFFFFFFu, .computeInstanceId = 0xFFFFFFFFu};
        memcpy(e, &pi, with_ids ? sizeof(nvmlProcessInfo_t) : sizeof(nvmlProcessInfo_v1_t));
    }
    *count = n;
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i)
{
    return procs(d, c, i, sizeof(nvmlProcessInfo_t), 1, 0);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i)
{
    return procs(d, c, i, sizeof(nvmlProcessInfo_t), 1, 0);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i)
{
    return procs(d, c, i, sizeof(nvmlProcessInfo_v1_t), 0, 0);
}

static nvmlReturn_t no_procs(nvmlDevice_t d, unsigned int *c)
{
    CHECK_DEV(d, NULL);
    if (!c) return NVML_ERROR_INVALID_ARGUMENT;
    *c = 0; /* the simulator has no graphics clients */
    return NVML_SUCCESS;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, void *i)
{
    (void)i;
    return no_procs(d, c);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, void *i)
{
    (void)i;
    return no_procs(d, c);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *c, void *i)
{
    (void)i;
    return no_procs(d, c);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i)
{
    return procs(d, c, i, sizeof(nvmlProcessInfo_t), 1, 1);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i)
{
    return procs(d, c, i, sizeof(nvmlProcessInfo_t), 1, 1);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i)
{
    return procs(d, c, i, sizeof(nvmlProcessInfo_v1_t), 0, 1);
}

/* Utilization over the last second, from the recorded busy intervals. */
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    int cfg;
    CHECK_DEV(d, &cfg);
    if (!u) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t now = sim_now(), from = now > 1000000000ULL ? now - 1000000000ULL : 0;
    sim_lock(nst.sh);
    uint64_t busy = sim_busy_locked(nst.sh, cfg, from, now, 0);
    sim_unlock(nst.sh);
    u->gpu = (unsigned)(busy * 100 / (now - from ? now - from : 1));
    if (u->gpu > 100) u->gpu = 100;
    u->memory = u->gpu / 2; /* memory controller busy share: a plausible fraction */
    return NVML_SUCCESS;
}

static uint64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

/* One sample per process busy since lastSeenTimeStamp (µs, CLOCK_REALTIME),
 * looking back at most one second. */
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *util, unsigned int *count,
                                                             unsigned long long lastSeen)
{
    int cfg;
    CHECK_DEV(d, &cfg);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t now = sim_now(), rt = realtime_us(), win = 1000000000ULL;
    if (lastSeen && lastSeen < rt && (rt - lastSeen) * 1000ULL < win) win = (rt - lastSeen) * 1000ULL;
    if (lastSeen >= rt) win = 0;
    uint64_t from = now > win ? now - win : 0;
    int pids[SIM_MAX_PROC], host[SIM_MAX_PROC];
    uint32_t ns[SIM_MAX_PROC];
    unsigned n = 0;
    unsigned pct[SIM_MAX_PROC];
    sim_lock(nst.sh);
    struct sim_shdev *sd = &nst.sh->dev[cfg];
    uint64_t nb = sd->nbusy, lim = nb < SIM_BUSY_RING ? nb : SIM_BUSY_RING;
    for (uint64_t k = 0; k < lim && win; k++) {
        struct sim_busy *b = &sd->busy[(nb - 1 - k) % SIM_BUSY_RING];
        if (b->end <= from) break;
        int seen = 0;
        for (unsigned j = 0; j < n; j++)
            if (pids[j] == b->pid && ns[j] == b->pidns) seen = 1;
        if (seen || n == SIM_MAX_PROC) continue;
        uint64_t busy = sim_busy_of_locked(nst.sh, cfg, from, now, b->pid, b->pidns);
        if (!busy) continue;
        pids[n] = b->pid;
        ns[n] = b->pidns;
        pct[n++] = (unsigned)(busy * 100 / (now - from));
    }
    sim_unlock(nst.sh);
    sim_host_pids(pids, ns, host, n);
    unsigned kept = 0;
    for (unsigned i = 0; i < n; i++)
        if (host[i] > 0) {
            pids[kept] = host[i];
            pct[kept++] = pct[i];
        }
    n = kept;
    if (n == 0) {
        *count = 0;
        return NVML_ERROR_NOT_FOUND;
    } /* no samples newer than lastSeen */
    if (!util || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        util[i].pid = (unsigned)pids[i];
        util[i].timeStamp = rt;
        util[i].smUtil = pct[i] > 100 ? 100 : pct[i];
        util[i].memUtil = util[i].smUtil / 2;
        util[i].encUtil = 0;
        util[i].decUtil = 0;
    }
    *count = n;
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    CHECK_DEV(d, NULL);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}

#define UINT_GETTER(fn, val)                                           \
    SIM_NVML_EXPORT nvmlReturn_t fn(nvmlDevice_t d, unsigned int *out) \
    {                                                                  \
        CHECK_DEV(d, NULL);                                            \
        (void)dc;                                                      \
        if (!out) return NVML_ERROR_INVALID_ARGUMENT;                  \
        *out = (val);                                                  \
        return NVML_SUCCESS;                                           \
    }

UINT_GETTER(nvmlDeviceGetMultiGpuBoard, 0)
UINT_GETTER(nvmlDeviceGetBrand, 14)       /* NVML_BRAND_NVIDIA */
UINT_GETTER(nvmlDeviceGetArchitecture, 9) /* NVML_DEVICE_ARCH_HOPPER */
UINT_GETTER(nvmlDeviceGetNumGpuCores, (unsigned)dc->sms * 128)
UINT_GETTER(nvmlDeviceGetPowerUsage, 72000) /* mW */
UINT_GETTER(nvmlDeviceGetPowerManagementLimit, 700000)
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, 700000)
UINT_GETTER(nvmlDeviceGetPersistenceMode, 1) /* NVML_FEATURE_ENABLED */
UINT_GETTER(nvmlDeviceGetComputeMode, 0)     /* NVML_COMPUTEMODE_DEFAULT */
UINT_GETTER(nvmlDeviceGetDisplayMode, 0)
UINT_GETTER(nvmlDeviceGetDisplayActive, 0)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, 5)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, 16)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, 5)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, 16)
UINT_GETTER(nvmlDeviceGetBoardId, (unsigned)dc->pci_bus << 8)
UINT_GETTER(nvmlDeviceGetPerformanceState, 0) /* P0 */

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp)
{
    CHECK_DEV(d, NULL);
    if (!temp || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT; /* only NVML_TEMPERATURE_GPU */
    *temp = 34;
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int *speed)
{
    CHECK_DEV(d, NULL);
    (void)speed;
    return NVML_ERROR_NOT_SUPPORTED; /* passively cooled data-center part */
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *clock)
{
    CHECK_DEV(d, NULL);
    if (!clock || type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    static const unsigned mhz[] = {1980, 1980, 2619, 1755}; /* graphics, SM, memory, video */
    *clock = mhz[type];
    return NVML_SUCCESS;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *clock) { return nvmlDeviceGetClockInfo(d, type, clock); }

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pending)
{
    CHECK_DEV(d, NULL);
    if (!cur || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *cur = *pending = 0; /* NVML_DEVICE_MIG_DISABLE */
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMig)
{
    CHECK_DEV(d, NULL);
    if (!isMig) return NVML_ERROR_INVALID_ARGUMENT;
    *isMig = 0;
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char *v, unsigned int len)
{
    CHECK_DEV(d, NULL);
    return put_str(v, len, "96.00.99.00.01");
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long *n)
{
    CHECK_DEV(d, NULL);
    (void)type;
    (void)counter;
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    *n = 0;
    return NVML_SUCCESS;
}

#ifdef SIM_MEMORY_LIMITS
/* Per-cgroup memory limits, as nvml.h of r615 documents them: root only; the
 * cgroup is named by its full sysfs path, which must open; soft <= hard <=
 * the device's memory; soft 0 with hard NVML_DEVICE_MEMORY_LIMIT_MAX clears.
 * A path that is not a cgroup v2 directory is refused (NOT_SUPPORTED), and
 * with "cgroup-v2-only" in the config so is any hierarchy but the one
 * mounted at /sys/fs/cgroup (a hybrid host's /sys/fs/cgroup/unified):
 * what a real r615 does on such hosts is not known. */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#define SIM_CGROUP2_MAGIC 0x63677270

static nvmlReturn_t open_cgroup(const char *path, uint64_t *ino)
{
    if (!path || path[0] != '/' || strlen(path) >= SIM_CGPATH) return NVML_ERROR_INVALID_ARGUMENT;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return NVML_ERROR_OPERATING_SYSTEM;
    struct statfs sf;
    struct stat sb;
    int ok = fstatfs(fd, &sf) == 0 && sf.f_type == SIM_CGROUP2_MAGIC && fstat(fd, &sb) == 0;
    close(fd);
    if (!ok) return NVML_ERROR_NOT_SUPPORTED;
    if (nenv.cfg.cgroup_v2_only && (statfs("/sys/fs/cgroup", &sf) != 0 || sf.f_type != SIM_CGROUP2_MAGIC))
        return NVML_ERROR_NOT_SUPPORTED;
    *ino = sb.st_ino;
    return NVML_SUCCESS;
}

static struct sim_limit *find_limit(struct sim_shared *sh, const char *path)
{
    for (int i = 0; i < SIM_MAX_LIMITS; i++)
        if (sh->lim[i].active && strcmp(sh->lim[i].path, path) == 0) return &sh->lim[i];
    return NULL;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t d, nvmlSetMemoryLimits_v1_t *l)
{
    int cfg;
    CHECK_DEV(d, &cfg);
    if (!l || !l->nameSpace) return NVML_ERROR_INVALID_ARGUMENT;
    if (geteuid() != 0) return NVML_ERROR_NO_PERMISSION;
    int clear = l->softLimit == 0 && l->hardLimit == NVML_DEVICE_MEMORY_LIMIT_MAX;
    if (!clear && (l->softLimit > l->hardLimit || l->hardLimit > dc->memory)) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t ino;
    nvmlReturn_t r = open_cgroup(l->nameSpace, &ino);
    if (r != NVML_SUCCESS) return r;
    struct sim_shared *sh = nst.sh;
    sim_lock(sh);
    struct sim_limit *e = find_limit(sh, l->nameSpace);
    if (!e && !clear) {
        for (int i = 0; i < SIM_MAX_LIMITS && !e; i++)
            if (!sh->lim[i].active) {
                e = &sh->lim[i];
                memset(e, 0, sizeof *e);
                snprintf(e->path, sizeof e->path, "%s", l->nameSpace);
                e->active = 1;
            }
        if (!e) {
            sim_unlock(sh);
            return NVML_ERROR_INSUFFICIENT_RESOURCES;
        }
    }
    if (e) {
        e->ino = ino;
        e->has[cfg] = !clear;
        e->soft[cfg] = clear ? 0 : l->softLimit;
        e->hard[cfg] = clear ? 0 : l->hardLimit;
        int any = 0;
        for (int i = 0; i < SIM_MAX_DEV; i++) any |= e->has[i];
        if (!any) memset(e, 0, sizeof *e);
    }
    sim_unlock(sh);
    return NVML_SUCCESS;
}

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t d, nvmlGetMemoryLimits_v1_t *l)
{
    int cfg;
    CHECK_DEV(d, &cfg);
    if (!l || !l->nameSpace) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t ino;
    nvmlReturn_t r = open_cgroup(l->nameSpace, &ino);
    if (r != NVML_SUCCESS) return r;
    struct sim_shared *sh = nst.sh;
    sim_lock(sh);
    struct sim_limit *e = find_limit(sh, l->nameSpace);
    if (e && e->has[cfg]) {
        l->softLimit = e->soft[cfg];
        l->hardLimit = e->hard[cfg];
        l->currentUsed = sim_limit_used_locked(sh, e, cfg);
        r = NVML_SUCCESS;
    } else {
        r = NVML_ERROR_NOT_FOUND;
    }
    sim_unlock(sh);
    return r;
}
#endif
