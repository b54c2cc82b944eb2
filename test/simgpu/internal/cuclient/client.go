// Package cuclient is a CUDA driver client for the simulated-GPU tests: it
// dlopens a libcuda.so.1 and resolves every call through cuGetProcAddress_v2
// (cudaVersion 13000) exactly as the CUDA runtime does. One library per process:
// tests run each scenario in its own subprocess.
package cuclient

/*
#cgo CFLAGS: -I${SRCDIR}/../../../../lib/cudahook/include -Wall -Werror
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "client.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Flags for cuGetProcAddress.
const (
	FlagsDefault   = 0
	FlagsPerThread = 2
)

// Open loads libcuda (and optionally libnvidia-ml, "" for none) by full path.
func Open(libcuda, libnvml string) error {
	cl, cn := C.CString(libcuda), C.CString(libnvml)
	defer C.free(unsafe.Pointer(cl))
	defer C.free(unsafe.Pointer(cn))
	var buf [512]C.char
	if C.cc_open(cl, cn, &buf[0], C.size_t(len(buf))) != 0 {
		return fmt.Errorf("open: %s", C.GoString(&buf[0]))
	}
	return nil
}

// SetFlags selects the cuGetProcAddress flags used by Call.
func SetFlags(f uint64) { C.cc_set_flags(C.ulonglong(f)) }

// Proc is cuGetProcAddress_v2(name, version, flags): pointer, CUresult, symbolStatus.
func Proc(name string, version int, flags uint64) (uintptr, int, int) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var p unsafe.Pointer
	var st C.int
	r := C.cc_proc(cs, C.int(version), C.ulonglong(flags), &p, &st)
	return uintptr(p), int(r), int(st)
}

// Dlsym is the exported address of a symbol of the loaded libcuda.
func Dlsym(name string) uintptr {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return uintptr(C.cc_dlsym(cs))
}

// Call resolves base name `name` and calls it with integer/pointer arguments.
// Pointers must be to C memory (see Mem) or nil. Returns the CUresult, or
// -1000-symbolStatus if the lookup failed.
func Call(name string, args ...uint64) int {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var a [11]C.uint64_t
	for i, v := range args {
		a[i] = C.uint64_t(v)
	}
	return int(C.cc_call(cs, C.int(len(args)), &a[0]))
}

// Mem is C memory for out-parameters and copy buffers (never moved by Go).
type Mem struct {
	p unsafe.Pointer
	n int
}

// Alloc returns n zeroed bytes of C memory.
func Alloc(n int) *Mem {
	p := C.calloc(C.size_t(n), 1)
	return &Mem{p: p, n: n}
}

// Ptr is the address to pass to Call.
func (m *Mem) Ptr() uint64 { return uint64(uintptr(m.p)) }

// At is the address of byte off.
func (m *Mem) At(off int) uint64 { return m.Ptr() + uint64(off) }

// U64 reads a uint64 at byte offset off.
func (m *Mem) U64(off int) uint64 { return *(*uint64)(unsafe.Add(m.p, off)) }

// U32 reads a uint32 at byte offset off.
func (m *Mem) U32(off int) uint32 { return *(*uint32)(unsafe.Add(m.p, off)) }

// F32 reads a float32 at byte offset off.
func (m *Mem) F32(off int) float32 { return *(*float32)(unsafe.Add(m.p, off)) }

// PutU64 / PutU32 write at byte offset off.
func (m *Mem) PutU64(off int, v uint64) { *(*uint64)(unsafe.Add(m.p, off)) = v }
func (m *Mem) PutU32(off int, v uint32) { *(*uint32)(unsafe.Add(m.p, off)) = v }

// Bytes is a Go copy of the memory.
func (m *Mem) Bytes() []byte { return C.GoBytes(m.p, C.int(m.n)) }

// SetBytes copies b into the memory.
func (m *Mem) SetBytes(b []byte) {
	copy(unsafe.Slice((*byte)(m.p), m.n), b)
}

// Str returns C memory holding s NUL-terminated.
func Str(s string) *Mem {
	m := Alloc(len(s) + 1)
	m.SetBytes([]byte(s))
	return m
}

// Free releases the memory.
func (m *Mem) Free() { C.free(m.p) }

// BusyNs is simgpu_busy_ns.
func BusyNs(ord int, from, to uint64) (uint64, int) {
	var b C.uint64_t
	r := C.cc_busy_ns(C.int(ord), C.uint64_t(from), C.uint64_t(to), &b)
	return uint64(b), int(r)
}

// NvmlInit calls nvmlInit_v2 in the loaded libnvidia-ml.
func NvmlInit() int { return int(C.cc_nvml_init()) }

// NvmlUtil is nvmlDeviceGetUtilizationRates(idx).gpu.
func NvmlUtil(idx int) (uint, int) {
	var u C.uint
	r := C.cc_nvml_util(C.int(idx), &u)
	return uint(u), int(r)
}

// Now is CLOCK_MONOTONIC in ns (the simulator's clock).
func Now() uint64 { return uint64(C.cc_now()) }

// ForkHold forks a child that keeps every descriptor of this process (the
// driver's too) and sleeps until killed; it returns the child's pid (-1:
// fork failed).
func ForkHold() int { return int(C.cc_fork_hold()) }
