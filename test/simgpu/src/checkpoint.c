/* The driver's checkpoint API (cuCheckpointProcess*, driver 570 and later),
 * as driver 580 behaved on the H100 and H200 (docs/node.md, "Suspension
 * probe"):
 * - another process moves a process through running -> locked ->
 *   checkpointed -> locked -> running, naming it by pid as it sees it;
 * - a lock waits for the process's work in flight (its threads inside a
 *   driver call and its kernels on the device) up to the timeout, else
 *   CUDA_ERROR_NOT_READY and the process runs on; while locked or
 *   checkpointed the process's threads run on the CPU and its next driver
 *   call waits;
 * - a checkpoint copies all the process's device memory (its contexts
 *   included) to host memory of the process itself, so the copy is charged
 *   to its own memory cgroup, and frees the device: NVML lists no process
 *   for it; a process with managed memory is refused with
 *   CUDA_ERROR_NOT_SUPPORTED and left locked;
 * - a restore needs room for the whole process; without it the restore
 *   fails with CUDA_ERROR_OUT_OF_MEMORY and every later one with
 *   CUDA_ERROR_OPERATING_SYSTEM: the process cannot be restored again;
 * - killing a locked or checkpointed process frees what it holds.
 * The work that must run as the target (the host copy) runs on its restore
 * thread, started when it attaches and woken through a futex in the shared
 * state.
 * - an MPS client cannot be locked (CUDA_ERROR_NOT_SUPPORTED, it runs on);
 * - arguments whose reserved words are not all zero are
 *   CUDA_ERROR_INVALID_VALUE (the checkpoint's, seen on the H100 with the
 *   lock's timeout left in its first word; the others as documented);
 * - a call out of order is CUDA_ERROR_ILLEGAL_STATE; a pid without CUDA is
 *   CUDA_ERROR_NOT_INITIALIZED, one that does not exist
 *   CUDA_ERROR_OPERATING_SYSTEM.
 * The simulator has no CUDA IPC, so the importer's refused restore is not
 * modelled. */
#define _GNU_SOURCE
#include "cuda_int.h"

#include <errno.h>
#include <signal.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef enum {
    CU_PROCESS_STATE_RUNNING = SIM_PROC_RUNNING,
    CU_PROCESS_STATE_LOCKED = SIM_PROC_LOCKED,
    CU_PROCESS_STATE_CHECKPOINTED = SIM_PROC_CHECKPOINTED,
    CU_PROCESS_STATE_FAILED = 3,
} CUprocessState;

typedef struct {
    unsigned int timeoutMs; /* 0: no timeout */
    unsigned int reserved0;
    cuuint64_t reserved1[7];
} CUcheckpointLockArgs;

typedef struct {
    cuuint64_t reserved[8];
} CUcheckpointArgs; /* the checkpoint, restore and unlock arguments: reserved words */

static long futex(uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, w, op, val, ts, NULL, 0);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the target's side ---- */

static int has_managed_memory(void)
{
    pthread_mutex_lock(&g.mu);
    int m = 0;
    for (size_t i = 0; i < g.nalloc && !m; i++) m = g.allocs[i].kind == A_MANAGED;
    pthread_mutex_unlock(&g.mu);
    return m;
}

struct restore_thread {
    struct sim_shared *sh;
    int slot;
};

