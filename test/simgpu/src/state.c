/* The shared state file: one mmap'd region per simulator root, shared by every
 * process (host and containers) that uses the simulated GPU.
 *
 * - a robust process-shared mutex guards it (a holder that dies leaves it
 *   recoverable, EOWNERDEAD);
 * - each CUDA process owns a slot; the slot is alive while the process holds an
 *   OFD write lock on byte LOCK_BASE+slot of the file. The kernel drops that lock
 *   when the last descriptor of the open file description goes away (process
 *   death, SIGKILL included), so the memory of a dead process is reclaimed the
 *   next time anyone looks (reap);
 * - per device: the tail of the kernel FIFO and a ring of busy intervals. */
#define _GNU_SOURCE
#include "sim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define LOCK_BASE ((off_t)1 << 32)

uint64_t sim_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void sim_sleep_until(uint64_t t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ULL), .tv_nsec = (long)(t % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
}

static void init_region(struct sim_shared *sh)
{
    memset(sh, 0, sizeof *sh);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&sh->mu, &a);
    pthread_mutexattr_destroy(&a);
    sh->version = SIM_STATE_VERSION;
    sh->size = (uint32_t)sizeof *sh;
    __atomic_store_n(&sh->magic, SIM_STATE_MAGIC, __ATOMIC_RELEASE);
}

int sim_state_open(const char *simdir, struct sim_state *st)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/state", simdir);
    st->fd = -1;
    st->sh = NULL;
    st->slot = -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    /* flock serializes creation/upgrade between processes; it is independent of the
     * OFD record locks used for liveness */
    while (flock(fd, LOCK_EX) < 0 && errno == EINTR) {}
    struct stat sb;
    if (fstat(fd, &sb) < 0) goto fail;
    if (sb.st_uid == geteuid()) fchmod(fd, 0666); /* containers may run as other users */
    int fresh = (size_t)sb.st_size < sizeof(struct sim_shared);
    if (fresh && ftruncate(fd, (off_t)sizeof(struct sim_shared)) < 0) goto fail;
    void *m = mmap(NULL, sizeof(struct sim_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) goto fail;
    struct sim_shared *sh = m;
    if (fresh || sh->magic != SIM_STATE_MAGIC || sh->version != SIM_STATE_VERSION ||
        sh->size != sizeof *sh)
        init_region(sh);
    flock(fd, LOCK_UN);
    st->fd = fd;
    st->sh = sh;
    return 0;
fail:
    close(fd);
    return -1;
}

void sim_state_close(struct sim_state *st)
{
    if (st->sh) munmap(st->sh, sizeof *st->sh);
    if (st->fd >= 0) close(st->fd);
    st->sh = NULL;
    st->fd = -1;
    st->slot = -1;
}

void sim_lock(struct sim_shared *sh)
{
    int rc = pthread_mutex_lock(&sh->mu);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&sh->mu); /* holder died mid-update */
}

void sim_unlock(struct sim_shared *sh) { pthread_mutex_unlock(&sh->mu); }

static int slot_locked_by_other(int fd, int slot)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_BASE + slot, .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) < 0) return 1; /* cannot tell: assume alive */
    return fl.l_type != F_UNLCK;
}

void sim_reap_locked(struct sim_state *st)
{
    struct sim_shared *sh = st->sh;
    for (int i = 0; i < SIM_MAX_PROC; i++) {
        if (!sh->proc[i].active || i == st->slot) continue;
        if (!slot_locked_by_other(st->fd, i)) memset(&sh->proc[i], 0, sizeof sh->proc[i]);
    }
}

int sim_slot_acquire(struct sim_state *st)
{
    struct sim_shared *sh = st->sh;
    sim_lock(sh);
    sim_reap_locked(st);
    for (int i = 0; i < SIM_MAX_PROC; i++) {
        if (sh->proc[i].active) continue;
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_BASE + i, .l_len = 1};
        if (fcntl(st->fd, F_OFD_SETLK, &fl) < 0) continue;
        memset(&sh->proc[i], 0, sizeof sh->proc[i]);
        sh->proc[i].pid = getpid();
        sh->proc[i].pidns = sim_pidns();
        sh->proc[i].active = 1;
        st->slot = i;
        sim_unlock(sh);
        return 0;
    }
    sim_unlock(sh);
    return -1;
}

