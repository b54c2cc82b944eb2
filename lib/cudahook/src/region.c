/* The container's shared accounting: one mmap'ed file per container.
 *
 * Why this shape (see README.md for the byte layout):
 * - No process ever waits for another: a process stopped (SIGSTOP, a cgroup
 *   freezer) or killed at any instruction blocks nobody. Hence no shared mutex:
 *   - a slot is owned through an OFD lock on byte 1+slot of a separate lock
 *     file; only its owner writes it, and whoever clears a dead slot holds
 *     that byte while doing so. The kernel drops the lock at death (SIGKILL
 *     included, across PID namespaces). PIDs are never trusted for liveness;
 *   - a reservation is announced in the owner's slot (`pending`), then the
 *     container's usage plus every announced reservation is checked against
 *     the limit, then committed (usage first, then the announcement cleared).
 *     Of two concurrent reservations each sees at least the other's
 *     announcement, so together they never pass the limit;
 *   - the busy spans take a lock word that a waiter steals once it has been
 *     held for SPANS_STEAL_NS (its holder stopped): any content of the spans
 *     is acceptable to their reader, so a resumed holder mis-charges at worst
 *     the second they cover.
 *   Every store is one aligned 8-byte store: a process killed anywhere leaves
 *   a valid region.
 * - Threads of one process take a process-local mutex (one slot, one lock
 *   description per process), which the atfork prepare handler takes too. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "region.h"
#include "vgpu.h"

/* The structs are vgpu_region.h's, which asserts their layout. */

#define REGION_BYTES (VGPU_REGION_HEADER + (size_t)VGPU_REGION_SLOTS * VGPU_REGION_SLOT_SIZE)

static struct vgpu_region_header *hdr;
static struct vgpu_region_slot *slots;
static char lock_path[VGPU_PATH_MAX + 32];
static int lock_fd = -1; /* our own open file description: owns our slot's OFD lock */
static int my_slot = -1;
static pthread_mutex_t local = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

#define PENDING_DEV_SHIFT VGPU_REGION_PENDING_DEV_SHIFT
#define PENDING_SIZE_MAX  ((1ull << PENDING_DEV_SHIFT) - 1)
#define RESERVE_TRIES     64         /* retries while only others' reservations in flight stand in the way */
#define SPANS_STEAL_NS    50000000LL /* a holder needs microseconds: 50 ms held = stopped */

/* Test hook (VGPU_TEST_STOP=reserve|spans): the process stops itself once at
 * that point, as a SIGSTOP or a freezer could catch it there. */
static int stop_at_reserve, stop_at_spans;
static void test_stop(int *armed)
{
    if (__atomic_exchange_n(armed, 0, __ATOMIC_RELAXED))
        raise(SIGSTOP);
}

static int ofd_lock(int fd, int cmd, short type, off_t start)
{
    struct flock fl;

    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = start;
    fl.l_len = 1;
    return fcntl(fd, cmd, &fl);
}

static void atfork_prepare(void) { pthread_mutex_lock(&local); }
static void atfork_parent(void) { pthread_mutex_unlock(&local); }
static void atfork_child(void)
{
    /* The child shares our lock file description, so any OFD lock it took would
     * be the parent's. Drop the inherited fd (the parent keeps its lock: the
     * description stays open in the parent) and claim a slot on first use. */
    if (lock_fd >= 0)
        close(lock_fd);
    lock_fd = -1;
    my_slot = -1;
    pthread_mutex_init(&local, NULL);
}
static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static int open_lockfile(void)
{
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);

    if (fd >= 0)
        fchmod(fd, 0666); /* every user of the container shares it; umask must not split them */
    return fd;
}

/* Serialises this process's threads only (never waits for another process). */
static void shared_lock(void) { pthread_mutex_lock(&local); }
static void shared_unlock(void) { pthread_mutex_unlock(&local); }

static void slot_clear(struct vgpu_region_slot *s)
{
    unsigned d;
    /* state first: a half-cleared free slot is harmless, claims zero it again */
    __atomic_store_n(&s->state, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&s->pending, 0, __ATOMIC_SEQ_CST);
    for (d = 0; d < VGPU_REGION_DEVICES; d++)
        __atomic_store_n(&s->usage[d], 0, __ATOMIC_RELAXED);
}

