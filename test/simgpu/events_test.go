//go:build integration

package simgpu_test

import (
	"runtime"
	"testing"

	"github.com/vgpu-dev/vgpu/test/simgpu/internal/cuclient"
	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

func init() {
	// An event is a marker in the device FIFO: on an idle stream it is still
	// reached only after the work queued on the device before it, so the
	// elapsed time around a launch is that launch's device time.
	children["event-marker"] = func(c *child) {
		c.setup()
		long := loadFunc(c, "long_20000us short_10000us", "long_20000us")
		short := loadFunc(c, "long_20000us short_10000us", "short_10000us")
		c.must("cuStreamCreate", cuclient.Call("cuStreamCreate", out.At(200), 1))
		c.must("cuStreamCreate", cuclient.Call("cuStreamCreate", out.At(208), 1))
		a, b := out.U64(200), out.U64(208)
		c.must("cuEventCreate", cuclient.Call("cuEventCreate", out.At(216), 0))
		c.must("cuEventCreate", cuclient.Call("cuEventCreate", out.At(224), 0))
		e0, e1 := out.U64(216), out.U64(224)
		for i := 0; i < 3; i++ {
			launch(c, long, a) // 60 ms queued on the device
		}
		c.must("record", cuclient.Call("cuEventRecord", e0, b))
		c.want("marker behind the device's queue", cuclient.Call("cuEventQuery", e0), errNotReady)
		launch(c, short, b)
		c.must("record", cuclient.Call("cuEventRecord", e1, b))
		c.must("sync", cuclient.Call("cuStreamSynchronize", b))
		c.must("elapsed", cuclient.Call("cuEventElapsedTime", out.At(300), e0, e1))
		if ms := out.F32(300); ms < 9.9 || ms > 10.5 {
			c.fail("elapsed around a 10 ms launch queued behind 60 ms of other work: %.3f ms, want 10", ms)
		}
	}

	// cuLaunchCooperativeKernelMultiDevice: one kernel per device on created
	// streams; they start together, later work on each stream waits for all.
	children["multi-device"] = func(c *child) {
		c.open(false)
		c.must("cuInit", cuclient.Call("cuInit", 0))
		var ctxs, fs, ss [2]uint64
		for d := 1; d >= 0; d-- {
			c.must("retain", cuclient.Call("cuDevicePrimaryCtxRetain", out.At(0), uint64(d)))
			ctxs[d] = out.U64(0)
			c.must("set", cuclient.Call("cuCtxSetCurrent", ctxs[d]))
			fs[d] = loadFunc(c, "coop_10000us wait_20000us other_10000us", "coop_10000us")
			c.must("cuStreamCreate", cuclient.Call("cuStreamCreate", out.At(0), 1))
			ss[d] = out.U64(0)
		}
		wait := loadFunc(c, "coop_10000us wait_20000us other_10000us", "wait_20000us")   // device 0
		other := loadFunc(c, "coop_10000us wait_20000us other_10000us", "other_10000us") // device 0
		params := cuclient.Alloc(2 * 56)
		set := func(i int, f, s uint64, gx uint32) {
			params.PutU64(56*i, f)
			for k, v := range []uint32{gx, 1, 1, 32, 1, 1, 0} {
				params.PutU32(56*i+8+4*k, v)
			}
			params.PutU64(56*i+40, s)
			params.PutU64(56*i+48, 0)
		}
		multi := func(flags uint64) int {
			return cuclient.Call("cuLaunchCooperativeKernelMultiDevice", params.Ptr(), 2, flags)
		}
		set(0, fs[0], ss[0], 1)
		set(1, fs[1], 0, 1)
		c.want("NULL stream", multi(0), errInvalidValue)
		set(1, fs[0], ss[0], 1)
		c.want("two kernels on one device", multi(0), errInvalidValue)
		set(1, fs[1], ss[1], 2)
		c.want("grids that differ", multi(0), errInvalidValue)
		set(1, fs[1], ss[1], 1)
		c.want("flags", multi(4), errInvalidValue)
		c.want("a function of another context", func() int {
			set(1, fs[0], ss[1], 1)
			defer set(1, fs[1], ss[1], 1)
			return multi(0)
		}(), errInvalidHandle)

		// The lower bounds are the rule (device 1's kernel waits for device
		// 0's earlier work); the upper ones only catch a wait far too long,
		// since a loaded host may launch late and every end moves with it.
		const late = 500e6
		t0 := cuclient.Now()
		launch(c, wait, ss[0]) // 20 ms on device 0's stream first
		c.must("multi", multi(0))
		launch(c, other, ss[0]) // after both cooperative kernels
		c.must("sync device 1", cuclient.Call("cuStreamSynchronize", ss[1]))
		if d := cuclient.Now() - t0; d < 30e6 || d > 30e6+late {
			c.fail("device 1's kernel done after %.1f ms, want 30 (it starts with device 0's, after the 20 ms ahead there)", float64(d)/1e6)
		}
		c.must("sync device 0", cuclient.Call("cuStreamSynchronize", ss[0]))
		if d := cuclient.Now() - t0; d < 40e6 || d > 40e6+late {
			c.fail("device 0's stream done after %.1f ms, want 40", float64(d)/1e6)
		}
		busy, r := cuclient.BusyNs(1, t0, cuclient.Now())
		c.want("simgpu_busy_ns", r, cudaSuccess)
		if busy < 10e6 || busy > 10.5e6 {
			c.fail("device 1 busy %d ns, want 10 ms", busy)
		}
	}
}

func init() {
	// Thread B queries an event while thread A captures in GLOBAL mode: refused,
	// and A's capture is invalidated; in RELAXED mode B may.
	children["capture-unsafe"] = func(c *child) {
		const errCaptureUnsupported, errCaptureInvalidated = 900, 901
		c.setup()
		ctx := out.U64(0)
		f := loadFunc(c, "busy_1000us", "busy_1000us")
		c.must("cuStreamCreate", cuclient.Call("cuStreamCreate", out.At(200), 1))
		c.must("cuStreamCreate", cuclient.Call("cuStreamCreate", out.At(208), 1))
		capS, other := out.U64(200), out.U64(208)
		c.must("cuEventCreate", cuclient.Call("cuEventCreate", out.At(216), 0))
		ev := out.U64(216)
		c.must("record", cuclient.Call("cuEventRecord", ev, other))
		inThreadB := func(relaxed bool) (query, sync int) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				m := cuclient.Alloc(8)
				defer m.Free()
				c.must("set", cuclient.Call("cuCtxSetCurrent", ctx))
				if relaxed {
					m.PutU32(0, 2) // CU_STREAM_CAPTURE_MODE_RELAXED
					c.must("exchange", cuclient.Call("cuThreadExchangeStreamCaptureMode", m.Ptr()))
				}
				query = cuclient.Call("cuEventQuery", ev)
				sync = cuclient.Call("cuEventSynchronize", ev)
			}()
			<-done
			return
		}
		for _, relaxed := range []bool{false, true} {
			c.must("begin", cuclient.Call("cuStreamBeginCapture", capS, 0)) // GLOBAL
			launch(c, f, capS)
			q, s := inThreadB(relaxed)
			end := cuclient.Call("cuStreamEndCapture", capS, out.At(300))
			if relaxed {
				c.want("cuEventQuery in a RELAXED thread during a GLOBAL capture", q, cudaSuccess)
				c.want("cuEventSynchronize in a RELAXED thread during a GLOBAL capture", s, cudaSuccess)
				c.want("the capture", end, cudaSuccess)
			} else {
				c.want("cuEventQuery in another thread during a GLOBAL capture", q, errCaptureUnsupported)
				c.want("cuEventSynchronize in another thread during a GLOBAL capture", s, errCaptureUnsupported)
				c.want("the capture after an unsafe call", end, errCaptureInvalidated)
			}
		}
		// the capturing thread itself, and no capture at all
		c.must("begin", cuclient.Call("cuStreamBeginCapture", capS, 1)) // THREAD_LOCAL
		c.want("cuEventQuery in the capturing thread", cuclient.Call("cuEventQuery", ev), errCaptureUnsupported)
		c.want("the capture", cuclient.Call("cuStreamEndCapture", capS, out.At(300)), errCaptureInvalidated)
		c.want("cuEventQuery with no capture", cuclient.Call("cuEventQuery", ev), cudaSuccess)
	}
}

func TestCaptureForbidsUnsafeCalls(t *testing.T) {
	runChild(t, newRoot(t, simroot.Options{}), "capture-unsafe")
}

func TestEventIsADeviceMarker(t *testing.T) {
	runChild(t, newRoot(t, simroot.Options{}), "event-marker")
}

func TestCooperativeMultiDeviceLaunch(t *testing.T) {
	runChild(t, newRoot(t, simroot.Options{Devices: make([]simroot.Device, 2)}), "multi-device")
}
