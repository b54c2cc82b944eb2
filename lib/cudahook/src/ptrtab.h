/* What this process counted, keyed by what the driver handed out. */
#ifndef VGPU_PTRTAB_H
#define VGPU_PTRTAB_H
#include <stdint.h>

enum vgpu_kind {
    VGPU_K_DPTR = 1, /* cuMemAlloc*, cuMemAllocManaged, cuMemAllocPitch */
    VGPU_K_ASYNC,    /* a stream-ordered allocation (aux = its pool) */
    VGPU_K_POOL,     /* a memory pool: size = what we count for its reserved memory */
    VGPU_K_VMM,      /* cuMemCreate handle: aux = references << 32 | mappings (vmm.c) */
    VGPU_K_ARRAY,
    VGPU_K_MIPMAP,
    VGPU_K_CTX,       /* cuCtxCreate context */
    VGPU_K_PRIMARY,   /* primary context, key = CUdevice */
    VGPU_K_GEXEC,     /* a graph exec's allocation nodes on one device, key = exec << 4 | dev:
                         * size = their bytes, aux = trim generation + 1 at which it was bound (0 never) */
    VGPU_K_GEXEC_FB,  /* same key: bytes counted for it while the driver cannot report its graph pool */
    VGPU_K_GRAPHPOOL, /* the graph memory pool of container device key: size = what we count for it */
    VGPU_K_LIMIT,     /* a context limit above its value at our first sight (limits.c): key = ctx << 4 | CUlimit,
                         * aux = that first value */
    VGPU_K_MODULE,    /* a module's data (modules.c): key = CUmodule, aux = its context */
    VGPU_K_KERNEL,    /* a library's kernel (modules.c): key = CUkernel, size 0, aux = its CUlibrary */
    VGPU_K_VMAP,      /* a cuMemMap mapping: key = its address, size = its length, aux = the handle,
                         * dev = the handle's device, -1 when the handle is not ours */
};

struct vgpu_rec {
    int dev;       /* container device index (quota order) */
    uint64_t size; /* bytes counted */
    uint64_t aux;  /* kind-specific */
};

/* Inserts; 0, or -1 if the key is present (nothing changed). */
int vgpu_ptr_insert(int kind, uint64_t key, const struct vgpu_rec *r);
/* Removes and returns the record; 0, or -1 if absent. */
int vgpu_ptr_take(int kind, uint64_t key, struct vgpu_rec *out);
/* Looks up without removing. */
int vgpu_ptr_get(int kind, uint64_t key, struct vgpu_rec *out);
/* Replaces size of a present record, returning the old one. 0 or -1. */
int vgpu_ptr_set_size(int kind, uint64_t key, uint64_t size, uint64_t *old);
/* Replaces aux of a present record. 0 or -1. */
int vgpu_ptr_set_aux(int kind, uint64_t key, uint64_t aux);
/* Calls fn for the keys of one kind (copied out first: fn may call the driver). */
void vgpu_ptr_each(int kind, void (*fn)(uint64_t key, const struct vgpu_rec *r));
#endif