/* under shared_lock */
static void reclaim_dead(void)
{
    unsigned i;

    if (lock_fd < 0 && (lock_fd = open_lockfile()) < 0)
        return;
    for (i = 0; i < VGPU_REGION_SLOTS; i++) {
        if ((int)i == my_slot || __atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) != 1)
            continue;
        /* holding its byte: nobody claims the slot while we clear it */
        if (ofd_lock(lock_fd, F_OFD_SETLK, F_WRLCK, 1 + (off_t)i) == 0) {
            VGPU_DEBUG("reclaiming slot %u of dead pid %u", i, slots[i].pid);
            slot_clear(&slots[i]);
            ofd_lock(lock_fd, F_OFD_SETLK, F_UNLCK, 1 + (off_t)i);
        }
    }
    __atomic_store_n(&hdr->last_reclaim_ns, vgpu_now_ns(), __ATOMIC_RELAXED);
}

/* under shared_lock */
static int ensure_slot(void)
{
    unsigned i;
    struct timespec ts;

    if (my_slot >= 0)
        return 0;
    if (lock_fd < 0 && (lock_fd = open_lockfile()) < 0) {
        vgpu_log(VGPU_LOG_ERROR, "cannot open %s: %s", lock_path, strerror(errno));
        return -1;
    }
    /* A byte we can lock is free or belongs to a dead process: either way ours. */
    for (i = 0; i < VGPU_REGION_SLOTS; i++) {
        if (ofd_lock(lock_fd, F_OFD_SETLK, F_WRLCK, 1 + (off_t)i) != 0)
            continue;
        slot_clear(&slots[i]);
        clock_gettime(CLOCK_REALTIME, &ts);
        slots[i].pid = (uint32_t)getpid();
        slots[i].claimed = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        __atomic_store_n(&slots[i].state, 1, __ATOMIC_RELEASE);
        my_slot = (int)i;
        return 0;
    }
    vgpu_log(VGPU_LOG_ERROR, "all %u process slots of the shared region are in use", VGPU_REGION_SLOTS);
    return -1;
}

static uint64_t usage_sum(int dev)
{
    uint64_t sum = 0;
    unsigned i;

    for (i = 0; i < VGPU_REGION_SLOTS; i++)
        if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == 1)
            sum = vgpu_add_sat(sum, __atomic_load_n(&slots[i].usage[dev], __ATOMIC_RELAXED));
    return sum;
}

/* Usage of dev plus every reservation in flight for it. Each slot's
 * announcement is read before its usage: a reservation committed in between
 * (usage stored, then announcement cleared) is seen in one or the other. */
static uint64_t claimed_sum(int dev)
{
    uint64_t sum = 0, p;
    unsigned i;

    for (i = 0; i < VGPU_REGION_SLOTS; i++) {
        if (__atomic_load_n(&slots[i].state, __ATOMIC_SEQ_CST) != 1)
            continue;
        p = __atomic_load_n(&slots[i].pending, __ATOMIC_SEQ_CST);
        if (p && (int)(p >> PENDING_DEV_SHIFT) == dev)
            sum = vgpu_add_sat(sum, p & PENDING_SIZE_MAX);
        sum = vgpu_add_sat(sum, __atomic_load_n(&slots[i].usage[dev], __ATOMIC_SEQ_CST));
    }
    return sum;
}

static int bad_dev(int dev) { return !hdr || dev < 0 || dev >= (int)VGPU_REGION_DEVICES; }

/* Announce, check, commit or withdraw (see the top of this file). Retries
 * while only reservations in flight, not usage, stand in the way. */
static int reserve_checked(int dev, uint64_t size, uint64_t limit, uint64_t *u)
{
    uint64_t *p = &slots[my_slot].pending;
    int tries;

    if (size > PENDING_SIZE_MAX)
        return -1; /* 2^60 bytes: beyond any limit */
    for (tries = 0; tries < RESERVE_TRIES; tries++) {
        __atomic_store_n(p, (uint64_t)dev << PENDING_DEV_SHIFT | size, __ATOMIC_SEQ_CST);
        test_stop(&stop_at_reserve);
        if (claimed_sum(dev) <= limit) {
            __atomic_store_n(u, vgpu_add_sat(*u, size), __ATOMIC_SEQ_CST);
            __atomic_store_n(p, 0, __ATOMIC_SEQ_CST);
            return 0;
        }
        __atomic_store_n(p, 0, __ATOMIC_SEQ_CST);
        if (vgpu_add_sat(usage_sum(dev), size) > limit)
            return -1;
        sched_yield();
    }
    return -1;
}