static void *restore_thread(void *arg)
{
    struct restore_thread rt = *(struct restore_thread *)arg;
    free(arg);
    struct sim_proc *p = &rt.sh->proc[rt.slot];
    __atomic_store_n(&p->ckpt_tid, (int32_t)gettid(), __ATOMIC_SEQ_CST);
    void *copy = NULL;
    size_t copy_n = 0;
    for (;;) {
        uint32_t req = __atomic_load_n(&p->ckpt_req, __ATOMIC_SEQ_CST);
        if (!req) {
            futex(&p->ckpt_req, FUTEX_WAIT, 0, NULL);
            continue;
        }
        CUresult rc = CUDA_SUCCESS;
        if (req == SIM_CKPT_SAVE && has_managed_memory()) {
            rc = CUDA_ERROR_NOT_SUPPORTED;
        } else if (req == SIM_CKPT_SAVE) {
            sim_lock(rt.sh);
            uint64_t total = 0;
            for (int d = 0; d < SIM_MAX_DEV; d++) total += p->mem[d];
            sim_unlock(rt.sh);
            /* the copy is this process's own memory, every page touched, as
             * the driver's host copy is */
            copy_n = total ? (size_t)total : 1;
            copy = mmap(NULL, copy_n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (copy == MAP_FAILED) {
                copy = NULL;
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                memset(copy, 0xcd, copy_n);
                sim_lock(rt.sh);
                for (int d = 0; d < SIM_MAX_DEV; d++) {
                    p->saved[d] = p->mem[d];
                    p->mem[d] = 0;
                }
                p->ckpt_state = SIM_PROC_CHECKPOINTED;
                sim_unlock(rt.sh);
            }
        } else if (req == SIM_CKPT_DROP && copy) {
            munmap(copy, copy_n);
            copy = NULL;
        }
        __atomic_store_n(&p->ckpt_rc, (int32_t)rc, __ATOMIC_SEQ_CST);
        __atomic_store_n(&p->ckpt_req, 0, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&p->ckpt_done, 1, __ATOMIC_SEQ_CST);
        futex(&p->ckpt_done, FUTEX_WAKE, INT_MAX, NULL);
    }
    return NULL;
}

void sim_checkpoint_attach(void)
{
    struct restore_thread *rt = malloc(sizeof *rt);
    if (!rt) return;
    rt->sh = g.st.sh;
    rt->slot = g.st.slot;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, restore_thread, rt) != 0) free(rt);
    pthread_attr_destroy(&a);
}

/* Called with g.mu held on entry to every driver call: a locked or
 * checkpointed process's call waits, without g.mu, until it runs again. */
void sim_checkpoint_gate(void)
{
    while (g.st.slot >= 0) {
        struct sim_proc *p = &g.st.sh->proc[g.st.slot];
        __atomic_add_fetch(&p->inside, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&p->ckpt_state, __ATOMIC_SEQ_CST) == SIM_PROC_RUNNING) return;
        __atomic_sub_fetch(&p->inside, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&g.mu);
        sleep_ms(1);
        pthread_mutex_lock(&g.mu);
    }
}

void sim_checkpoint_leave(void)
{
    if (g.st.slot >= 0) __atomic_sub_fetch(&g.st.sh->proc[g.st.slot].inside, 1, __ATOMIC_SEQ_CST);
}

/* ---- the caller's side ---- */

/* The slot of the CUDA process the caller knows as pid, or -1. */
static int find_target(int pid, struct sim_proc *who)
{
    if (pid <= 0) return -1;
    int pids[SIM_MAX_PROC], slots[SIM_MAX_PROC], seen[SIM_MAX_PROC];
    uint32_t ns[SIM_MAX_PROC];
    unsigned n = 0;
    struct sim_shared *sh = g.st.sh;
    sim_lock(sh);
    for (int i = 0; i < SIM_MAX_PROC; i++)
        if (sim_slot_alive_locked(&g.st, i)) {
            pids[n] = sh->proc[i].pid;
            ns[n] = sh->proc[i].pidns;
            slots[n++] = i;
        }
    sim_unlock(sh);
    sim_host_pids(pids, ns, seen, n);
    for (unsigned i = 0; i < n; i++)
        if (seen[i] == pid) {
            who->pid = pids[i];
            who->pidns = ns[i];
            return slots[i];
        }
    return -1;
}

