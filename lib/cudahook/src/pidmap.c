/* The host's PID map (pidmap.h). The file is the host's, but where the host
 * did not mount it a tenant may have written it: parse strictly, and a file
 * that is not exactly well formed is refused whole (the caller shows nothing). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include "pidmap.h"

#define PIDMAP_BYTES (VGPU_PIDMAP_MAX * 24)

static int number(const char **p, const char *end, char stop, uint32_t *v)
{
    uint64_t n = 0;
    const char *s = *p;

    while (s < end && *s >= '0' && *s <= '9') {
        n = n * 10 + (uint64_t)(*s - '0');
        if (n > 0x7fffffff) /* beyond any pid_t */
            return -1;
        s++;
    }
    if (s == *p || s == end || *s != stop || n == 0)
        return -1;
    *v = (uint32_t)n;
    *p = s + 1;
    return 0;
}

int vgpu_pidmap_parse(const char *buf, size_t len, struct vgpu_pidmap_entry *out, int max)
{
    const char *p = buf, *end = buf + len;
    int n = 0;

    while (p < end) {
        struct vgpu_pidmap_entry e;
        if (n >= max || number(&p, end, ' ', &e.host) != 0 || number(&p, end, '\n', &e.ns) != 0)
            return -1;
        out[n++] = e;
    }
    return n;
}

int vgpu_pidmap_read(const char *path, struct vgpu_pidmap_entry *out, int max)
{
    size_t len = 0, cap = PIDMAP_BYTES + 1;
    ssize_t r;
    char *buf;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK), n = -1;

    if (fd < 0)
        return errno == ENOENT ? -2 : -1;
    if (!(buf = malloc(cap))) {
        close(fd);
        return -1;
    }
    while (len < cap && (r = read(fd, buf + len, cap - len)) != 0) {
        if (r < 0) {
            if (errno == EINTR)
                continue;
            len = cap; /* unreadable: refused */
            break;
        }
        len += (size_t)r;
    }
    close(fd);
    if (len <= PIDMAP_BYTES)
        n = vgpu_pidmap_parse(buf, len, out, max);
    free(buf);
    return n;
}