int vgpu_region_reserve(int dev, uint64_t size, uint64_t limit)
{
    uint64_t *u;
    int rc = 0;

    if (bad_dev(dev))
        return -2;
    shared_lock();
    if (ensure_slot() != 0) {
        shared_unlock();
        return -2;
    }
    if (vgpu_now_ns() - __atomic_load_n(&hdr->last_reclaim_ns, __ATOMIC_RELAXED) > VGPU_RECLAIM_NS)
        reclaim_dead();
    u = &slots[my_slot].usage[dev];
    if (limit == UINT64_MAX) { /* no limit: nothing to check against */
        __atomic_store_n(u, vgpu_add_sat(*u, size), __ATOMIC_SEQ_CST);
        shared_unlock();
        return 0;
    }
    rc = reserve_checked(dev, size, limit, u);
    if (rc != 0 && vgpu_add_sat(usage_sum(dev), size) > limit) {
        reclaim_dead(); /* a dead process may still be counted */
        rc = reserve_checked(dev, size, limit, u);
    }
    shared_unlock();
    return rc;
}

void vgpu_region_add(int dev, uint64_t size)
{
    uint64_t *u;

    if (bad_dev(dev) || size == 0)
        return;
    shared_lock();
    if (ensure_slot() == 0) {
        u = &slots[my_slot].usage[dev];
        __atomic_store_n(u, vgpu_add_sat(*u, size), __ATOMIC_RELAXED);
    }
    shared_unlock();
}

void vgpu_region_release(int dev, uint64_t size)
{
    uint64_t *u;

    if (bad_dev(dev) || size == 0)
        return;
    shared_lock();
    if (my_slot >= 0) { /* no slot (e.g. freed in a fork child): nothing of ours counted */
        u = &slots[my_slot].usage[dev];
        __atomic_store_n(u, vgpu_sub_clamp(*u, size), __ATOMIC_RELAXED);
    }
    shared_unlock();
}

uint64_t vgpu_region_usage(int dev)
{
    uint64_t sum;

    if (bad_dev(dev))
        return 0;
    shared_lock();
    /* a query is rare next to allocations: always exact, never a dead process's bytes */
    reclaim_dead();
    sum = usage_sum(dev);
    shared_unlock();
    return sum;
}

struct vgpu_compute_shared *vgpu_region_compute(int dev) { return bad_dev(dev) ? NULL : &hdr->compute[dev]; }
uint32_t *vgpu_region_gate(int dev) { return bad_dev(dev) ? NULL : &hdr->compute_gate[dev]; }
int64_t *vgpu_region_queue_end(int dev) { return bad_dev(dev) ? NULL : &hdr->queue_end[dev]; }
/* Adds ns to the whole-ms counter *ms: this process keeps what falls short
 * of a whole ms in *rest, so that many short waits add up. */