uint64_t sim_used_locked(struct sim_shared *sh, int cfgidx)
{
    uint64_t u = 0;
    for (int i = 0; i < SIM_MAX_PROC; i++)
        if (sh->proc[i].active) u += sh->proc[i].mem[cfgidx];
    return u;
}

/* Capacity is checked against everyone's use; dead processes are reaped before
 * an allocation is refused, so a SIGKILLed process never holds memory hostage.
 * Whether slot may take bytes more on device cfgidx: its capacity and every
 * per-cgroup hard limit (nvmlDeviceSetMemoryLimits_v1) the process is under. */
int sim_room_locked(struct sim_state *st, int slot, int cfgidx, uint64_t cap, uint64_t bytes)
{
    struct sim_shared *sh = st->sh;
    uint64_t used = sim_used_locked(sh, cfgidx);
    if (used > cap || bytes > cap - used) {
        sim_reap_locked(st);
        used = sim_used_locked(sh, cfgidx);
    }
    int ok = used <= cap && bytes <= cap - used;
    for (int i = 0; ok && i < SIM_MAX_LIMITS; i++) {
        struct sim_limit *l = &sh->lim[i];
        if (!l->active || !l->has[cfgidx] || !sim_proc_in_limit(&sh->proc[slot], l)) continue;
        uint64_t u = sim_limit_used_locked(sh, l, cfgidx);
        if (u > l->hard[cfgidx] || bytes > l->hard[cfgidx] - u) {
            sim_reap_locked(st);
            u = sim_limit_used_locked(sh, l, cfgidx);
            ok = u <= l->hard[cfgidx] && bytes <= l->hard[cfgidx] - u;
        }
    }
    return ok;
}

int sim_charge(struct sim_state *st, int cfgidx, uint64_t cap, uint64_t bytes)
{
    struct sim_shared *sh = st->sh;
    if (st->slot < 0) return -1;
    sim_lock(sh);
    int ok = sim_room_locked(st, st->slot, cfgidx, cap, bytes);
    if (ok) sh->proc[st->slot].mem[cfgidx] += bytes;
    sim_unlock(sh);
    return ok ? 0 : -1;
}

int sim_slot_alive_locked(struct sim_state *st, int slot)
{
    return st->sh->proc[slot].active && (slot == st->slot || slot_locked_by_other(st->fd, slot));
}

void sim_uncharge(struct sim_state *st, int cfgidx, uint64_t bytes)
{
    if (st->slot < 0 || bytes == 0) return;
    sim_lock(st->sh);
    uint64_t *m = &st->sh->proc[st->slot].mem[cfgidx];
    *m = *m >= bytes ? *m - bytes : 0;
    sim_unlock(st->sh);
}

void sim_ctx_count(struct sim_state *st, int cfgidx, int delta)
{
    if (st->slot < 0) return;
    sim_lock(st->sh);
    uint32_t *n = &st->sh->proc[st->slot].nctx[cfgidx];
    if (delta < 0 && *n == 0) {
    } else *n = (uint32_t)((int)*n + delta);
    sim_unlock(st->sh);
}

/* One kernel at a time per device, FIFO in launch order across all streams and
 * processes: a kernel starts at max(ready, device tail) and owns the device for
 * its duration. Back-to-back intervals of one pid are coalesced. */
uint64_t sim_schedule(struct sim_state *st, int cfgidx, uint64_t ready, uint64_t dur, uint64_t *start)
{
    struct sim_shared *sh = st->sh;
    int pid = getpid();
    uint32_t ns = sim_pidns();
    sim_lock(sh);
    struct sim_shdev *d = &sh->dev[cfgidx];
    uint64_t now = sim_now();
    uint64_t s = ready > now ? ready : now;
    if (d->tail > s) s = d->tail;
    uint64_t e = s + dur;
    d->tail = e;
    struct sim_busy *last = d->nbusy ? &d->busy[(d->nbusy - 1) % SIM_BUSY_RING] : NULL;
    if (last && last->pid == pid && last->pidns == ns && last->end == s) {
        last->end = e;
    } else {
        struct sim_busy *b = &d->busy[d->nbusy % SIM_BUSY_RING];
        b->start = s;
        b->end = e;
        b->pid = pid;
        b->pidns = ns;
        d->nbusy++;
    }
    sim_unlock(sh);
    if (start) *start = s;
    return e;
}

