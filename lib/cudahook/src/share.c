/* The host's share file (share.h), mapped read-only: the container cannot
 * write it (a read-only mount of a directory only the host writes). Each
 * word is read with one 8-byte atomic load: the host stores each with one. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "share.h"
#include "vgpu.h"

_Static_assert(VGPU_SHARE_DEVICES == VGPU_MAX_DEVICES, "a share per device of the quota file");

static const struct vgpu_share_file *mapped; /* NULL: none */
static int tried;                            /* after-resolve functions run one after the other: no race */

int vgpu_share_path(char *buf, size_t n, const char *shared_dir)
{
    const char *slash = strrchr(shared_dir, '/');
    int len;

    if (!slash)
        return -1;
    len = snprintf(buf, n, "%.*s/%s/%s", (int)(slash - shared_dir), shared_dir, VGPU_SHARE_DIR, VGPU_SHARE_FILE);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

void vgpu_share_open(void)
{
    char path[VGPU_PATH_MAX + 32];
    const struct vgpu_share_file *m;
    struct stat st;
    int fd;

    if (tried)
        return;
    tried = 1;
    if (vgpu_share_path(path, sizeof path, vgpu_q.shared_dir) != 0)
        return;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (syscall(SYS_fstat, fd, &st) != 0 || st.st_size < (off_t)VGPU_SHARE_BYTES ||
        (m = mmap(NULL, VGPU_SHARE_BYTES, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        close(fd);
        return;
    }
    close(fd);
    if (m->magic != VGPU_SHARE_MAGIC || m->version != VGPU_SHARE_VERSION) {
        vgpu_log(VGPU_LOG_WARN, "%s is not a share file this library knows: the requests of the quota file hold", path);
        munmap((void *)m, VGPU_SHARE_BYTES);
        return;
    }
    __atomic_store_n(&mapped, m, __ATOMIC_RELEASE);
}

int vgpu_share_mapped(void) { return __atomic_load_n(&mapped, __ATOMIC_ACQUIRE) != NULL; }

#define SHARE_LOAD(field)                                                                                              \
    do {                                                                                                               \
        const struct vgpu_share_file *m = __atomic_load_n(&mapped, __ATOMIC_ACQUIRE);                                  \
        return m ? __atomic_load_n(&m->field, __ATOMIC_ACQUIRE) : 0;                                                   \
    } while (0)
#define SHARE_DEV_LOAD(qi, field)                                                                                      \
    do {                                                                                                               \
        const struct vgpu_share_file *m = __atomic_load_n(&mapped, __ATOMIC_ACQUIRE);                                  \
        return m && qi >= 0 && qi < (int)VGPU_SHARE_DEVICES ? __atomic_load_n(&m->dev[qi].field, __ATOMIC_ACQUIRE)     \
                                                            : 0;                                                       \
    } while (0)

uint64_t vgpu_share_stamp(void) { SHARE_LOAD(stamp_ns); }
uint64_t vgpu_share_mem_until(void) { SHARE_LOAD(mem_until_ns); }
uint64_t vgpu_share_room_until(void) { SHARE_LOAD(room_until_ns); }
uint64_t vgpu_share_admission(int qi) { SHARE_DEV_LOAD(qi, admission); }
uint64_t vgpu_share_arbitration(int qi) { SHARE_DEV_LOAD(qi, arbitration); }
uint64_t vgpu_share_ceiling(int qi) { SHARE_DEV_LOAD(qi, ceiling); }

uint64_t vgpu_share_free_until(int qi)
{
    const struct vgpu_share_file *m = __atomic_load_n(&mapped, __ATOMIC_ACQUIRE);

    return m && qi >= 0 && qi < (int)VGPU_SHARE_DEVICES ? __atomic_load_n(&m->free_until_ns[qi], __ATOMIC_ACQUIRE) : 0;
}

void vgpu_share_order(int qi, struct vgpu_share_order *o)
{
    const struct vgpu_share_file *m = __atomic_load_n(&mapped, __ATOMIC_ACQUIRE);

    if (!m || qi < 0 || qi >= (int)VGPU_SHARE_DEVICES) {
        *o = (struct vgpu_share_order){0};
        return;
    }
    /* word by word: each is one store of the host's, and the rules read
     * each deadline with its own value only */
    o->priority = __atomic_load_n(&m->order[qi].priority, __ATOMIC_ACQUIRE);
    o->yield_until_ns = __atomic_load_n(&m->order[qi].yield_until_ns, __ATOMIC_ACQUIRE);
    o->bound_until_ns = __atomic_load_n(&m->order[qi].bound_until_ns, __ATOMIC_ACQUIRE);
    o->bound_ns = __atomic_load_n(&m->order[qi].bound_ns, __ATOMIC_ACQUIRE);
}