static void add_waited(uint64_t *rest, uint32_t *ms, uint64_t ns)
{
    uint64_t o, n, whole;

    o = __atomic_load_n(rest, __ATOMIC_RELAXED);
    do {
        n = o + (ns < 1000000000000ull ? ns : 1000000000000ull);
        whole = n / 1000000u;
        n -= whole * 1000000u;
    } while (!__atomic_compare_exchange_n(rest, &o, n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    if (whole)
        __atomic_add_fetch(ms, (uint32_t)whole, __ATOMIC_RELAXED); /* wraps */
}

void vgpu_region_order_waited(int dev, uint64_t ns)
{
    static uint64_t rest[VGPU_REGION_DEVICES]; /* per device */

    if (bad_dev(dev) || !ns)
        return;
    add_waited(&rest[dev], &hdr->order_wait_ms[dev], ns);
}

void vgpu_region_pace_waited(uint64_t from, uint64_t to)
{
    static uint64_t rest;
    uint64_t o;

    if (!hdr)
        return;
    /* the union of the waits: of two launches waiting at once (threads or
     * processes of the container), the time counts once */
    o = __atomic_load_n(&hdr->pace_counted_ns, __ATOMIC_RELAXED);
    do {
        if (o > from)
            from = o;
        if (to <= from)
            return;
    } while (!__atomic_compare_exchange_n(&hdr->pace_counted_ns, &o, to, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    add_waited(&rest, &hdr->pace_wait_ms, to - from);
}

void vgpu_region_want(int dev, uint64_t now)
{
    if (!bad_dev(dev) && __atomic_load_n(&hdr->want_ns[dev], __ATOMIC_RELAXED) != now)
        __atomic_store_n(&hdr->want_ns[dev], now, __ATOMIC_RELAXED);
}

void vgpu_region_need(int dev, uint32_t mib, uint32_t was)
{
    if (bad_dev(dev))
        return;
    if (mib)
        __atomic_store_n(&hdr->need_mib[dev], mib, __ATOMIC_RELEASE);
    else
        __atomic_compare_exchange_n(&hdr->need_mib[dev], &was, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

#define SPAN_KEEP_NS 1000000000LL

/* Sorts f/t[0..n) by start and merges overlaps in place; returns the count. */
static int spans_merge(int64_t *f, int64_t *t, int n)
{
    int i, j, m;

    for (i = 1; i < n; i++) { /* insertion sort: n <= VGPU_REGION_SPANS + 1 */
        int64_t a = f[i], b = t[i];
        for (j = i; j > 0 && f[j - 1] > a; j--) {
            f[j] = f[j - 1];
            t[j] = t[j - 1];
        }
        f[j] = a;
        t[j] = b;
    }
    for (i = 1, m = n ? 1 : 0; i < n; i++) {
        if (f[i] <= t[m - 1]) {
            if (t[i] > t[m - 1])
                t[m - 1] = t[i];
        } else {
            f[m] = f[i];
            t[m++] = t[i];
        }
    }
    return m;
}

/* Takes the spans' lock word; steals it from a holder that has had it for
 * SPANS_STEAL_NS (stopped, frozen or dead). Returns our token. */
static uint64_t spans_lock(void)
{
    uint64_t cur, me;
    unsigned spins = 0;

    for (;;) {
        me = vgpu_now_ns() | 1; /* never 0 (free) */
        cur = __atomic_load_n(&hdr->spans_lock, __ATOMIC_ACQUIRE);
        if ((cur == 0 || (cur < me && me - cur > (uint64_t)SPANS_STEAL_NS) || cur > me + (uint64_t)SPANS_STEAL_NS) &&
            __atomic_compare_exchange_n(&hdr->spans_lock, &cur, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return me;
        if (++spins % 64 == 0)
            sched_yield();
    }
}

int64_t vgpu_region_cover(int dev, int64_t from, int64_t to, int64_t now)
{
    int64_t f[VGPU_REGION_SPANS + 1], t[VGPU_REGION_SPANS + 1], un = to - from, a, b;
    uint64_t tok;
    struct vgpu_busy_spans *sp;
    int n = 0, i, k;

    if (to <= from)
        return 0;
    if (bad_dev(dev))
        return to - from;
    sp = &hdr->spans[dev];
    tok = spans_lock();
    /* the spans that end within a second of now; the region is the container's
     * to scribble on, so whatever it holds is only read into our arrays */
    for (i = 0; i < (int)VGPU_REGION_SPANS; i++) {
        a = sp->from[i];
        b = sp->to[i];
        if (b > a && b >= now - SPAN_KEEP_NS && b <= now + SPAN_KEEP_NS) {
            f[n] = a;
            t[n++] = b;
        }
    }
    n = spans_merge(f, t, n);
    for (i = 0; i < n; i++) { /* disjoint: what they cover of [from, to) is not new */
        a = from > f[i] ? from : f[i];
        b = to < t[i] ? to : t[i];
        if (b > a)
            un -= b - a;
    }
    f[n] = from; /* however old, [from, to) is charged, then joins the spans */
    t[n] = to;
    n = spans_merge(f, t, n + 1);
    k = n > (int)VGPU_REGION_SPANS ? n - (int)VGPU_REGION_SPANS : 0; /* keep the newest */
    for (i = 0; i < (int)VGPU_REGION_SPANS; i++) {
        __atomic_store_n(&sp->from[i], i + k < n ? f[i + k] : 0, __ATOMIC_RELAXED);
        __atomic_store_n(&sp->to[i], i + k < n ? t[i + k] : 0, __ATOMIC_RELAXED);
    }
    test_stop(&stop_at_spans);
    /* fails when stolen: then it is the thief's to release */
    __atomic_compare_exchange_n(&hdr->spans_lock, &tok, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    return un < 0 ? 0 : un;
}

int vgpu_region_pids(pid_t *out, int max)
{
    unsigned i;
    int n = 0;

    if (!hdr)
        return 0;
    shared_lock();
    reclaim_dead();
    for (i = 0; i < VGPU_REGION_SLOTS && n < max; i++)
        if (__atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) == 1)
            out[n++] = (pid_t)slots[i].pid;
    shared_unlock();
    return n;
}

int vgpu_region_open(const char *dir, char *err, size_t errlen)
{
    char path[VGPU_PATH_MAX + 32];
    struct stat st, st2;
    void *map;
    int fd, init_fd, e, rc = -1;

    pthread_once(&atfork_once, register_atfork);
    {
        const char *t = getenv("VGPU_TEST_STOP");
        stop_at_reserve = t && strcmp(t, "reserve") == 0;
        stop_at_spans = t && strcmp(t, "spans") == 0;
    }
    snprintf(path, sizeof path, "%s/%s", dir, VGPU_REGION_FILE);
    snprintf(lock_path, sizeof lock_path, "%s/%s", dir, VGPU_REGION_LOCK_FILE);
    /* byte 0 of the lock file serialises creation; its own description, closed at the end */
    init_fd = open_lockfile();
    if (init_fd < 0) {
        snprintf(err, errlen, "%s: %s", lock_path, strerror(errno));
        return -1;
    }
    while (ofd_lock(init_fd, F_OFD_SETLKW, F_WRLCK, 0) != 0) {
        if (errno != EINTR) {
            snprintf(err, errlen, "lock %s: %s", lock_path, strerror(errno));
            close(init_fd);
            return -1;
        }
    }
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    /* fstat through the syscall: glibc >= 2.33 exports only new fstat versions */
    if (fd < 0 || syscall(SYS_fstat, fd, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    fchmod(fd, 0666);
    if (st.st_size == (off_t)REGION_BYTES) {
        /* magic still 0: a creator was killed before its last store. We hold the
         * creation lock and nobody can have used it: create it again */
        uint64_t magic = 1;
        if (pread(fd, &magic, sizeof magic, 0) == (ssize_t)sizeof magic && magic == 0)
            st.st_size = 0;
    }
    if (st.st_size != 0 && st.st_size < (off_t)REGION_BYTES) {
        snprintf(err, errlen, "%s: truncated region (%lld bytes, want %zu)", path, (long long)st.st_size,
                 (size_t)REGION_BYTES);
        goto out;
    }
    /* Every page backed now, at creation and on every open (a no-op once
     * allocated; it also backs a region someone extended sparsely): a full
     * filesystem fails here, closed and said, not as a SIGBUS at a later
     * first touch. posix_fallocate returns the error, it does not set errno. */
    if ((e = posix_fallocate(fd, 0, (off_t)REGION_BYTES)) != 0) {
        snprintf(err, errlen, "cannot back %s with %zu bytes: %s (free space in the shared directory's filesystem)",
                 path, (size_t)REGION_BYTES, strerror(e));
        goto out;
    }
    if (syscall(SYS_fstat, fd, &st2) != 0 || st2.st_size < (off_t)REGION_BYTES) {
        snprintf(err, errlen, "%s: region shorter than %zu bytes after allocation", path, (size_t)REGION_BYTES);
        goto out;
    }
    map = mmap(NULL, st.st_size ? VGPU_REGION_HEADER : REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "mmap %s: %s", path, strerror(errno));
        goto out;
    }
    if (st.st_size == 0) {
        struct vgpu_region_header *h = map;
        h->version = VGPU_REGION_VERSION;
        h->header_size = VGPU_REGION_HEADER;
        h->slot_count = VGPU_REGION_SLOTS;
        h->slot_size = VGPU_REGION_SLOT_SIZE;
        h->max_devices = VGPU_REGION_DEVICES;
        __atomic_store_n(&h->magic, VGPU_REGION_MAGIC, __ATOMIC_RELEASE); /* last: marks it complete */
    } else {
        struct vgpu_region_header *h = map;
        if (h->magic != VGPU_REGION_MAGIC) {
            snprintf(err, errlen, "%s is not a vgpu region (bad magic)", path);
            munmap(map, VGPU_REGION_HEADER);
            goto out;
        }
        if (h->version != VGPU_REGION_VERSION || h->header_size != VGPU_REGION_HEADER ||
            h->slot_count != VGPU_REGION_SLOTS || h->slot_size != VGPU_REGION_SLOT_SIZE ||
            h->max_devices != VGPU_REGION_DEVICES || st.st_size < (off_t)REGION_BYTES) {
            snprintf(err, errlen, "%s has layout version %u, this library knows %u", path, h->version,
                     VGPU_REGION_VERSION);
            munmap(map, VGPU_REGION_HEADER);
            goto out;
        }
        munmap(map, VGPU_REGION_HEADER);
        map = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            snprintf(err, errlen, "mmap %s: %s", path, strerror(errno));
            goto out;
        }
    }
    hdr = map;
    slots = (struct vgpu_region_slot *)((char *)map + VGPU_REGION_HEADER);
    rc = 0;
out:
    if (fd >= 0)
        close(fd);  /* the mapping stays */
    close(init_fd); /* drops the byte-0 lock */
    return rc;
}
