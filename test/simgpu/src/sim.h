/* Internals shared by the simulated libcuda and libnvidia-ml (test/simgpu).
 *
 * Both libraries read the same config (run/simgpu/config) and map the same shared
 * state file (run/simgpu/state), so memory use and kernel timelines are visible
 * across processes and across the two APIs, as on a real GPU. */
#ifndef SIMGPU_SIM_H
#define SIMGPU_SIM_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

/* Everything is hidden unless marked: the two libraries may be loaded into one
 * process RTLD_GLOBAL, and internal names must not collide or interpose. */
#define SIM_EXPORT __attribute__((visibility("default")))

/* The r615 build (simgpu.mk) overrides both and defines SIM_MEMORY_LIMITS:
 * its NVML exports nvmlDevice{Set,Get}MemoryLimits_v1. */
#ifndef SIM_DRIVER_VERSION_STR
#define SIM_DRIVER_VERSION_STR "580.95.05"
#endif
#ifndef SIM_CUDA_VERSION
#define SIM_CUDA_VERSION 13000
#endif
#define SIM_MAX_DEV           16
#define SIM_MAX_PROC          256
#define SIM_BUSY_RING         8192
#define SIM_STATE_MAGIC       0x3156504753494d53ULL /* "SMISGPV1" */
#define SIM_STATE_VERSION     6
#define SIM_MAX_LIMITS        64
#define SIM_CGPATH            512          /* a cgroup path, NUL included */
#define SIM_DEFAULT_KERNEL_NS 5000ULL      /* kernel without a <N>us suffix: 5 us */
#define SIM_GRANULARITY       (2ULL << 20) /* VMM / pool granularity: 2 MiB */
#define SIM_THREADS_PER_SM    2048         /* max resident threads per SM (Hopper) */
#define SIM_LAUNCH_SLOT_BYTES 2048ULL      /* one device-runtime pending launch slot */

struct sim_devcfg {
    char name[96];
    char uuid[48]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    unsigned char uuid_bytes[16];
    uint64_t memory;
    /* The driver's own memory (device line "reserved="): NVML's total and
     * its version-1 used figure count it, no process lists it, and no
     * allocation gets it; cuMemGetInfo and cuDeviceTotalMem give the
     * total without it (an H200 on driver 580: 616 MiB). */
    uint64_t reserved;
    int sms;
    unsigned pci_domain, pci_bus, pci_dev;
    int minor;
};

/* What allocations may take of a device: its memory less the driver's own. */
static inline uint64_t sim_usable(const struct sim_devcfg *d) { return d->memory - d->reserved; }

struct sim_config {
    uint64_t ctx_mem;
    char cgroup_root[SIM_CGPATH]; /* where the host mounts its cgroup v2 hierarchy */
    int cgroup_v2_only;           /* refuse limits unless that is /sys/fs/cgroup (unified mode) */
    int ndev;
    struct sim_devcfg dev[SIM_MAX_DEV];
};

/* Where the simulator lives and what this process can see. */
struct sim_env {
    char simdir[PATH_MAX];
    char devdir[PATH_MAX + 16];
    struct sim_config cfg;
    int nvis;             /* visible devices, in config order */
    int vis[SIM_MAX_DEV]; /* visible index -> config index */
};

/* ---- shared state file layout (mmap MAP_SHARED) ---- */
/* pidns: inode of the recording process's pid namespace; with pid it names the
 * process whatever namespace a reader lives in (a driver knows host pids). */
struct sim_busy {
    uint64_t start, end;
    int32_t pid;
    uint32_t pidns;
};

struct sim_shdev {
    uint64_t tail;  /* CLOCK_MONOTONIC ns when the last queued kernel ends */
    uint64_t nbusy; /* busy intervals ever written; ring index = n % RING */
    struct sim_busy busy[SIM_BUSY_RING];
};