/* A marker (event record) in the same FIFO: it is reached when everything
 * queued before it on the device is done. It takes no device time, so it
 * neither moves the tail nor leaves a busy interval. */
uint64_t sim_marker(struct sim_state *st, int cfgidx, uint64_t ready)
{
    struct sim_shared *sh = st->sh;
    sim_lock(sh);
    uint64_t t = sh->dev[cfgidx].tail;
    sim_unlock(sh);
    return ready > t ? ready : t;
}

/* Busy time within [from, to), optionally only of one pid (pid <= 0: all). The
 * ring is ordered by start, so walk back from the newest until intervals end
 * before the window. */
uint64_t sim_busy_locked(struct sim_shared *sh, int cfgidx, uint64_t from, uint64_t to, int pid)
{
    struct sim_shdev *d = &sh->dev[cfgidx];
    uint64_t total = 0, n = d->nbusy, lim = n < SIM_BUSY_RING ? n : SIM_BUSY_RING;
    for (uint64_t k = 0; k < lim; k++) {
        struct sim_busy *b = &d->busy[(n - 1 - k) % SIM_BUSY_RING];
        if (b->end <= from) break;
        if (pid > 0 && b->pid != pid) continue;
        uint64_t s = b->start > from ? b->start : from, e = b->end < to ? b->end : to;
        if (e > s) total += e - s;
    }
    return total;
}

/* Busy time within [from, to) of one process, named by pid and pid namespace. */
uint64_t sim_busy_of_locked(struct sim_shared *sh, int cfgidx, uint64_t from, uint64_t to, int pid, uint32_t pidns)
{
    struct sim_shdev *d = &sh->dev[cfgidx];
    uint64_t total = 0, n = d->nbusy, lim = n < SIM_BUSY_RING ? n : SIM_BUSY_RING;
    for (uint64_t k = 0; k < lim; k++) {
        struct sim_busy *b = &d->busy[(n - 1 - k) % SIM_BUSY_RING];
        if (b->end <= from) break;
        if (b->pid != pid || b->pidns != pidns) continue;
        uint64_t s = b->start > from ? b->start : from, e = b->end < to ? b->end : to;
        if (e > s) total += e - s;
    }
    return total;
}

/* This process's pid namespace (inode of /proc/self/ns/pid; 0 when unknown),
 * cached per pid (a child after fork may live in another namespace). */
uint32_t sim_pidns(void)
{
    static int cached_pid;
    static uint32_t cached_ns;
    int pid = getpid();
    if (__atomic_load_n(&cached_pid, __ATOMIC_ACQUIRE) == pid) return __atomic_load_n(&cached_ns, __ATOMIC_RELAXED);
    struct stat sb;
    uint32_t ns = stat("/proc/self/ns/pid", &sb) == 0 ? (uint32_t)sb.st_ino : 0;
    __atomic_store_n(&cached_ns, ns, __ATOMIC_RELAXED);
    __atomic_store_n(&cached_pid, pid, __ATOMIC_RELEASE);
    return ns;
}

/* What a real driver knows and the simulator must find out: the pid under
 * which the reader sees each process (pids[i] in namespace ns[i]). Same
 * namespace as ours (or unknown): the pid itself. Otherwise one walk of our
 * /proc finds the process whose pid namespace is ns[i] and whose innermost
 * NSpid is pids[i]; out[i] = 0 when none is visible from here. */
