/* The host's share file (share.c; its layout: include/vgpu_share.h): what
 * the container may use of each GPU this period, read-only. Every reader
 * gets 0 while no file is mapped (missing, malformed, or not opened yet):
 * the library then holds each tenant to its quota file's requests. */
#ifndef VGPU_SHARE_H
#define VGPU_SHARE_H
#include <stddef.h>
#include <stdint.h>
#include "vgpu_share.h"

/* The path rule: VGPU_SHARE_DIR/VGPU_SHARE_FILE beside shared_dir, the
 * region's directory, into buf. -1 when shared_dir has no '/' or the path
 * does not fit. */
int vgpu_share_path(char *buf, size_t n, const char *shared_dir);
/* Maps the file beside the quota file's shared-dir, once; a file of another
 * magic or version is left alone with one warning. */
void vgpu_share_open(void);
/* 1 once a share file is mapped. */
int vgpu_share_mapped(void);
/* The header's words: vgpu node's last round (stamp_ns), the memory
 * deadline (mem_until_ns), the end of a wait for a suspension
 * (room_until_ns). */
uint64_t vgpu_share_stamp(void);
uint64_t vgpu_share_mem_until(void);
uint64_t vgpu_share_room_until(void);
/* Device qi's words (0 for a device out of range). */
uint64_t vgpu_share_admission(int qi);
uint64_t vgpu_share_arbitration(int qi);
uint64_t vgpu_share_ceiling(int qi);
/* Device qi's order words (all 0 for a device out of range or no file). */
void vgpu_share_order(int qi, struct vgpu_share_order *o);
/* Device qi's free-run deadline (free_until_ns; 0 for a device out of range
 * or no file). */
uint64_t vgpu_share_free_until(int qi);
#endif
