//go:build cgo

package checkpoint

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*cu_init_t)(unsigned);
typedef int (*cu_state_t)(int, int *);
typedef int (*cu_op_t)(int, void *);
typedef int (*cu_name_t)(int, const char **);

// The lock's arguments as cuda.h lays them out (CUcheckpointLockArgs); the
// other operations take eight reserved words, all zero.
struct lock_args {
	unsigned int timeout_ms;
	unsigned int reserved0;
	unsigned long long reserved1[7];
};

static void *lib;

static int ck_open(const char *path, char *why, size_t n)
{
	if (lib) return 0;
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		strncpy(why, dlerror(), n - 1);
		why[n - 1] = 0;
		return -1;
	}
	cu_init_t init = (cu_init_t)dlsym(lib, "cuInit");
	if (!init) {
		strncpy(why, "no cuInit in the driver library", n - 1);
		return -1;
	}
	int rc = init(0);
	if (rc) {
		snprintf(why, n, "cuInit: CUresult %d", rc);
		return -1;
	}
	return 0;
}

static int ck_has(const char *sym) { return lib && dlsym(lib, sym) != NULL; }

static int ck_state(int pid, int *state)
{
	cu_state_t f = (cu_state_t)dlsym(lib, "cuCheckpointProcessGetState");
	return f ? f(pid, state) : -1;
}

static int ck_op(const char *sym, int pid, unsigned timeout_ms)
{
	cu_op_t f = (cu_op_t)dlsym(lib, sym);
	if (!f) return -1;
	struct lock_args a;
	memset(&a, 0, sizeof a);
	a.timeout_ms = timeout_ms;
	return f(pid, &a);
}

static const char *ck_name(int rc)
{
	cu_name_t f = (cu_name_t)dlsym(lib, "cuGetErrorName");
	const char *s = NULL;
	if (!f || f(rc, &s) || !s) return "";
	return s;
}
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"
)

var symbols = map[step]string{
	stepLock: "cuCheckpointProcessLock", stepCheckpoint: "cuCheckpointProcessCheckpoint",
	stepRestore: "cuCheckpointProcessRestore", stepUnlock: "cuCheckpointProcessUnlock",
}

type cgoDriver struct{}

// openDriver loads the driver library at path into this process and
// initializes it; a driver without the checkpoint API is ErrNoAPI.
func openDriver(path string) (driver, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var why [512]C.char
	if C.ck_open(cp, &why[0], C.size_t(len(why))) != 0 {
		return nil, fmt.Errorf("driver library %s: %s", path, C.GoString(&why[0]))
	}
	for _, s := range append([]string{"cuCheckpointProcessGetState"}, symbols[stepLock], symbols[stepCheckpoint], symbols[stepRestore], symbols[stepUnlock]) {
		cs := C.CString(s)
		ok := C.ck_has(cs) != 0
		C.free(unsafe.Pointer(cs))
		if !ok {
			return nil, fmt.Errorf("%w: %s has no %s (driver 570 or later has it)", ErrNoAPI, path, s)
		}
	}
	return cgoDriver{}, nil
}

func (cgoDriver) state(pid int) (State, int) {
	var s C.int
	rc := int(C.ck_state(C.int(pid), &s))
	if rc != 0 {
		return StateUnknown, rc
	}
	return State(s), 0
}

func (cgoDriver) do(s step, pid int, timeout time.Duration) int {
	cs := C.CString(symbols[s])
	defer C.free(unsafe.Pointer(cs))
	// Only the lock takes a timeout: the driver refuses the other
	// operations' arguments unless every word is zero
	// (CUDA_ERROR_INVALID_VALUE).
	var ms C.uint
	if s == stepLock {
		ms = C.uint(timeout.Milliseconds())
	}
	return int(C.ck_op(cs, C.int(pid), ms))
}

func (cgoDriver) name(rc int) string { return C.GoString(C.ck_name(C.int(rc))) }
