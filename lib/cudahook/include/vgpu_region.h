/* The shared accounting region of one container: the one statement of its
 * layout. The library (src/region.c) maps these structs; the host's reader
 * (internal/contract/zregion.go, for vgpu status and vgpu node) is generated
 * from this file by `go tool cgo -godefs` (make generate), and
 * TestRegionGenerated fails when the committed Go file is not what this
 * header generates. lib/cudahook/README.md ("Shared region") says what the
 * fields mean and the rules for writing them.
 *
 * Two files in the quota file's shared-dir: VGPU_REGION_FILE, a header then
 * VGPU_REGION_SLOTS slots, and VGPU_REGION_LOCK_FILE, whose byte 0
 * serialises creation and byte 1+i is held (OFD lock) by slot i's owner.
 * All fields little-endian and fixed width, with no implicit padding.
 *
 * Changing the layout (a new field):
 * - keep every offset below: the host reads every version 1..VGPU_REGION_VERSION
 *   with these structs, so a field only ever takes bytes that were reserved
 *   (shrink the reserved array it comes from; the asserts at the end check
 *   that nothing else moved). Room left: header 56 (8 bytes);
 *   slot 24 (40 bytes), 192 (64 bytes: a
 *   u32 per device). The header is full at 4096: a u64 per device (128 bytes) needs a
 *   larger VGPU_REGION_HEADER, which moves the slots (the host reader then
 *   takes the header size by version, and the fixtures of older versions
 *   must still read);
 * - bump VGPU_REGION_VERSION: a library refuses a region of any other
 *   version, so processes of one container never mix rules; the host reads
 *   the new field only when Version says it is there (bytes of an older
 *   version's reserved range are zero);
 * - add the offset's assert below, run `make generate` and commit this file
 *   with internal/contract/zregion.go, and describe the field in README.md. */
#ifndef VGPU_REGION_LAYOUT_H
#define VGPU_REGION_LAYOUT_H
#include <stddef.h>
#include <stdint.h>

#define VGPU_REGION_FILE      "vgpu.region"
#define VGPU_REGION_LOCK_FILE "vgpu.lock"
#define VGPU_REGION_MAGIC     0x3147455255504756ull /* the bytes "VGPUREG1", stored last at creation */
/* 2: compute fields; 3: no shared mutex, the queue end; 4: what the tenant
 * wants; 5: the memory an owner waits for; 6: the time waited for the order
 * (in the bytes of the mutex, which versions 1 and 2 took and later ones
 * only initialised); 7: the time waited for the pacer. A library refuses
 * any other version. */
#define VGPU_REGION_VERSION   7u
#define VGPU_REGION_HEADER    4096u /* bytes before slot 0 */
#define VGPU_REGION_SLOTS     1024u
#define VGPU_REGION_SLOT_SIZE 256u
#define VGPU_REGION_DEVICES   16u /* per container, by the quota file's device index */
#define VGPU_REGION_SPANS     12u /* busy spans kept per device */
/* A slot's pending is dev << VGPU_REGION_PENDING_DEV_SHIFT | bytes. */
#define VGPU_REGION_PENDING_DEV_SHIFT 60u

/* Compute accounting of one device, pooled by every process of the container.
 * Atomics only. */
struct vgpu_compute_shared {
    int64_t tokens;     /*  0: ns of device time the container may still start (token bucket) */
    uint64_t refill_ns; /*  8: CLOCK_MONOTONIC of the last refill */
    uint64_t busy_ns;   /* 16: measured device time of the container's launches, cumulative */
    uint64_t launches;  /* 24: launches measured, cumulative */
};

/* The container's busy time lately on one device: CLOCK_MONOTONIC ns;
 * from >= to is empty. Under the header's spans_lock. */
struct vgpu_busy_spans {
    int64_t from[VGPU_REGION_SPANS];
    int64_t to[VGPU_REGION_SPANS];
};

