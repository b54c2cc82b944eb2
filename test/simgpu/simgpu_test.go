//go:build integration

// Tests of the simulated GPU. Every scenario runs in its own subprocess (this
// test binary re-executed with SIMGPU_CHILD=<name>), which loads the simulated
// libcuda from a fresh simroot.Root and resolves every function through
// cuGetProcAddress_v2 like the CUDA runtime. Children report with "FAIL:" lines
// and a non-zero exit; parents assert on exit status and printed values.
package simgpu_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/vgpu-dev/vgpu/test/simgpu/internal/cuclient"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// CUresult / NVML values used below (real driver values)
const (
	cudaSuccess        = 0
	errInvalidValue    = 1
	errOutOfMemory     = 2
	errNotInitialized  = 3
	errNoDevice        = 100
	errInvalidDevice   = 101
	errInvalidImage    = 200
	errInvalidContext  = 201
	errInvalidHandle   = 400
	errNotFound        = 500
	errNotReady        = 600
	mib                = 1 << 20
	ctxMem             = 256 * mib
	statusSuccess      = 0
	statusNotFound     = 1
	statusVersionInsuf = 2
)

func TestMain(m *testing.M) {
	if name := os.Getenv("SIMGPU_CHILD"); name != "" {
		fn, ok := children[name]
		if !ok {
			fmt.Println("FAIL: unknown child", name)
			os.Exit(2)
		}
		runtime.LockOSThread() // CUDA contexts are per OS thread
		c := &child{}
		fn(c)
		if c.failed {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ---- child side ----

type child struct{ failed bool }

func (c *child) fail(format string, a ...any) {
	fmt.Printf("FAIL: "+format+"\n", a...)
	c.failed = true
}

func (c *child) fatal(format string, a ...any) {
	fmt.Printf("FAIL: "+format+"\n", a...)
	os.Exit(1)
}

// want checks a CUresult
func (c *child) want(what string, got, want int) {
	if got != want {
		c.fail("%s: got CUresult %d, want %d", what, got, want)
	}
}

func (c *child) must(what string, got int) {
	if got != cudaSuccess {
		c.fatal("%s: CUresult %d", what, got)
	}
}

func libPath(name string) string { return filepath.Join(os.Getenv("SIMGPU_LIBDIR"), name) }

func (c *child) open(withNvml bool) {
	nv := ""
	if withNvml {
		nv = libPath("libnvidia-ml.so.1")
	}
	if err := cuclient.Open(libPath("libcuda.so.1"), nv); err != nil {
		c.fatal("%v", err)
	}
}

var out = cuclient.Alloc(4096) // out-parameters

// setup: cuInit, primary context of device 0 current
func (c *child) setup() {
	c.open(false)
	c.must("cuInit", cuclient.Call("cuInit", 0))
	c.must("cuDevicePrimaryCtxRetain", cuclient.Call("cuDevicePrimaryCtxRetain", out.Ptr(), 0))
	c.must("cuCtxSetCurrent", cuclient.Call("cuCtxSetCurrent", out.U64(0)))
}

func memInfo(c *child) (free, total uint64) {
	c.must("cuMemGetInfo", cuclient.Call("cuMemGetInfo", out.At(0), out.At(8)))
	return out.U64(0), out.U64(8)
}

func loadFunc(c *child, image, name string) uint64 {
	img, nm := cuclient.Str(image), cuclient.Str(name)
	c.must("cuModuleLoadData", cuclient.Call("cuModuleLoadData", out.At(0), img.Ptr()))
	mod := out.U64(0)
	c.must("cuModuleGetFunction", cuclient.Call("cuModuleGetFunction", out.At(0), mod, nm.Ptr()))
	return out.U64(0)
}

func launch(c *child, f, stream uint64) {
	c.must("cuLaunchKernel", cuclient.Call("cuLaunchKernel", f, 1, 1, 1, 32, 1, 1, 0, stream, 0, 0))
}

var children = map[string]func(*child){}

func init() {
	// capacity: allocate exactly what is free, then one more byte/granule must fail
	kinds := map[string]func(c *child, n uint64) int{
		"alloc":   func(c *child, n uint64) int { return cuclient.Call("cuMemAlloc", out.At(100), n) },
		"managed": func(c *child, n uint64) int { return cuclient.Call("cuMemAllocManaged", out.At(100), n, 1) },
		"pitch": func(c *child, n uint64) int {
			return cuclient.Call("cuMemAllocPitch", out.At(100), out.At(108), n, 1, 4)
		},
		"async": func(c *child, n uint64) int { return cuclient.Call("cuMemAllocAsync", out.At(100), n, 0) },
		"vmm": func(c *child, n uint64) int {
			prop := cuclient.Alloc(32)
			prop.PutU32(0, 1) // PINNED
			prop.PutU32(8, 1) // location DEVICE, id 0
			if n < 2*mib {
				n = 2 * mib // cuMemCreate needs granularity multiples; one granule more
			}
			return cuclient.Call("cuMemCreate", out.At(100), n, prop.Ptr(), 0)
		},
		"array": func(c *child, n uint64) int {
			d := cuclient.Alloc(24)
			if n >= mib { // 2D float4: rows of 65536 texels = 1 MiB
				d.PutU64(0, 65536)
				d.PutU64(8, n/mib)
				d.PutU32(16, 0x20)
				d.PutU32(20, 4)
			} else { // 1D uint8
				d.PutU64(0, n)
				d.PutU32(16, 0x01)
				d.PutU32(20, 1)
			}
			return cuclient.Call("cuArrayCreate", out.At(100), d.Ptr())
		},
	}
	for name, alloc := range kinds {
		children["capacity-"+name] = func(c *child) {
			c.setup()
			free, total := memInfo(c)
			if total != 16<<30 {
				c.fail("total %d, want 16 GiB", total)
			}
			if free != total-ctxMem {
				c.fail("free %d after one context, want total-%d (context memory charged)", free, uint64(ctxMem))
			}
			c.want("allocate all free memory", alloc(c, free), cudaSuccess)
			if f, _ := memInfo(c); f != 0 {
				c.fail("free after filling: %d", f)
			}
			c.want("one byte more", alloc(c, 1), errOutOfMemory)
		}
	}

	// pools keep freed memory reserved until a sync trims to the release threshold
	children["pool"] = func(c *child) {
		c.setup()
		free, _ := memInfo(c)
		c.must("cuDeviceGetDefaultMemPool", cuclient.Call("cuDeviceGetDefaultMemPool", out.At(200), 0))
		pool := out.U64(200)
		out.PutU64(300, ^uint64(0))
		c.must("set threshold", cuclient.Call("cuMemPoolSetAttribute", pool, 4, out.At(300)))
		c.must("alloc async", cuclient.Call("cuMemAllocAsync", out.At(100), 64*mib, 0))
		c.must("free async", cuclient.Call("cuMemFreeAsync", out.U64(100), 0))
		c.must("sync", cuclient.Call("cuStreamSynchronize", 0))
		if f, _ := memInfo(c); f != free-64*mib {
			c.fail("free %d after free+sync with threshold max: want %d (still reserved)", f, free-64*mib)
		}
		c.must("reserved", cuclient.Call("cuMemPoolGetAttribute", pool, 5, out.At(300)))
		if out.U64(300) != 64*mib {
			c.fail("reserved %d, want 64 MiB", out.U64(300))
		}
		c.must("trim", cuclient.Call("cuMemPoolTrimTo", pool, 0))
		if f, _ := memInfo(c); f != free {
			c.fail("free %d after trim, want %d", f, free)
		}
		out.PutU64(300, 0)
		c.must("threshold 0", cuclient.Call("cuMemPoolSetAttribute", pool, 4, out.At(300)))
		c.must("alloc async", cuclient.Call("cuMemAllocAsync", out.At(100), 64*mib, 0))
		c.must("free async", cuclient.Call("cuMemFreeAsync", out.U64(100), 0))
		c.must("sync", cuclient.Call("cuStreamSynchronize", 0))
		if f, _ := memInfo(c); f != free {
			c.fail("free %d after sync with threshold 0, want %d (released)", f, free)
		}
	}

	// a second context costs context memory; destroying it gives it back
	children["context-memory"] = func(c *child) {
		c.setup()
		f1, _ := memInfo(c)
		c.must("cuCtxCreate", cuclient.Call("cuCtxCreate", out.At(200), 0, 0, 0))
		f2, _ := memInfo(c)
		if f1-f2 != ctxMem {
			c.fail("second context cost %d, want %d", f1-f2, uint64(ctxMem))
		}
		c.must("cuCtxDestroy", cuclient.Call("cuCtxDestroy", out.U64(200)))
		if f3, _ := memInfo(c); f3 != f1 { // the primary context is current again
			c.fail("free %d after destroying the second context, want %d", f3, f1)
		}
		c.must("cuCtxSetCurrent(NULL)", cuclient.Call("cuCtxSetCurrent", 0))
		c.want("mem info without current context", cuclient.Call("cuMemGetInfo", out.At(0), out.At(8)), errInvalidContext)
	}

	// hold memory until killed
	children["holder"] = func(c *child) {
		c.setup()
		n, _ := strconv.ParseUint(os.Getenv("SIMGPU_HOLD"), 10, 64)
		c.must("hold alloc", cuclient.Call("cuMemAlloc", out.At(100), n))
		fmt.Println("READY")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes or kills us
	}

	// print free memory, then fill it and check one byte more fails
	children["filler"] = func(c *child) {
		c.setup()
		free, _ := memInfo(c)
		fmt.Printf("FREE %d\n", free)
		if os.Getenv("SIMGPU_FILL") == "1" {
			c.want("fill", cuclient.Call("cuMemAlloc", out.At(100), free), cudaSuccess)
			c.want("one more byte", cuclient.Call("cuMemAlloc", out.At(108), 1), errOutOfMemory)
		}
	}

	// 100 x 2 ms kernels on one stream
	children["timeline"] = func(c *child) {
		c.setup()
		f := loadFunc(c, "busy_2000us\nother_1us", "busy_2000us")
		c.must("cuStreamCreate", cuclient.Call("cuStreamCreate", out.At(200), 1))
		s := out.U64(200)
		c.must("cuEventCreate", cuclient.Call("cuEventCreate", out.At(208), 0))
		c.must("cuEventCreate", cuclient.Call("cuEventCreate", out.At(216), 0))
		e0, e1 := out.U64(208), out.U64(216)
		t0 := cuclient.Now()
		c.must("record", cuclient.Call("cuEventRecord", e0, s))
		for i := 0; i < 100; i++ {
			launch(c, f, s)
		}
		c.must("record", cuclient.Call("cuEventRecord", e1, s))
		tl := cuclient.Now()
		if tl-t0 > 50e6 {
			c.fail("100 launches took %v: launches must not block", time.Duration(tl-t0))
		}
		c.want("query while busy", cuclient.Call("cuStreamQuery", s), errNotReady)
		c.want("event query while busy", cuclient.Call("cuEventQuery", e1), errNotReady)
		c.must("sync", cuclient.Call("cuStreamSynchronize", s))
		el := time.Duration(cuclient.Now() - t0)
		fmt.Printf("SYNC %d\n", el.Nanoseconds())
		c.want("query idle", cuclient.Call("cuStreamQuery", s), cudaSuccess)
		c.must("elapsed", cuclient.Call("cuEventElapsedTime", out.At(300), e0, e1))
		ms := out.F32(300)
		fmt.Printf("ELAPSED %f\n", ms)
		if ms < 199.9 || ms > 200.5+float32(tl-t0)/1e6 {
			c.fail("event elapsed %.3f ms, want 200", ms)
		}
		busy, r := cuclient.BusyNs(0, t0, cuclient.Now())
		c.want("simgpu_busy_ns", r, cudaSuccess)
		if busy < 200e6 || busy > 200e6+1e6 {
			c.fail("busy %d ns, want 200 ms", busy)
		}
	}

	// 50% duty cycle: 10 ms kernels started every 20 ms (absolute times)
	children["util"] = func(c *child) {
		c.open(true)
		c.must("cuInit", cuclient.Call("cuInit", 0))
		c.must("retain", cuclient.Call("cuDevicePrimaryCtxRetain", out.Ptr(), 0))
		c.must("set", cuclient.Call("cuCtxSetCurrent", out.U64(0)))
		if r := cuclient.NvmlInit(); r != 0 {
			c.fatal("nvmlInit %d", r)
		}
		f := loadFunc(c, "duty_10000us", "duty_10000us")
		start := cuclient.Now()
		for k := 0; k < 60; k++ {
			at := start + uint64(k)*20e6
			if d := int64(at) - int64(cuclient.Now()); d > 0 {
				time.Sleep(time.Duration(d))
			}
			launch(c, f, 0)
		}
		time.Sleep(5 * time.Millisecond)
		now := cuclient.Now()
		u, r := cuclient.NvmlUtil(0)
		busy, _ := cuclient.BusyNs(0, now-1e9, now)
		if r != 0 {
			c.fatal("nvml util %d", r)
		}
		share := float64(busy) / 1e7
		fmt.Printf("UTIL %d SHARE %.2f\n", u, share)
		if d := float64(u) - share; d > 2 || d < -2 {
			c.fail("NVML utilization %d%% vs busy share %.2f%% of the same second", u, share)
		}
		if u < 45 || u > 55 {
			c.fail("NVML utilization %d%%, want about 50%% for a 50%% duty cycle", u)
		}
		c.must("sync", cuclient.Call("cuCtxSynchronize"))
	}

	// device enumeration as seen through CUDA; prints COUNT and names
	children["enumerate"] = func(c *child) {
		c.open(false)
		r := cuclient.Call("cuInit", 0)
		fmt.Printf("INIT %d\n", r)
		if r != 0 {
			return
		}
		c.must("count", cuclient.Call("cuDeviceGetCount", out.At(0)))
		n := int(out.U32(0))
		fmt.Printf("COUNT %d\n", n)
		name := cuclient.Alloc(256)
		for i := 0; i < n; i++ {
			c.must("name", cuclient.Call("cuDeviceGetName", name.Ptr(), 256, uint64(i)))
			c.must("uuid", cuclient.Call("cuDeviceGetUuid", out.At(64), uint64(i)))
			b := out.Bytes()[64:80]
			fmt.Printf("DEV %d %s GPU-%x-%x-%x-%x-%x\n", i, strings.TrimRight(string(name.Bytes()), "\x00"), b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
		}
	}

	// error codes for bad input
	children["bad-input"] = func(c *child) {
		c.open(false)
		c.want("cuDeviceGetCount before cuInit", cuclient.Call("cuDeviceGetCount", out.At(0)), errNotInitialized)
		c.want("cuMemAlloc before cuInit", cuclient.Call("cuMemAlloc", out.At(0), 1), errNotInitialized)
		c.want("cuInit(1)", cuclient.Call("cuInit", 1), errInvalidValue)
		c.must("cuInit", cuclient.Call("cuInit", 0))
		c.want("cuDeviceGetCount(NULL)", cuclient.Call("cuDeviceGetCount", 0), errInvalidValue)
		c.want("cuDeviceGet(99)", cuclient.Call("cuDeviceGet", out.At(0), 99), errInvalidDevice)
		c.want("cuDeviceGet(-1)", cuclient.Call("cuDeviceGet", out.At(0), ^uint64(0)), errInvalidDevice)
		c.want("cuMemAlloc without context", cuclient.Call("cuMemAlloc", out.At(0), 1), errInvalidContext)
		c.want("cuCtxGetDevice without context", cuclient.Call("cuCtxGetDevice", out.At(0)), errInvalidContext)
		c.want("cuCtxPushCurrent(bogus)", cuclient.Call("cuCtxPushCurrent", 0xdeadbeef), errInvalidContext)
		c.want("cuDeviceGetAttribute(bad attr)", cuclient.Call("cuDeviceGetAttribute", out.At(0), 100000, 0), errInvalidValue)
		c.must("retain", cuclient.Call("cuDevicePrimaryCtxRetain", out.Ptr(), 0))
		c.must("set", cuclient.Call("cuCtxSetCurrent", out.U64(0)))
		c.want("cuMemAlloc(NULL)", cuclient.Call("cuMemAlloc", 0, 16), errInvalidValue)
		c.want("cuMemAlloc(0 bytes)", cuclient.Call("cuMemAlloc", out.At(0), 0), errInvalidValue)
		c.want("cuMemFree(bogus)", cuclient.Call("cuMemFree", 0x1234), errInvalidValue)
		c.want("cuMemcpyHtoD to bogus", cuclient.Call("cuMemcpyHtoD", 0x1234, out.Ptr(), 8), errInvalidValue)
		c.want("cuStreamSynchronize(bogus)", cuclient.Call("cuStreamSynchronize", 0xdeadbeef), errInvalidHandle)
		c.want("cuEventRecord(bogus)", cuclient.Call("cuEventRecord", 0xdeadbeef, 0), errInvalidHandle)
		c.want("cuLaunchKernel(bogus)", cuclient.Call("cuLaunchKernel", 0xdeadbeef, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0), errInvalidHandle)
		img := cuclient.Str("k_1us")
		c.must("load", cuclient.Call("cuModuleLoadData", out.At(0), img.Ptr()))
		missing := cuclient.Str("nope")
		c.want("cuModuleGetFunction(missing)", cuclient.Call("cuModuleGetFunction", out.At(8), out.U64(0), missing.Ptr()), errNotFound)
		elf := cuclient.Str("\x7fELF\x02\x01")
		c.want("cuModuleLoadData(ELF)", cuclient.Call("cuModuleLoadData", out.At(8), elf.Ptr()), errInvalidImage)
		f := loadFunc(c, "k_1us", "k_1us")
		c.want("launch with block 2048", cuclient.Call("cuLaunchKernel", f, 1, 1, 1, 2048, 1, 1, 0, 0, 0, 0), errInvalidValue)
		c.want("launch with grid 0", cuclient.Call("cuLaunchKernel", f, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0), errInvalidValue)
		c.want("pitch with element size 3", cuclient.Call("cuMemAllocPitch", out.At(0), out.At(8), 100, 1, 3), errInvalidValue)
		c.want("cuMemCreate(1 byte)", func() int {
			p := cuclient.Alloc(32)
			p.PutU32(0, 1)
			p.PutU32(8, 1)
			return cuclient.Call("cuMemCreate", out.At(0), 1, p.Ptr(), 0)
		}(), errInvalidValue)
		c.want("elapsed of unrecorded events", func() int {
			cuclient.Call("cuEventCreate", out.At(0), 0)
			cuclient.Call("cuEventCreate", out.At(8), 0)
			return cuclient.Call("cuEventElapsedTime", out.At(16), out.U64(0), out.U64(8))
		}(), errInvalidHandle)
		var name = cuclient.Alloc(8)
		c.want("cuGetErrorName(unknown)", cuclient.Call("cuGetErrorName", 12345, name.Ptr()), errInvalidValue)
	}

	// bytes really move
	children["memcpy"] = func(c *child) {
		c.setup()
		const n = 1 << 16
		src, dst := cuclient.Alloc(n), cuclient.Alloc(n)
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i * 7)
		}
		src.SetBytes(b)
		c.must("alloc", cuclient.Call("cuMemAlloc", out.At(0), n))
		d := out.U64(0)
		c.must("HtoD", cuclient.Call("cuMemcpyHtoD", d, src.Ptr(), n))
		c.must("memset 16 bytes", cuclient.Call("cuMemsetD8", d+16, 0xab, 16))
		c.must("DtoHAsync", cuclient.Call("cuMemcpyDtoHAsync", dst.Ptr(), d, n, 0))
		c.must("sync", cuclient.Call("cuStreamSynchronize", 0))
		for i := 16; i < 32; i++ {
			b[i] = 0xab
		}
		if got := dst.Bytes(); string(got) != string(b) {
			c.fail("round trip mismatch")
		}
		c.want("copy past the end", cuclient.Call("cuMemcpyDtoH", dst.Ptr(), d+1, n), errInvalidValue)
	}

	// cuGetProcAddress_v2 versioning and per-thread variants
	children["procaddr"] = func(c *child) {
		c.open(false)
		type tc struct {
			name    string
			version int
			flags   uint64
			want    string // exported symbol expected, "" for failure
			status  int
		}
		for _, t := range []tc{
			{"cuMemAlloc", 13000, 0, "cuMemAlloc_v2", statusSuccess},
			{"cuMemAlloc", 3000, 0, "", statusVersionInsuf},
			{"cuMemGetInfo", 13000, 0, "cuMemGetInfo_v2", statusSuccess},
			{"cuCtxCreate", 3020, 0, "cuCtxCreate_v2", statusSuccess},
			{"cuCtxCreate", 12000, 0, "cuCtxCreate_v3", statusSuccess},
			{"cuCtxCreate", 13000, 0, "cuCtxCreate_v4", statusSuccess},
			{"cuGetProcAddress", 11030, 0, "cuGetProcAddress", statusSuccess},
			{"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2", statusSuccess},
			{"cuGraphInstantiate", 13000, 0, "cuGraphInstantiateWithFlags", statusSuccess},
			{"cuGraphAddKernelNode", 13000, 0, "cuGraphAddKernelNode_v2", statusSuccess},
			{"cuEventElapsedTime", 13000, 0, "cuEventElapsedTime_v2", statusSuccess},
			{"cuLaunchKernel", 13000, 0, "cuLaunchKernel", statusSuccess},
			{"cuLaunchKernel", 13000, 2, "cuLaunchKernel_ptsz", statusSuccess},
			{"cuLaunchKernel", 13000, 1, "cuLaunchKernel", statusSuccess},
			{"cuLaunchKernelEx", 13000, 2, "cuLaunchKernelEx_ptsz", statusSuccess},
			{"cuMemcpyAsync", 13000, 2, "cuMemcpyAsync_ptsz", statusSuccess},
			{"cuStreamSynchronize", 13000, 2, "cuStreamSynchronize_ptsz", statusSuccess},
			{"cuGraphLaunch", 13000, 2, "cuGraphLaunch_ptsz", statusSuccess},
			{"cuMemAllocAsync", 13000, 2, "cuMemAllocAsync_ptsz", statusSuccess},
			{"cuMemAllocAsync", 11000, 0, "", statusVersionInsuf},
			{"cuMemcpyHtoD", 13000, 2, "cuMemcpyHtoD_v2_ptds", statusSuccess},
			{"cuMemcpyHtoD", 13000, 0, "cuMemcpyHtoD_v2", statusSuccess},
			{"cuMemAlloc_v2", 13000, 0, "", statusNotFound},
			{"cuNoSuchThing", 13000, 0, "", statusNotFound},
		} {
			p, r, st := cuclient.Proc(t.name, t.version, t.flags)
			if st != t.status {
				c.fail("%s@%d flags %d: status %d, want %d", t.name, t.version, t.flags, st, t.status)
			}
			if t.want == "" {
				if r != errNotFound || p != 0 {
					c.fail("%s@%d: result %d ptr %#x, want CUDA_ERROR_NOT_FOUND and NULL", t.name, t.version, r, p)
				}
				continue
			}
			if r != cudaSuccess || p == 0 || p != cuclient.Dlsym(t.want) {
				c.fail("%s@%d flags %d: got %#x (r=%d), want exported %s %#x", t.name, t.version, t.flags, p, r, t.want, cuclient.Dlsym(t.want))
			}
		}
		a, _, _ := cuclient.Proc("cuStreamQuery", 13000, 0)
		b, _, _ := cuclient.Proc("cuStreamQuery", 13000, 2)
		if a == b || a == 0 || b == 0 {
			c.fail("cuStreamQuery default %#x and per-thread %#x must be distinct", a, b)
		}
		if _, r, _ := cuclient.Proc("cuMemAlloc", 13000, 4); r != errInvalidValue {
			c.fail("bad flags: %d, want CUDA_ERROR_INVALID_VALUE", r)
		}
	}

	// per-thread default stream through _ptsz: work on the per-thread stream is timed
	children["ptsz"] = func(c *child) {
		cuclient.SetFlags(cuclient.FlagsPerThread)
		c.setup()
		f := loadFunc(c, "busy_2000us", "busy_2000us")
		t0 := cuclient.Now()
		for i := 0; i < 10; i++ {
			launch(c, f, 0) // stream 0 = per-thread default stream under _ptsz
		}
		c.want("query per-thread stream", cuclient.Call("cuStreamQuery", 0), errNotReady)
		c.must("sync", cuclient.Call("cuStreamSynchronize", 0))
		if d := cuclient.Now() - t0; d < 20e6 {
			c.fail("10 x 2 ms on the per-thread stream synced after %v", time.Duration(d))
		}
	}

	// stream capture -> graph -> launch replays the kernels on the timeline
	children["graph"] = func(c *child) {
		c.setup()
		f := loadFunc(c, "busy_1000us", "busy_1000us")
		c.must("stream", cuclient.Call("cuStreamCreate", out.At(200), 0))
		s := out.U64(200)
		c.must("begin", cuclient.Call("cuStreamBeginCapture", s, 0))
		c.must("alloc in capture", cuclient.Call("cuMemAllocAsync", out.At(300), 4*mib, s))
		for i := 0; i < 5; i++ {
			launch(c, f, s)
		}
		c.must("free in capture", cuclient.Call("cuMemFreeAsync", out.U64(300), s))
		c.must("is capturing", cuclient.Call("cuStreamIsCapturing", s, out.At(400)))
		if out.U32(400) != 1 {
			c.fail("capture status %d, want ACTIVE", out.U32(400))
		}
		c.must("end", cuclient.Call("cuStreamEndCapture", s, out.At(208)))
		c.must("nodes", cuclient.Call("cuGraphGetNodes", out.U64(208), 0, out.At(408)))
		if out.U64(408) != 7 {
			c.fail("graph has %d nodes, want 7", out.U64(408))
		}
		c.must("instantiate", cuclient.Call("cuGraphInstantiate", out.At(216), out.U64(208), 0))
		free0, _ := memInfo(c)
		t0 := cuclient.Now()
		c.must("launch", cuclient.Call("cuGraphLaunch", out.U64(216), s))
		c.must("launch", cuclient.Call("cuGraphLaunch", out.U64(216), s))
		c.must("sync", cuclient.Call("cuStreamSynchronize", s))
		if d := cuclient.Now() - t0; d < 10e6 || d > 100e6 {
			c.fail("2 graph launches of 5 x 1 ms synced after %v, want >= 10 ms", time.Duration(d))
		}
		// the captured cuMemAllocAsync is a graph allocation: 4 MiB of graph memory from the first launch
		if f, _ := memInfo(c); f != free0-4*mib {
			c.fail("free %d after the launches, want %d (the captured allocation's graph memory)", f, free0-4*mib)
		}
		c.must("exec destroy", cuclient.Call("cuGraphExecDestroy", out.U64(216)))
		c.must("graph destroy", cuclient.Call("cuGraphDestroy", out.U64(208)))
		c.must("trim", cuclient.Call("cuDeviceGraphMemTrim", 0))
		if f, _ := memInfo(c); f != free0 {
			c.fail("free %d after the trim, want %d", f, free0)
		}
	}

	// graph memory: physical memory from the process's graph pool at upload or
	// launch, kept across frees and relaunches until cuDeviceGraphMemTrim; a
	// live allocation keeps its memory through a trim; destroying the exec does
	// not give memory back, the next trim does
	children["graph-memory"] = func(c *child) {
		c.setup()
		free0, _ := memInfo(c)
		attr := func(a int) uint64 {
			c.must("cuDeviceGetGraphMemAttribute", cuclient.Call("cuDeviceGetGraphMemAttribute", 0, uint64(a), out.At(600)))
			return out.U64(600)
		}
		const used, usedHigh, reserved, reservedHigh = 0, 1, 2, 3
		check := func(step string, wantFree, wantReserved, wantUsed uint64) {
			if f, _ := memInfo(c); f != wantFree {
				c.fail("%s: free %d, want %d (free0 - %d MiB)", step, f, wantFree, (free0-wantFree)/mib)
			}
			if r := attr(reserved); r != wantReserved {
				c.fail("%s: RESERVED_MEM_CURRENT %d, want %d", step, r, wantReserved)
			}
			if u := attr(used); u != wantUsed {
				c.fail("%s: USED_MEM_CURRENT %d, want %d", step, u, wantUsed)
			}
		}
		// CUDA_MEM_ALLOC_NODE_PARAMS: poolProps (88 bytes), accessDescs, count, bytesize @104, dptr @112
		params := func(size uint64) *cuclient.Mem {
			p := cuclient.Alloc(120)
			p.PutU32(0, 1) // PINNED
			p.PutU32(8, 1) // location DEVICE
			p.PutU32(12, 0)
			p.PutU64(104, size)
			return p
		}
		graph := func(size uint64, withFree bool) (g, exec, dptr uint64) {
			c.must("cuGraphCreate", cuclient.Call("cuGraphCreate", out.At(500), 0))
			g = out.U64(500)
			p := params(size)
			c.must("cuGraphAddMemAllocNode", cuclient.Call("cuGraphAddMemAllocNode", out.At(508), g, 0, 0, p.Ptr()))
			dptr = p.U64(112)
			if dptr == 0 {
				c.fail("alloc node returned no address")
			}
			c.must("cuGraphNodeGetType", cuclient.Call("cuGraphNodeGetType", out.U64(508), out.At(516)))
			if out.U32(516) != 10 {
				c.fail("node type %d, want CU_GRAPH_NODE_TYPE_MEM_ALLOC (10)", out.U32(516))
			}
			q := cuclient.Alloc(120)
			c.must("cuGraphMemAllocNodeGetParams", cuclient.Call("cuGraphMemAllocNodeGetParams", out.U64(508), q.Ptr()))
			if q.U64(104) != size || q.U64(112) != dptr || q.U32(8) != 1 || q.U32(12) != 0 {
				c.fail("node params: bytesize %d dptr %#x location %d/%d", q.U64(104), q.U64(112), q.U32(8), q.U32(12))
			}
			if withFree {
				c.must("cuGraphAddMemFreeNode", cuclient.Call("cuGraphAddMemFreeNode", out.At(520), g, out.At(508), 1, dptr))
			}
			c.must("instantiate", cuclient.Call("cuGraphInstantiateWithFlags", out.At(528), g, 0))
			return g, out.U64(528), dptr
		}
		sync := func() { c.must("sync", cuclient.Call("cuStreamSynchronize", 0)) }

		// A: 63 MiB + 1 byte, freed in the graph: 64 MiB of graph memory (2 MiB granules)
		ga, a, pa := graph(63*mib+1, true)
		check("A instantiated", free0, 0, 0)
		c.want("memset before the launch", cuclient.Call("cuMemsetD8", pa, 0, 16), errInvalidValue)
		c.must("launch A", cuclient.Call("cuGraphLaunch", a, 0))
		sync()
		check("A launched", free0-64*mib, 64*mib, 64*mib)
		c.must("relaunch A", cuclient.Call("cuGraphLaunch", a, 0))
		sync()
		check("A relaunched", free0-64*mib, 64*mib, 64*mib)
		c.must("trim", cuclient.Call("cuDeviceGraphMemTrim", 0))
		check("trimmed", free0, 0, 0)
		if h := attr(reservedHigh); h != 64*mib {
			c.fail("RESERVED_MEM_HIGH %d, want 64 MiB", h)
		}
		out.PutU64(608, 0)
		c.must("reset high", cuclient.Call("cuDeviceSetGraphMemAttribute", 0, reservedHigh, out.At(608)))
		if h := attr(reservedHigh); h != 0 {
			c.fail("RESERVED_MEM_HIGH after reset %d, want 0", h)
		}
		if h := attr(usedHigh); h != 64*mib {
			c.fail("USED_MEM_HIGH %d, want 64 MiB", h)
		}
		c.must("upload A", cuclient.Call("cuGraphUpload", a, 0))
		check("A uploaded", free0-64*mib, 64*mib, 64*mib)

		// B: 32 MiB not freed in the graph: live after the launch, a relaunch is refused,
		// a trim leaves it alone (and takes A's idle memory), cuMemFree ends it
		_, b, pb := graph(32*mib, false)
		c.must("launch B", cuclient.Call("cuGraphLaunch", b, 0))
		sync()
		check("B launched", free0-96*mib, 96*mib, 96*mib)
		c.must("memset live graph allocation", cuclient.Call("cuMemsetD8", pb, 1, 16))
		c.want("relaunch B while its allocation is live", cuclient.Call("cuGraphLaunch", b, 0), errInvalidValue)
		c.must("trim", cuclient.Call("cuDeviceGraphMemTrim", 0))
		check("trimmed with B live", free0-32*mib, 32*mib, 32*mib)
		c.must("free B's allocation", cuclient.Call("cuMemFree", pb))
		c.want("free it twice", cuclient.Call("cuMemFree", pb), errInvalidValue)
		check("B freed", free0-32*mib, 32*mib, 32*mib)
		c.must("trim", cuclient.Call("cuDeviceGraphMemTrim", 0))
		check("trimmed after the free", free0, 0, 0)

		// destroying the exec (once its launch is done) unbinds A's memory but does not return it
		c.must("relaunch A", cuclient.Call("cuGraphLaunch", a, 0))
		sync()
		c.must("exec destroy", cuclient.Call("cuGraphExecDestroy", a))
		check("A's exec destroyed", free0-64*mib, 64*mib, 0)
		c.must("graph destroy", cuclient.Call("cuGraphDestroy", ga))
		check("A destroyed", free0-64*mib, 64*mib, 0)
		c.must("trim", cuclient.Call("cuDeviceGraphMemTrim", 0))
		check("trimmed after destroy", free0, 0, 0)
		c.must("exec destroy B", cuclient.Call("cuGraphExecDestroy", b))

		// more than the device has: the node is only an address, the launch is refused
		_, big, _ := graph(free0+2*mib, true)
		c.want("launch past the capacity", cuclient.Call("cuGraphLaunch", big, 0), errOutOfMemory)
		c.want("upload past the capacity", cuclient.Call("cuGraphUpload", big, 0), errOutOfMemory)
		check("refused", free0, 0, 0)
		c.want("bad device", cuclient.Call("cuDeviceGraphMemTrim", 7), errInvalidDevice)
		c.want("bad attribute", cuclient.Call("cuDeviceGetGraphMemAttribute", 0, 9, out.At(600)), errInvalidValue)

		// instantiate with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD binds at once
		c.must("cuGraphCreate", cuclient.Call("cuGraphCreate", out.At(500), 0))
		p := params(8 * mib)
		c.must("alloc node", cuclient.Call("cuGraphAddMemAllocNode", out.At(508), out.U64(500), 0, 0, p.Ptr()))
		c.must("free node", cuclient.Call("cuGraphAddMemFreeNode", out.At(520), out.U64(500), out.At(508), 1, p.U64(112)))
		ip := cuclient.Alloc(32) // CUDA_GRAPH_INSTANTIATE_PARAMS: flags, hUploadStream, hErrNode_out, result_out
		ip.PutU64(0, 2)
		c.must("instantiate with upload", cuclient.Call("cuGraphInstantiateWithParams", out.At(528), out.U64(500), ip.Ptr()))
		check("instantiated with upload", free0-8*mib, 8*mib, 8*mib)
	}

	// go-nvml discovery, as the device plugins and the runtime do it
	children["go-nvml"] = func(c *child) {
		lib := nvml.New(nvml.WithLibraryPath(libPath("libnvidia-ml.so.1")))
		if r := lib.Init(); r != nvml.SUCCESS {
			c.fatal("Init: %v", r)
		}
		// The child exits next, which releases NVML whatever Shutdown says.
		defer func() { _ = lib.Shutdown() }()
		n, r := lib.DeviceGetCount()
		if r != nvml.SUCCESS {
			c.fatal("DeviceGetCount: %v", r)
		}
		fmt.Printf("COUNT %d\n", n)
		for i := 0; i < n; i++ {
			d, r := lib.DeviceGetHandleByIndex(i)
			if r != nvml.SUCCESS {
				c.fatal("DeviceGetHandleByIndex(%d): %v", i, r)
			}
			name, r1 := d.GetName()
			uuid, r2 := d.GetUUID()
			minor, r3 := d.GetMinorNumber()
			mem, r4 := d.GetMemoryInfo()
			pci, r5 := d.GetPciInfo()
			for k, r := range []nvml.Return{r1, r2, r3, r4, r5} {
				if r != nvml.SUCCESS {
					c.fail("device %d query %d: %v", i, k, r)
				}
			}
			var bus []byte
			for _, ch := range pci.BusId {
				if ch == 0 {
					break
				}
				bus = append(bus, byte(ch))
			}
			fmt.Printf("DEV %d %s|%s|%d|%d|%d|%s\n", i, name, uuid, minor, mem.Total, mem.Used, bus)
		}
	}
}

// ---- parent side ----

func newRoot(t *testing.T, opts simroot.Options) *simroot.Root {
	t.Helper()
	r, err := simroot.Create(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func childCmd(r *simroot.Root, name string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SIMGPU_CHILD="+name, "SIMGPU_LIBDIR="+r.LibDir())
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// startHolder starts the "holder" child (SIMGPU_HOLD bytes and env) and
// waits until it holds them; it lets go when the test ends (its stdin
// closed), or earlier when the test kills it.
func startHolder(t *testing.T, r *simroot.Root, env ...string) *exec.Cmd {
	t.Helper()
	holder := childCmd(r, "holder", env...)
	stdin, _ := holder.StdinPipe()
	stdout, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = holder.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || strings.TrimSpace(line) != "READY" {
		_ = holder.Process.Kill()
		t.Fatalf("holder did not get ready: %q %v", line, err)
	}
	return holder
}

func runChild(t *testing.T, r *simroot.Root, name string, env ...string) string {
	t.Helper()
	cmd := childCmd(r, name, env...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s: %v\n%s", name, err, b)
	}
	return string(b)
}

func field(t *testing.T, outp, key string) string {
	t.Helper()
	for _, l := range strings.Split(outp, "\n") {
		if strings.HasPrefix(l, key+" ") {
			return strings.TrimPrefix(l, key+" ")
		}
	}
	t.Fatalf("no %q in output:\n%s", key, outp)
	return ""
}

func TestCapacity(t *testing.T) {
	for _, kind := range []string{"alloc", "pitch", "managed", "async", "vmm", "array"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			runChild(t, newRoot(t, simroot.Options{}), "capacity-"+kind)
		})
	}
}

func TestPoolReleaseThreshold(t *testing.T) { runChild(t, newRoot(t, simroot.Options{}), "pool") }
func TestContextMemory(t *testing.T)        { runChild(t, newRoot(t, simroot.Options{}), "context-memory") }
func TestMemcpyRoundTrip(t *testing.T)      { runChild(t, newRoot(t, simroot.Options{}), "memcpy") }
func TestBadInput(t *testing.T)             { runChild(t, newRoot(t, simroot.Options{}), "bad-input") }
func TestProcAddress(t *testing.T)          { runChild(t, newRoot(t, simroot.Options{}), "procaddr") }
func TestPerThreadStream(t *testing.T)      { runChild(t, newRoot(t, simroot.Options{}), "ptsz") }
func TestGraphCapture(t *testing.T)         { runChild(t, newRoot(t, simroot.Options{}), "graph") }
func TestGraphMemory(t *testing.T)          { runChild(t, newRoot(t, simroot.Options{}), "graph-memory") }

// Two processes share one capacity; a SIGKILLed holder's memory comes back.
func TestSharedCapacityAndKillReclaim(t *testing.T) {
	r := newRoot(t, simroot.Options{})
	const hold = 4 << 30
	holder := startHolder(t, r, fmt.Sprintf("SIMGPU_HOLD=%d", hold))
	outp := runChild(t, r, "filler", "SIMGPU_FILL=1")
	want := uint64(16<<30) - 2*ctxMem - hold
	if got, _ := strconv.ParseUint(field(t, outp, "FREE"), 10, 64); got != want {
		t.Errorf("second process sees free %d, want %d (capacity minus both contexts and the holder)", got, want)
	}
	holder.Process.Kill() // SIGKILL: no cleanup code runs
	holder.Wait()
	outp = runChild(t, r, "filler")
	if got, _ := strconv.ParseUint(field(t, outp, "FREE"), 10, 64); got != uint64(16<<30)-ctxMem {
		t.Errorf("after SIGKILL of the holder free is %d, want %d", got, uint64(16<<30)-ctxMem)
	}
}

// The driver's own memory (an H200 on driver 580: 616 MiB): NVML's total
// counts it and its used figure too, with no process listed for it; a
// process's cuMemGetInfo leaves it out, and no allocation gets it.
func TestDriverReserve(t *testing.T) {
	const reserve = 616 << 20
	r := newRoot(t, simroot.Options{Devices: []simroot.Device{{MemoryBytes: 16 << 30, ReservedBytes: reserve}}})
	const hold = 4 << 30
	startHolder(t, r, fmt.Sprintf("SIMGPU_HOLD=%d", hold))
	// the filler takes all it is told is free, and not one byte more
	outp := runChild(t, r, "filler", "SIMGPU_FILL=1")
	if got, want := field(t, outp, "FREE"), fmt.Sprint(uint64(16<<30)-reserve-2*ctxMem-hold); got != want {
		t.Errorf("cuMemGetInfo free %s beside a 4 GiB holder, want %s (16 GiB less the driver's own, both contexts and the holder)", got, want)
	}
	outp = runChild(t, r, "go-nvml")
	want := fmt.Sprintf("NVIDIA H100 (simulated)|%s|0|%d|%d|00000000:19:00.0", simroot.DefaultUUID(0), uint64(16<<30), uint64(reserve+ctxMem+hold))
	if got := field(t, outp, "DEV 0"); got != want {
		t.Errorf("NVML beside a 4 GiB holder: %q, want %q (used: the holder, its context and the driver's own)", got, want)
	}
}

func TestKernelTimeline(t *testing.T) {
	outp := runChild(t, newRoot(t, simroot.Options{}), "timeline")
	ns, _ := strconv.ParseInt(field(t, outp, "SYNC"), 10, 64)
	d := time.Duration(ns)
	if d < 200*time.Millisecond || d >= 400*time.Millisecond {
		t.Errorf("100 x busy_2000us: cuStreamSynchronize returned %v after the first launch, want [200ms, 400ms)", d)
	}
}

func TestUtilization(t *testing.T) {
	outp := runChild(t, newRoot(t, simroot.Options{}), "util")
	t.Log(strings.TrimSpace(outp))
}

func TestDeviceVisibility(t *testing.T) {
	r := newRoot(t, simroot.Options{Devices: []simroot.Device{{Name: "NVIDIA A (simulated)"}, {Name: "NVIDIA B (simulated)"}}})
	outp := runChild(t, r, "enumerate")
	if field(t, outp, "COUNT") != "2" {
		t.Fatalf("want 2 devices:\n%s", outp)
	}
	if got, want := field(t, outp, "DEV 1"), "NVIDIA B (simulated) "+simroot.DefaultUUID(1); got != want {
		t.Errorf("device 1: %q, want %q", got, want)
	}
	if err := os.Remove(r.NodePath(0)); err != nil {
		t.Fatal(err)
	}
	outp = runChild(t, r, "enumerate")
	if field(t, outp, "COUNT") != "1" || !strings.Contains(field(t, outp, "DEV 0"), "NVIDIA B") {
		t.Errorf("with nvidia0 removed want only device B:\n%s", outp)
	}
	if err := os.Remove(filepath.Join(r.DevDir(), "nvidiactl")); err != nil {
		t.Fatal(err)
	}
	outp = runChild(t, r, "enumerate")
	if field(t, outp, "INIT") != strconv.Itoa(errNoDevice) {
		t.Errorf("without nvidiactl cuInit must give CUDA_ERROR_NO_DEVICE:\n%s", outp)
	}
}

func TestBadConfig(t *testing.T) {
	r := newRoot(t, simroot.Options{})
	if err := os.WriteFile(filepath.Join(r.SimDir(), "config"), []byte("simgpu 1\ndevice memory=abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outp := runChild(t, r, "enumerate")
	if field(t, outp, "INIT") != strconv.Itoa(errNoDevice) {
		t.Errorf("bad config: want CUDA_ERROR_NO_DEVICE:\n%s", outp)
	}
	if strings.Count(outp, "simgpu: ") != 1 || !strings.Contains(outp, "bad memory") {
		t.Errorf("bad config must be explained once on stderr:\n%s", outp)
	}
}

func TestNvidiaSmi(t *testing.T) {
	r := newRoot(t, simroot.Options{Devices: []simroot.Device{{MemoryBytes: 8 << 30}}})
	b, err := exec.Command(filepath.Join(r.Dir(), "usr", "bin", "nvidia-smi")).CombinedOutput()
	if err != nil {
		t.Fatalf("nvidia-smi: %v\n%s", err, b)
	}
	for _, want := range []string{"Driver Version: 580.95.05", "NVIDIA H100 (simulated)", simroot.DefaultUUID(0)[:29], "0MiB /    8192MiB"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("nvidia-smi output lacks %q:\n%s", want, b)
		}
	}
}

func TestGoNVML(t *testing.T) {
	r := newRoot(t, simroot.Options{Devices: []simroot.Device{
		{Name: "NVIDIA H200 (simulated)", MemoryBytes: 141 << 30, PCIBusID: "0000:19:00.0"},
		{MemoryBytes: 8 << 30, UUID: "GPU-11111111-2222-3333-4444-555555555555", PCIBusID: "0000:3b:00.0"},
	}})
	// a CUDA process holding memory on device 1 must show as used memory
	startHolder(t, r, "SIMGPU_HOLD=1073741824", "CUDA_VISIBLE_DEVICES=1")
	outp := runChild(t, r, "go-nvml")
	if field(t, outp, "COUNT") != "2" {
		t.Fatalf("want 2 devices:\n%s", outp)
	}
	want0 := fmt.Sprintf("NVIDIA H200 (simulated)|%s|0|%d|0|00000000:19:00.0", simroot.DefaultUUID(0), uint64(141<<30))
	if got := field(t, outp, "DEV 0"); got != want0 {
		t.Errorf("device 0: %q, want %q", got, want0)
	}
	want1 := fmt.Sprintf("NVIDIA H100 (simulated)|GPU-11111111-2222-3333-4444-555555555555|1|%d|%d|00000000:3B:00.0", uint64(8<<30), uint64(ctxMem+1<<30))
	if got := field(t, outp, "DEV 1"); got != want1 {
		t.Errorf("device 1: %q, want %q", got, want1)
	}
	os.Remove(r.NodePath(1))
	if outp := runChild(t, r, "go-nvml"); field(t, outp, "COUNT") != "1" {
		t.Errorf("with nvidia1 removed NVML must see 1 device:\n%s", outp)
	}
}
