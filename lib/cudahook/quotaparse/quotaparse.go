// Package quotaparse runs the library's own C quota parser
// (lib/cudahook/src/quota.c) from Go, so that Go tests and fuzzing exercise
// exactly the code the library runs.
package quotaparse

/*
#cgo CFLAGS: -std=gnu11 -D_GNU_SOURCE -I${SRCDIR}/../src -I${SRCDIR}/../include
#include <stdlib.h>
#include "../src/quota.c"
*/
import "C"

import "errors"

// Device is one device line.
type Device struct {
	UUID      string
	HasMemory bool
	Memory    uint64
	Compute   int
	// ComputeRequest: the request, the limit when the file gives none.
	ComputeRequest int
	MemoryRequest  uint64 // 0 when absent
	Phase          int    // -1 when absent
	Spatial        bool   // mode=spatial
	MPSPipe        string // mps_pipe=, "" when absent
}

// Quota is the parsed file.
type Quota struct {
	DriverCuda, DriverNvml, SharedDir string
	LogLevel                          int // 0 error, 1 warn, 2 info, 3 debug
	ComputePeriodMS                   int // -1 when absent
	Devices                           []Device
}

// Parse parses data with vgpu_quota_parse.
func Parse(data []byte) (*Quota, error) {
	var q C.struct_vgpu_quota
	var errbuf [512]C.char
	p := C.CBytes(data)
	defer C.free(p)
	if C.vgpu_quota_parse((*C.char)(p), C.size_t(len(data)), &q, &errbuf[0], C.size_t(len(errbuf))) != 0 {
		return nil, errors.New(C.GoString(&errbuf[0]))
	}
	out := &Quota{
		DriverCuda:      C.GoString(&q.driver_cuda[0]),
		DriverNvml:      C.GoString(&q.driver_nvml[0]),
		SharedDir:       C.GoString(&q.shared_dir[0]),
		LogLevel:        int(q.log_level),
		ComputePeriodMS: int(q.compute_period_ms),
	}
	for i := 0; i < int(q.ndev); i++ {
		d := &q.dev[i]
		out.Devices = append(out.Devices, Device{
			UUID: C.GoString(&d.uuid[0]), HasMemory: d.has_memory != 0, Memory: uint64(d.memory), Compute: int(d.compute), Phase: int(d.phase),
			ComputeRequest: int(d.compute_request), MemoryRequest: uint64(d.memory_request),
			Spatial: d.spatial != 0, MPSPipe: C.GoString(&d.mps_pipe[0]),
		})
	}
	return out, nil
}
