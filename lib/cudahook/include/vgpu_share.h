/* The share file of one container: what it may use of each GPU this
 * period, written by the host only (the admission creates it, `vgpu node`
 * updates it in place), mapped read-only by the library (src/share.c). The
 * one statement of its layout: the host's reader and writer
 * (internal/contract/zshare.go, used by internal/arbiter) are generated from
 * this file by `go tool cgo -godefs` (make generate), as the region's are
 * from vgpu_region.h. lib/cudahook/README.md ("Shares") says how the library
 * picks a share from it.
 *
 * Where it lives (the path rule): VGPU_SHARE_DIR/VGPU_SHARE_FILE beside the
 * region's directory, i.e. <parent of shared-dir>/host/grant: for a container
 * <state_dir>/<id>/host/grant on the host and /run/vgpu/host/grant inside
 * (a directory the container sees read-only), for `vgpu exec` beside its
 * private shared directory. The on-disk names and the magic are those of the
 * grant file it was called before, so libraries of earlier releases find it.
 *
 * Little-endian, fixed width, no implicit padding, VGPU_SHARE_BYTES long.
 * Every word a reader acts on is one aligned 8-byte store of the host, so
 * that a reader never sees one half of one share with the other of another.
 *
 * Changing the layout (a new per-device field, say a priority):
 * - keep every offset below: libraries of earlier releases read version 2
 *   at these offsets, so a field only ever takes bytes that were reserved
 *   (take reserved1's or reserved2's bytes, zero until now); the asserts at the end check that nothing else moved;
 * - a field an older library may ignore (it keeps its rules without it)
 *   keeps VGPU_SHARE_VERSION: an older library refuses any other version and
 *   falls back to the quota file's requests. Bump it only when an older
 *   library would misread the file;
 * - add the offset's assert below, run `make generate` and commit this file
 *   with internal/contract/zshare.go; ShareGolden (internal/arbiter) pins the
 *   bytes of today's writer. */
#ifndef VGPU_SHARE_LAYOUT_H
#define VGPU_SHARE_LAYOUT_H
#include <stddef.h>
#include <stdint.h>

#define VGPU_SHARE_FILE  "grant"               /* on-disk name, kept from the grant file */
#define VGPU_SHARE_DIR   "host"                /* beside the region's directory (above) */
#define VGPU_SHARE_MAGIC 0x314e415247555047ull /* the bytes "GPUGRAN1" */
/* 1: 16 bytes per device, no memory ceilings (read by the host only);
 * 2: each device's memory ceiling and the header's memory deadline. */
#define VGPU_SHARE_VERSION    2u
#define VGPU_SHARE_VERSION_V1 1u
#define VGPU_SHARE_BYTES      4096u
#define VGPU_SHARE_DEVICES    16u /* by the quota file's device index */
/* Shares are in basis points: VGPU_SHARE_FULL is the whole GPU. A word is
 * share | phase << 32 (the slot's start, basis points of the period), phase
 * VGPU_SHARE_NO_PHASE for none; a word whose share is 0 holds nothing. */
#define VGPU_SHARE_FULL     10000
#define VGPU_SHARE_NO_PHASE 0xffffffffu
/* An arbitration stamp older than this is not believed: the admission's
 * share holds. */
#define VGPU_SHARE_STALE_MS 1000u
/* A memory deadline further ahead than this is not the host's: not
 * believed. */
#define VGPU_SHARE_MEM_MAX_MS 60000u
/* A device's priority (struct vgpu_share_order's priority): set by whoever
 * set the tenant's limits, never by the tenant. Zero, normal, is what every
 * file of an earlier release holds. */
#define VGPU_PRIORITY_NORMAL 0u
#define VGPU_PRIORITY_HIGH   1u
#define VGPU_PRIORITY_LOW    2u
/* A yield or bound deadline further ahead than this is not the host's:
 * not believed. */
#define VGPU_SHARE_ORDER_MAX_MS 1000u
/* The most estimated device time a launch that a free run starts (one its
 * slot or bucket would have held) may find queued with it: a neighbour
 * waking into its own slot then waits for at most this, or one launch
 * longer alone. Launches the slot and bucket let start are not bounded by
 * the free run: a tenant's own share is not cut into pieces because it
 * once ran free. */
#define VGPU_SHARE_FREE_BOUND_NS 500000u

/* One device's entry in version 2. */
struct vgpu_share_dev {
    uint64_t admission;   /*  0: the admission's word, held while no arbitration runs */
    uint64_t arbitration; /*  8: the arbitration's word for this period */
    uint64_t ceiling; /* 16: bytes the tenant may hold on the GPU (borrowing above its request) until mem_until_ns */
};