struct vgpu_region_header {
    uint64_t magic;       /*  0 */
    uint32_t version;     /*  8 */
    uint32_t header_size; /* 12 */
    uint32_t slot_count;  /* 16 */
    uint32_t slot_size;   /* 20 */
    uint32_t max_devices; /* 24 */
    /* 28: ms in which the container's launches waited for its pacer (its
     * bucket, its slot, a free run's bound: held to its own share) with none
     * of its work queued before them, all devices and launches together
     * (the union of their waits, up to pace_counted_ns), cumulative,
     * wrapping; atomics only. Versions 1..6: zero. */
    uint32_t pace_wait_ms;
    uint64_t last_reclaim_ns; /* 32: CLOCK_MONOTONIC of the last dead-slot scan */
    uint64_t spans_lock;      /* 40: 0 free, else the holder's CLOCK_MONOTONIC ns at taking it */
    uint64_t pace_counted_ns; /* 48: CLOCK_MONOTONIC ns up to which pace_wait_ms counts (CAS) */
    uint8_t reserved1[8];     /* 56 */
    /* 64: ms the container's launches on each device waited for the order
     * (another tenant went first: a higher priority, or one waking below its
     * due), cumulative, wrapping; atomics only. Versions 1..5: a
     * pthread_mutex_t here (not a count). */
    uint32_t order_wait_ms[VGPU_REGION_DEVICES];
    struct vgpu_compute_shared compute[VGPU_REGION_DEVICES]; /* 128 */
    uint32_t compute_gate[VGPU_REGION_DEVICES];              /* 640: 1 = paused until the bucket is full */
    /* 704: MiB (rounded up) that an allocation of the container, under its
     * memory request, waits for on this device because the GPU has no room
     * (memory_borrow = "free": vgpu node takes it back from a borrower);
     * 0 none. Set and cleared by the waiting process, atomics only. */
    uint32_t need_mib[VGPU_REGION_DEVICES];
    struct vgpu_busy_spans spans[VGPU_REGION_DEVICES]; /* 768 */
    int64_t queue_end[VGPU_REGION_DEVICES];            /* 3840: CLOCK_MONOTONIC ns when the queued launches end */
    uint64_t want_ns[VGPU_REGION_DEVICES]; /* 3968: CLOCK_MONOTONIC ns when a launch last waited for the pacer */
};

/* One process's record, at VGPU_REGION_HEADER + VGPU_REGION_SLOT_SIZE * i. */
struct vgpu_region_slot {
    uint32_t state;                      /*  0: 0 free, 1 in use */
    uint32_t pid;                        /*  4: getpid() of the owner, in its namespace */
    uint64_t claimed;                    /*  8: CLOCK_REALTIME ns when claimed */
    uint64_t pending;                    /* 16: reservation in flight (not usage); 0 none */
    uint8_t reserved0[40];               /* 24 */
    uint64_t usage[VGPU_REGION_DEVICES]; /* 64: bytes per device */
    uint8_t reserved1[64];               /* 192 */
};

/* The offsets that readers of earlier versions rely on: a change that moves
 * one fails to compile (here, in the library and in make generate). */
#define VGPU_REGION_AT(s, f, off) _Static_assert(offsetof(struct s, f) == (off), #s "." #f " must stay at " #off)
VGPU_REGION_AT(vgpu_compute_shared, busy_ns, 16);
VGPU_REGION_AT(vgpu_compute_shared, launches, 24);
VGPU_REGION_AT(vgpu_region_header, version, 8);
VGPU_REGION_AT(vgpu_region_header, header_size, 12);
VGPU_REGION_AT(vgpu_region_header, slot_count, 16);
VGPU_REGION_AT(vgpu_region_header, slot_size, 20);
VGPU_REGION_AT(vgpu_region_header, max_devices, 24);
VGPU_REGION_AT(vgpu_region_header, pace_wait_ms, 28);
VGPU_REGION_AT(vgpu_region_header, spans_lock, 40);
VGPU_REGION_AT(vgpu_region_header, pace_counted_ns, 48);
VGPU_REGION_AT(vgpu_region_header, order_wait_ms, 64);
VGPU_REGION_AT(vgpu_region_header, compute, 128);
VGPU_REGION_AT(vgpu_region_header, compute_gate, 640);
VGPU_REGION_AT(vgpu_region_header, need_mib, 704);
VGPU_REGION_AT(vgpu_region_header, spans, 768);
VGPU_REGION_AT(vgpu_region_header, queue_end, 3840);
VGPU_REGION_AT(vgpu_region_header, want_ns, 3968);
VGPU_REGION_AT(vgpu_region_slot, pid, 4);
VGPU_REGION_AT(vgpu_region_slot, claimed, 8);
VGPU_REGION_AT(vgpu_region_slot, pending, 16);
VGPU_REGION_AT(vgpu_region_slot, usage, 64);
#undef VGPU_REGION_AT
_Static_assert(sizeof(struct vgpu_compute_shared) == 32, "compute entry size");
_Static_assert(sizeof(struct vgpu_region_header) == VGPU_REGION_HEADER, "header size (shrink a reserved range)");
_Static_assert(sizeof(struct vgpu_region_slot) == VGPU_REGION_SLOT_SIZE, "slot size (shrink a reserved range)");
_Static_assert(VGPU_REGION_DEVICES <= 1u << (64 - VGPU_REGION_PENDING_DEV_SHIFT),
               "pending holds every device index above VGPU_REGION_PENDING_DEV_SHIFT");
#endif