int sim_host_pids(const int *pids, const uint32_t *ns, int *out, unsigned n)
{
    uint32_t self = sim_pidns();
    unsigned left = 0;
    for (unsigned i = 0; i < n; i++) {
        out[i] = (ns[i] == 0 || ns[i] == self) ? pids[i] : 0;
        if (!out[i]) left++;
    }
    if (!left) return 0;
    DIR *d = opendir("/proc");
    if (!d) return -1;
    struct dirent *e;
    while (left && (e = readdir(d))) {
        char *end;
        long p = strtol(e->d_name, &end, 10);
        if (*end || p <= 0) continue;
        char path[64];
        struct stat sb;
        snprintf(path, sizeof path, "/proc/%ld/ns/pid", p);
        if (stat(path, &sb) != 0) continue;
        int want = 0;
        for (unsigned i = 0; i < n; i++)
            if (!out[i] && ns[i] == (uint32_t)sb.st_ino) want = 1;
        if (!want) continue;
        snprintf(path, sizeof path, "/proc/%ld/status", p);
        FILE *f = fopen(path, "re");
        if (!f) continue;
        char line[512];
        long inner = -1;
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "NSpid:", 6)) continue;
            char *save = NULL, *tok = strtok_r(line + 6, " \t\n", &save);
            while (tok) {
                inner = strtol(tok, NULL, 10);
                tok = strtok_r(NULL, " \t\n", &save);
            }
            break;
        }
        fclose(f);
        for (unsigned i = 0; i < n; i++)
            if (!out[i] && ns[i] == (uint32_t)sb.st_ino && inner == pids[i]) {
                out[i] = (int)p;
                left--;
            }
    }
    closedir(d);
    return 0;
}

/* The cgroup v2 directory of this process as the host names it: root (the
 * host's cgroup2 mount, from the config) joined with the "0::" line of
 * /proc/self/cgroup. In a cgroup namespace that line is relative to the
 * namespace's root, so the path is unknown; the inode of the cgroup2 mount
 * the runtime gives such containers at /sys/fs/cgroup names it instead (a
 * real driver knows every process's cgroup from the kernel). */
#define CGROUP2_MAGIC      0x63677270
#define CGROUP_NS_INIT_INO 0xEFFFFFFBU
void sim_self_cgroup(const char *root, char *out, size_t n, uint64_t *ino)
{
    char line[SIM_CGPATH + 8], rel[SIM_CGPATH] = "";
    out[0] = 0;
    *ino = 0;
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f) return;
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3)) continue;
        line[strcspn(line, "\n")] = 0;
        if (strlen(line + 3) >= sizeof rel) break;
        memcpy(rel, line + 3, strlen(line + 3) + 1);
        found = 1;
        break;
    }
    fclose(f);
    if (!found || rel[0] != '/') return;
    struct stat sb;
    int initial = stat("/proc/self/ns/cgroup", &sb) != 0 || sb.st_ino == CGROUP_NS_INIT_INO;
    if (initial) {
        int w = snprintf(out, n, "%s%s", root, strcmp(rel, "/") == 0 ? "" : rel);
        if (w < 0 || (size_t)w >= n) {
            out[0] = 0;
            return;
        }
        if (stat(out, &sb) == 0) *ino = sb.st_ino;
        return;
    }
    struct statfs sf;
    char p[SIM_CGPATH + 16];
    snprintf(p, sizeof p, "/sys/fs/cgroup%s", strcmp(rel, "/") == 0 ? "" : rel);
    if (statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_MAGIC && stat(p, &sb) == 0) *ino = sb.st_ino;
}

void sim_slot_set_cgroup(struct sim_state *st, const char *path, uint64_t ino)
{
    if (st->slot < 0) return;
    sim_lock(st->sh);
    snprintf(st->sh->proc[st->slot].cgroup, SIM_CGPATH, "%s", path);
    st->sh->proc[st->slot].cgino = ino;
    sim_unlock(st->sh);
}

void sim_slot_set_mps(struct sim_state *st)
{
    if (st->slot < 0) return;
    sim_lock(st->sh);
    st->sh->proc[st->slot].mps = 1;
    sim_unlock(st->sh);
}

/* p is in l's cgroup or one below it */
int sim_proc_in_limit(const struct sim_proc *p, const struct sim_limit *l)
{
    size_t n = strlen(l->path);
    if (p->cgroup[0] && strncmp(p->cgroup, l->path, n) == 0 && (p->cgroup[n] == 0 || p->cgroup[n] == '/')) return 1;
    return p->cgino && p->cgino == l->ino;
}

uint64_t sim_limit_used_locked(struct sim_shared *sh, const struct sim_limit *l, int cfgidx)
{
    uint64_t u = 0;
    for (int i = 0; i < SIM_MAX_PROC; i++)
        if (sh->proc[i].active && sim_proc_in_limit(&sh->proc[i], l)) u += sh->proc[i].mem[cfgidx];
    return u;
}