/* The target's slot still holds the process find_target found. */
static int same_locked(int slot, const struct sim_proc *who)
{
    struct sim_proc *p = &g.st.sh->proc[slot];
    return sim_slot_alive_locked(&g.st, slot) && p->pid == who->pid && p->pidns == who->pidns;
}

/* What the driver answers for a pid it has no CUDA process for. */
static CUresult no_target(int pid)
{
    if (pid > 0 && (kill(pid, 0) == 0 || errno == EPERM)) return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_ERROR_OPERATING_SYSTEM;
}

static CUresult caller_ready(void)
{
    pthread_mutex_lock(&g.mu);
    int ok = g.init_state == 1 && g.pid == getpid() && !g.need_reset && g.st.sh;
    pthread_mutex_unlock(&g.mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

#define TARGET(pid, slot, who)                   \
    struct sim_proc who;                         \
    int slot;                                    \
    do {                                         \
        CUresult _r = caller_ready();            \
        if (_r != CUDA_SUCCESS) return _r;       \
        if ((slot = find_target(pid, &who)) < 0) \
            return no_target(pid);               \
    } while (0)

/* When the process's last queued kernel ends (CLOCK_MONOTONIC ns), from the
 * devices' busy rings (newest first; each device runs in order). */
static uint64_t work_end_locked(const struct sim_proc *who)
{
    uint64_t end = 0, now = sim_now();
    struct sim_shared *sh = g.st.sh;
    for (int d = 0; d < g.env.cfg.ndev; d++) {
        struct sim_shdev *sd = &sh->dev[d];
        uint64_t nb = sd->nbusy, lim = nb < SIM_BUSY_RING ? nb : SIM_BUSY_RING;
        for (uint64_t k = 0; k < lim; k++) {
            struct sim_busy *b = &sd->busy[(nb - 1 - k) % SIM_BUSY_RING];
            if (b->end <= now) break;
            if (b->pid == who->pid && b->pidns == who->pidns && b->end > end) end = b->end;
        }
    }
    return end;
}

/* Asks the target's restore thread for req and waits for its answer while
 * the target lives. */
static CUresult ask_target(int slot, const struct sim_proc *who, uint32_t req)
{
    struct sim_proc *p = &g.st.sh->proc[slot];
    uint32_t done = __atomic_load_n(&p->ckpt_done, __ATOMIC_SEQ_CST);
    __atomic_store_n(&p->ckpt_req, req, __ATOMIC_SEQ_CST);
    futex(&p->ckpt_req, FUTEX_WAKE, INT_MAX, NULL);
    for (;;) {
        if (__atomic_load_n(&p->ckpt_done, __ATOMIC_SEQ_CST) != done)
            return (CUresult)__atomic_load_n(&p->ckpt_rc, __ATOMIC_SEQ_CST);
        sim_lock(g.st.sh);
        int alive = same_locked(slot, who);
        sim_unlock(g.st.sh);
        if (!alive) return CUDA_ERROR_OPERATING_SYSTEM; /* it died meanwhile */
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 50000000L};
        futex(&p->ckpt_done, FUTEX_WAIT, done, &ts);
    }
}

SIM_EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    if (!state) return CUDA_ERROR_INVALID_VALUE;
    TARGET(pid, slot, who);
    sim_lock(g.st.sh);
    *state = same_locked(slot, &who) ? (CUprocessState)g.st.sh->proc[slot].ckpt_state : CU_PROCESS_STATE_FAILED;
    sim_unlock(g.st.sh);
    return CUDA_SUCCESS;
}

static int reserved_zero(const cuuint64_t *w, int n)
{
    for (int i = 0; i < n; i++)
        if (w[i]) return 0;
    return 1;
}

