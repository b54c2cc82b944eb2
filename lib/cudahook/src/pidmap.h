/* The host's map of the container's processes: host PID -> container PID
 * (written by `vgpu node` into <state>/<id>/host/pids, seen read-only at
 * /run/vgpu/host/pids: the `host` directory next to the shared directory). */
#ifndef VGPU_PIDMAP_H
#define VGPU_PIDMAP_H
#include <stddef.h>
#include <stdint.h>

#define VGPU_PIDMAP_MAX 4096 /* entries; a longer file is refused whole */

struct vgpu_pidmap_entry {
    uint32_t host, ns;
};

/* Parses lines "HOSTPID NSPID" (decimal, > 0, one space, '\n' after each; no
 * other content). Returns the count, or -1 when anything is malformed. */
int vgpu_pidmap_parse(const char *buf, size_t len, struct vgpu_pidmap_entry *out, int max);
/* Reads path into out: the count, -1 malformed or unreadable, -2 no such file. */
int vgpu_pidmap_read(const char *path, struct vgpu_pidmap_entry *out, int max);
#endif