struct sim_proc {
    int32_t pid;
    uint32_t active; /* slot in use; liveness = OFD lock on its byte */
    uint64_t mem[SIM_MAX_DEV];
    uint32_t nctx[SIM_MAX_DEV];
    uint32_t pidns;          /* the process's pid namespace (inode), see sim_busy */
    uint64_t cgino;          /* inode of its cgroup v2 directory, 0 when unknown */
    char cgroup[SIM_CGPATH]; /* host path of its cgroup v2 directory, "" when unknown */
    uint32_t mps;            /* an MPS client: NVML lists it among the MPS compute processes */
    /* The pid each NVML reader's namespace last saw it under (SIM_SEEN
     * readers): a process that exits while a child it forked keeps the
     * state file (its descriptors) stays listed under that pid, as the real
     * driver lists an exited parent's pid while a child holds its
     * descriptors. A process no reader of a namespace saw alive is listed
     * there under no pid (the real driver knows every pid). */
    int32_t seen_pid[4];
    uint32_t seen_ns[4];
    /* The driver's checkpoint API (checkpoint.c). Another process moves
     * this one through the states; the work that must run as this process
     * (the host copy, charged to its own memory cgroup) runs on its restore
     * thread, woken by a request in ckpt_req (a futex word). */
    uint32_t ckpt_state;         /* CU_PROCESS_STATE_* */
    uint32_t ckpt_req;           /* futex: SIM_CKPT_SAVE / SIM_CKPT_DROP, 0 when none */
    uint32_t ckpt_done;          /* futex: bumped when the restore thread answered */
    int32_t ckpt_rc;             /* its answer (a CUresult) */
    uint32_t inside;             /* threads inside a driver call (a lock waits them out) */
    uint32_t ckpt_lost;          /* a restore lacked room: it can never be restored */
    int32_t ckpt_tid;            /* the restore thread */
    uint64_t saved[SIM_MAX_DEV]; /* device memory held on the host while checkpointed */
};
/* CUprocessState's values */
#define SIM_PROC_RUNNING      0
#define SIM_PROC_LOCKED       1
#define SIM_PROC_CHECKPOINTED 2
#define SIM_CKPT_SAVE         1
#define SIM_CKPT_DROP         2
#define SIM_SEEN              4

/* A per-cgroup device memory limit (nvmlDeviceSetMemoryLimits_v1): binds every
 * process whose cgroup is path or below it, whatever library it calls. */
struct sim_limit {
    uint32_t active;
    uint64_t ino; /* inode of path when set: matches processes in a cgroup namespace */
    char path[SIM_CGPATH];
    uint8_t has[SIM_MAX_DEV];
    uint64_t soft[SIM_MAX_DEV], hard[SIM_MAX_DEV];
};

struct sim_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t size;
    pthread_mutex_t mu; /* robust, process-shared */
    struct sim_shdev dev[SIM_MAX_DEV];
    struct sim_proc proc[SIM_MAX_PROC];
    struct sim_limit lim[SIM_MAX_LIMITS];
};

struct sim_state {
    int fd;
    struct sim_shared *sh;
    int slot; /* -1: no slot (NVML never holds one) */
};

/* config.c */
void sim_find_dir(void *addr_in_lib, char *out, size_t n);
int sim_load_env(void *addr_in_lib, struct sim_env *env, char *why, size_t whyn);
int sim_parse_config(const char *path, struct sim_config *cfg, char *why, size_t whyn);
int sim_parse_uuid(const char *s, unsigned char out[16]);
int sim_parse_pci(const char *s, unsigned *dom, unsigned *bus, unsigned *dev);
void sim_warn_once(const char *msg);

/* state.c */
uint64_t sim_now(void);
void sim_sleep_until(uint64_t t);
int sim_state_open(const char *simdir, struct sim_state *st);
void sim_state_close(struct sim_state *st);
void sim_lock(struct sim_shared *sh);
void sim_unlock(struct sim_shared *sh);
int sim_slot_acquire(struct sim_state *st); /* takes the lock itself */
void sim_reap_locked(struct sim_state *st);
uint64_t sim_used_locked(struct sim_shared *sh, int cfgidx);
int sim_room_locked(struct sim_state *st, int slot, int cfgidx, uint64_t cap, uint64_t bytes);
int sim_charge(struct sim_state *st, int cfgidx, uint64_t cap, uint64_t bytes);
int sim_slot_alive_locked(struct sim_state *st, int slot);
void sim_uncharge(struct sim_state *st, int cfgidx, uint64_t bytes);
void sim_ctx_count(struct sim_state *st, int cfgidx, int delta);
uint64_t sim_schedule(struct sim_state *st, int cfgidx, uint64_t ready, uint64_t dur, uint64_t *start);
uint64_t sim_marker(struct sim_state *st, int cfgidx, uint64_t ready);
uint64_t sim_busy_locked(struct sim_shared *sh, int cfgidx, uint64_t from, uint64_t to, int pid);
uint64_t sim_busy_of_locked(struct sim_shared *sh, int cfgidx, uint64_t from, uint64_t to, int pid, uint32_t pidns);
uint32_t sim_pidns(void);
void sim_self_cgroup(const char *root, char *out, size_t n, uint64_t *ino);
void sim_slot_set_cgroup(struct sim_state *st, const char *path, uint64_t ino);
void sim_slot_set_mps(struct sim_state *st); /* the process is an MPS client */
int sim_proc_in_limit(const struct sim_proc *p, const struct sim_limit *l);
uint64_t sim_limit_used_locked(struct sim_shared *sh, const struct sim_limit *l, int cfgidx);
int sim_host_pids(const int *pids, const uint32_t *ns, int *out, unsigned n);

#endif