SIM_EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
    if (!tid) return CUDA_ERROR_INVALID_VALUE;
    TARGET(pid, slot, who);
    *tid = __atomic_load_n(&g.st.sh->proc[slot].ckpt_tid, __ATOMIC_SEQ_CST);
    return *tid ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    if (args && (args->reserved0 || !reserved_zero(args->reserved1, 7))) return CUDA_ERROR_INVALID_VALUE;
    TARGET(pid, slot, who);
    struct sim_proc *p = &g.st.sh->proc[slot];
    sim_lock(g.st.sh);
    if (!same_locked(slot, &who) || p->ckpt_state != SIM_PROC_RUNNING) {
        sim_unlock(g.st.sh);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    if (p->mps) {
        sim_unlock(g.st.sh);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    __atomic_store_n(&p->ckpt_state, SIM_PROC_LOCKED, __ATOMIC_SEQ_CST);
    sim_unlock(g.st.sh);
    uint64_t timeout = args && args->timeoutMs ? (uint64_t)args->timeoutMs * 1000000ULL : 0;
    uint64_t until = sim_now() + timeout;
    for (;;) {
        sim_lock(g.st.sh);
        int alive = same_locked(slot, &who);
        uint64_t end = alive ? work_end_locked(&who) : 0;
        sim_unlock(g.st.sh);
        if (!alive) return CUDA_ERROR_OPERATING_SYSTEM;
        if (!__atomic_load_n(&p->inside, __ATOMIC_SEQ_CST) && end <= sim_now()) return CUDA_SUCCESS;
        if (timeout && sim_now() >= until) break;
        sleep_ms(1);
    }
    __atomic_store_n(&p->ckpt_state, SIM_PROC_RUNNING, __ATOMIC_SEQ_CST);
    return CUDA_ERROR_NOT_READY;
}

SIM_EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointArgs *args)
{
    if (args && !reserved_zero(args->reserved, 8)) return CUDA_ERROR_INVALID_VALUE;
    TARGET(pid, slot, who);
    sim_lock(g.st.sh);
    int ok = same_locked(slot, &who) && g.st.sh->proc[slot].ckpt_state == SIM_PROC_LOCKED;
    sim_unlock(g.st.sh);
    if (!ok) return CUDA_ERROR_ILLEGAL_STATE;
    return ask_target(slot, &who, SIM_CKPT_SAVE);
}

SIM_EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointArgs *args)
{
    if (args && !reserved_zero(args->reserved, 8)) return CUDA_ERROR_INVALID_VALUE;
    TARGET(pid, slot, who);
    struct sim_proc *p = &g.st.sh->proc[slot];
    sim_lock(g.st.sh);
    if (!same_locked(slot, &who) || p->ckpt_state != SIM_PROC_CHECKPOINTED) {
        sim_unlock(g.st.sh);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    if (p->ckpt_lost) {
        sim_unlock(g.st.sh);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    /* the whole process or nothing, and the room taken in the same step */
    int room = 1;
    for (int d = 0; d < g.env.cfg.ndev && room; d++)
        if (p->saved[d]) room = sim_room_locked(&g.st, slot, d, sim_usable(&g.env.cfg.dev[d]), p->saved[d]);
    if (!room) {
        p->ckpt_lost = 1;
        sim_unlock(g.st.sh);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (int d = 0; d < SIM_MAX_DEV; d++) {
        p->mem[d] += p->saved[d];
        p->saved[d] = 0;
    }
    p->ckpt_state = SIM_PROC_LOCKED;
    sim_unlock(g.st.sh);
    ask_target(slot, &who, SIM_CKPT_DROP); /* the host copy goes */
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointArgs *args)
{
    if (args && !reserved_zero(args->reserved, 8)) return CUDA_ERROR_INVALID_VALUE;
    TARGET(pid, slot, who);
    struct sim_proc *p = &g.st.sh->proc[slot];
    sim_lock(g.st.sh);
    int ok = same_locked(slot, &who) && p->ckpt_state == SIM_PROC_LOCKED;
    if (ok) __atomic_store_n(&p->ckpt_state, SIM_PROC_RUNNING, __ATOMIC_SEQ_CST);
    sim_unlock(g.st.sh);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
}