/* One device's entry in version 1 (the host still reads such files). */
struct vgpu_share_dev_v1 {
    uint64_t admission;   /* 0 */
    uint64_t arbitration; /* 8 */
};

/* The order inside the period, per device, written by the host: the
 * admission writes the priority, `vgpu node` the rest while tenants of
 * another priority, or a waking one, share the GPU. Zero in every file of
 * an earlier release (these were its spare words), so an older library
 * that never reads them keeps its rules: no yielding, no bound. Each word is
 * one aligned 8-byte store. */
struct vgpu_share_order {
    uint64_t priority;       /*  0: VGPU_PRIORITY_* */
    uint64_t yield_until_ns; /*  8: CLOCK_MONOTONIC ns until which the tenant starts no new work on the
                              *     device beyond what its request guarantees (another tenant goes
                              *     first); 0 = none */
    uint64_t bound_until_ns; /* 16: CLOCK_MONOTONIC ns until which bound_ns holds; 0 = none */
    uint64_t bound_ns;       /* 24: the most device time (the library's estimates) the tenant may have
                              *     queued or running on the device while the bound holds */
};

struct vgpu_share_file {
    uint64_t magic;         /*  0: VGPU_SHARE_MAGIC */
    uint32_t version;       /*  8 */
    uint32_t devices;       /* 12: entries in dev[] that the admission wrote */
    uint64_t stamp_ns;      /* 16: CLOCK_MONOTONIC ns of vgpu node's last round; 0 = none ever */
    uint32_t period_ms;     /* 24: vgpu node's round period */
    uint32_t reserved0;     /* 28 */
    uint64_t mem_until_ns;  /* 32: CLOCK_MONOTONIC ns until which the ceilings hold; 0 = none ever */
    uint64_t room_until_ns; /* 40: CLOCK_MONOTONIC ns until which an allocation may wait for room (a
                             *     suspension that frees it is running); 0 = the library's own wait */
    uint8_t reserved1[16];  /* 48 */
    struct vgpu_share_dev dev[VGPU_SHARE_DEVICES];     /* 64; version 1: struct vgpu_share_dev_v1 */
    struct vgpu_share_order order[VGPU_SHARE_DEVICES]; /* 448 */
    uint64_t free_until_ns[VGPU_SHARE_DEVICES];        /* 960: per device, CLOCK_MONOTONIC ns until which the
                                                        *      tenant's launches need not wait for its slot or
                                                        *      its bucket (no other tenant of the GPU is active:
                                                        *      the device time would go unused); written only for
                                                        *      a device of limit 100, which the library checks too;
                                                        *      its order words still hold, and what the run
                                                        *      starts is bounded (VGPU_SHARE_FREE_BOUND_NS);
                                                        *      0 = none */
    uint8_t reserved2[3008];                           /* 1088 */
};

/* The offsets that libraries of earlier releases rely on: a change that
 * moves one fails to compile (here, in the library and in make generate). */
#define VGPU_SHARE_AT(s, f, off) _Static_assert(offsetof(struct s, f) == (off), #s "." #f " must stay at " #off)
VGPU_SHARE_AT(vgpu_share_dev, admission, 0);
VGPU_SHARE_AT(vgpu_share_dev, arbitration, 8);
VGPU_SHARE_AT(vgpu_share_dev, ceiling, 16);
VGPU_SHARE_AT(vgpu_share_dev_v1, arbitration, 8);
VGPU_SHARE_AT(vgpu_share_file, version, 8);
VGPU_SHARE_AT(vgpu_share_file, devices, 12);
VGPU_SHARE_AT(vgpu_share_file, stamp_ns, 16);
VGPU_SHARE_AT(vgpu_share_file, period_ms, 24);
VGPU_SHARE_AT(vgpu_share_file, mem_until_ns, 32);
VGPU_SHARE_AT(vgpu_share_file, dev, 64);
VGPU_SHARE_AT(vgpu_share_file, room_until_ns, 40);
VGPU_SHARE_AT(vgpu_share_file, order, 448);
VGPU_SHARE_AT(vgpu_share_file, free_until_ns, 960);
VGPU_SHARE_AT(vgpu_share_order, yield_until_ns, 8);
VGPU_SHARE_AT(vgpu_share_order, bound_until_ns, 16);
VGPU_SHARE_AT(vgpu_share_order, bound_ns, 24);
#undef VGPU_SHARE_AT
_Static_assert(sizeof(struct vgpu_share_dev) == 24, "a device's entry (version 2)");
_Static_assert(sizeof(struct vgpu_share_dev_v1) == 16, "a device's entry (version 1)");
_Static_assert(sizeof(struct vgpu_share_order) == 32, "a device's order");
_Static_assert(sizeof(struct vgpu_share_file) == VGPU_SHARE_BYTES, "file size (shrink reserved2)");
#endif
