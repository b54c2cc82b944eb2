// Package spatialparse runs the library's spatial-mode decisions
// (lib/cudahook/src/spatial.c) from Go, so that fuzzing exercises exactly the
// code that reads a tenant's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
// CUDA_MPS_PIPE_DIRECTORY.
package spatialparse

/*
#cgo CFLAGS: -std=gnu11 -D_GNU_SOURCE -I${SRCDIR}/../src -I${SRCDIR}/../include
#include <stdlib.h>
#include "../src/spatial.c"

static int pct(int share, const char *pipe, const char *cur) {
    struct vgpu_spatial s = {1, pipe, share};
    return vgpu_spatial_pct(&s, cur);
}
static int env_ok(int share, const char *pipe, const char *p, const char *c) {
    struct vgpu_spatial s = {1, pipe, share};
    char err[600];
    return vgpu_spatial_env_ok(&s, p, c, err, sizeof err);
}
*/
import "C"

import "unsafe"

func cstr(s *string) *C.char {
	if s == nil {
		return nil
	}
	return C.CString(*s)
}

func free(p *C.char) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}

// Pct is vgpu_spatial_pct: the percentage a process with share runs with,
// given its environment's value cur (nil: unset).
func Pct(share int, cur *string) int {
	p, c := C.CString("/run/vgpu/mps"), cstr(cur)
	defer free(p)
	defer free(c)
	return int(C.pct(C.int(share), p, c))
}

// EnvOK is vgpu_spatial_env_ok for a share and the pipe /run/vgpu/mps.
func EnvOK(share int, pipe, pct *string) bool {
	q, p, c := C.CString("/run/vgpu/mps"), cstr(pipe), cstr(pct)
	defer free(q)
	defer free(p)
	defer free(c)
	return C.env_ok(C.int(share), q, p, c) == 0
}
