package quotaparse

import (
	"os"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/quota"
)

// design is the quota example of docs/design.md, the fixture the Go parser's
// test reads too (internal/quota/testdata).
var design = func() string {
	b, err := os.ReadFile("../../../internal/quota/testdata/design.quota")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// spatial is the version 3 fixture (a device shared through MPS), read by
// the Go parser's test too.
var spatial = func() string {
	b, err := os.ReadFile("../../../internal/quota/testdata/spatial.quota")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func TestSpatialExample(t *testing.T) {
	q, err := Parse([]byte(spatial))
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Devices) != 1 || !q.Devices[0].Spatial || q.Devices[0].MPSPipe != "/run/vgpu/mps" || q.Devices[0].Compute != 50 ||
		q.Devices[0].ComputeRequest != 50 || q.Devices[0].Phase != -1 || q.Devices[0].Memory != 2<<30 {
		t.Errorf("devices %+v", q.Devices)
	}
	// Versions 1 and 2 still read, with no device spatial.
	for _, f := range []string{"design.quota", "v1.quota"} {
		b, err := os.ReadFile("../../../internal/quota/testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		q, err := Parse(b)
		if err != nil || q.Devices[0].Spatial || q.Devices[0].MPSPipe != "" {
			t.Errorf("%s: %+v, %v", f, q, err)
		}
	}
}

func TestDesignExample(t *testing.T) {
	q, err := Parse([]byte(design))
	if err != nil {
		t.Fatal(err)
	}
	if q.DriverCuda != "/usr/lib/vgpu/driver/libcuda.so.580.95.05" || q.SharedDir != "/run/vgpu/shared" || q.LogLevel != 1 {
		t.Errorf("parsed %+v", q)
	}
	if len(q.Devices) != 2 || !q.Devices[0].HasMemory || q.Devices[0].Memory != 2<<30 || q.Devices[0].Compute != 50 || q.Devices[0].Phase != 0 || q.Devices[1].Phase != -1 ||
		q.Devices[1].HasMemory || q.Devices[1].Compute != 100 {
		t.Errorf("devices %+v", q.Devices)
	}
	if q.ComputePeriodMS != -1 {
		t.Errorf("compute-period %d without the directive, want -1", q.ComputePeriodMS)
	}
	q, err = Parse([]byte(strings.Replace(design, "log-level warn\n", "log-level warn\ncompute-period 250\n", 1)))
	if err != nil || q.ComputePeriodMS != 250 {
		t.Errorf("compute-period 250: %+v, %v", q, err)
	}
}

func TestErrors(t *testing.T) {
	base := "vgpu-quota 1\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /c\n"
	base2 := strings.Replace(base, "vgpu-quota 1", "vgpu-quota 2", 1)
	base3 := strings.Replace(base, "vgpu-quota 1", "vgpu-quota 3", 1)
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"vgpu-quota 4\n", `line 1: unsupported quota file version "4"`},
		{"vgpu-quota 0\n", `line 1: unsupported quota file version "0"`},
		{base2 + "device 0 GPU-x mode=spatial mps_pipe=/p\n", "unknown or repeated device option"}, // not in version 2
		{base3 + "device 0 GPU-x mode=spatial\n", "mode=spatial and mps_pipe= go together"},
		{base3 + "device 0 GPU-x mps_pipe=/p\n", "mode=spatial and mps_pipe= go together"},
		{base3 + "device 0 GPU-x mode=time mps_pipe=/p\n", `bad mode "time"`},
		{base3 + "device 0 GPU-x mode=spatial mps_pipe=rel\n", "bad mps_pipe"},
		{base3 + "device 0 GPU-x mode=spatial mps_pipe=\n", "bad mps_pipe"},
		{base3 + "device 0 GPU-x mode=spatial mode=spatial mps_pipe=/p\n", "repeated device option"},
		{base3 + "device 0 GPU-x compute=50 compute-request=20 mode=spatial mps_pipe=/p\n", "no compute-request or phase"},
		{base3 + "device 0 GPU-x phase=2 mode=spatial mps_pipe=/p\n", "no compute-request or phase"},
		{base3 + "device 0 GPU-x mode=spatial mps_pipe=/" + strings.Repeat("p", 1100) + "\n", "bad mps_pipe"},
		{base3 + "device 0 GPU-x mode=spatial mps_pipe=/" + strings.Repeat("p", 1600) + "\n", "line too long"},
		{"vgpu-quota 22\n", `line 1: unsupported quota file version "22"`},
		{base + "device 0 GPU-x compute-request=30\n", "unknown or repeated device option"}, // not in version 1
		{base2 + "device 0 GPU-x compute=30 compute-request=40\n", "compute-request 40 above compute 30"},
		{base2 + "device 0 GPU-x compute-request=101\n", "bad compute-request"},
		{base2 + "device 0 GPU-x compute-request=1 compute-request=1\n", "repeated device option"},
		{base2 + "device 0 GPU-x memory=5 memory-request=6\n", "memory-request 6 above memory 5"},
		{base2 + "device 0 GPU-x memory-request=0\n", "bad memory-request"},
		{base2 + "device 0 GPU-x memory-request=9223372036854775808\n", "bad memory-request"},
		{base2 + "device 0 GPU-x memory=1 memory-request=1 compute=2 compute-request=1 phase=3 x=4\n", "device wants"},
		{base3 + "device 0 GPU-x memory=1 memory-request=1 compute=2 compute-request=1 phase=3 mode=spatial mps_pipe=/p x=4\n", "too many fields"},
		{"driver-cuda /a\n", "line 1: first directive"},
		{base + "bogus 1\n", `line 5: unknown directive "bogus"`},
		{base + "log-level loud\n", "line 5: bad log-level"},
		{base + "compute-period 2001\n", "line 5: bad compute-period"},
		{base + "compute-period 05\n", "line 5: bad compute-period"},
		{base + "compute-period 5ms\n", "line 5: bad compute-period"},
		{base + "compute-period 5\ncompute-period 5\n", "line 6: compute-period given twice"},
		{base + "device 1 GPU-x\n", "line 5: device index 1 out of order"},
		{base + "device 0 GPU-x memory=0\n", "line 5: bad memory"},
		{base + "device 0 GPU-x memory=-1\n", "line 5: bad memory"},
		{base + "device 0 GPU-x memory=18446744073709551616\n", "line 5: bad memory"},
		{base + "device 0 GPU-x compute=101\n", "line 5: bad compute"},
		{base + "device 0 GPU-x compute=30 phase=100\n", "line 5: bad phase"},
		{base + "device 0 GPU-x phase=07\n", "line 5: bad phase"},
		{base + "device 0 GPU-x phase=1 phase=2\n", "repeated device option"},
		{base + "device 0 GPU-x memory=1 compute=2 phase=3 x=4\n", "device wants"},
		{base + "device 0 GPU-x memory=1 memory=2\n", "repeated device option"},
		{base + "device 0 GPU-x\ndevice 1 GPU-x\n", "listed twice"},
		{base + "device 0 NOTAUUID\n", "bad device UUID"},
		{base + "device  0 GPU-x\n", "single spaces"},
		{base + "device 0 GPU-x \n", "single spaces"},
		{base + "device\t0 GPU-x\n", "invalid character 0x09"},
		{base + "shared-dir /d\n", "shared-dir given twice"},
		{"vgpu-quota 1\ndriver-cuda rel\n", "absolute path"},
		{"vgpu-quota 1\ndriver-cuda /a\ndriver-nvml /b\n", "missing shared-dir"},
		{base + "x\r\n", "invalid character 0x0d"},
	} {
		_, err := Parse([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", c.in, err, c.want)
		}
	}
}

// The Go writer (internal/quota) and reader must agree with this parser.
func FuzzParse(f *testing.F) {
	f.Add([]byte(design))
	f.Add([]byte("vgpu-quota 1\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /c\ndevice 0 GPU-1 memory=1\n"))
	f.Add([]byte("vgpu-quota 1\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /c\ncompute-period 0\ndevice 0 GPU-1 compute=30\n"))
	f.Add([]byte("vgpu-quota 1\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /c\ncompute-period 250\ndevice 0 GPU-1 memory=5 compute=30 phase=70\n"))
	f.Add([]byte("vgpu-quota 2\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /c\ndevice 0 GPU-1 memory=5 memory-request=4 compute=60 compute-request=30 phase=70\n"))
	f.Add([]byte("vgpu-quota 2\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /c\ndevice 0 GPU-1 compute-request=0\n"))
	f.Add([]byte(spatial))
	f.Add([]byte("vgpu-quota 3\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /c\ndevice 0 GPU-1 memory=5 compute=30 mode=spatial mps_pipe=/p\ndevice 1 GPU-2 phase=3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := Parse(data)
		gq, gerr := quota.Parse(data)
		if (err == nil) != (gerr == nil) {
			t.Fatalf("C parser: %v, Go parser: %v, input %q", err, gerr, data)
		}
		if err != nil {
			return
		}
		gp := -1
		if gq.ComputePeriodMS != nil {
			gp = *gq.ComputePeriodMS
		}
		if q.DriverCuda != gq.DriverCuda || q.DriverNvml != gq.DriverNvml || q.SharedDir != gq.SharedDir ||
			q.ComputePeriodMS != gp || len(q.Devices) != len(gq.Devices) {
			t.Fatalf("C %+v, Go %+v", q, gq)
		}
		for i, d := range q.Devices {
			g := gq.Devices[i]
			if d.UUID != g.GPU.UUID || d.HasMemory != (g.Memory != 0) || d.Memory != g.Memory ||
				d.Compute != g.Compute || d.ComputeRequest != g.Request() || d.MemoryRequest != g.MemoryRequest ||
				(g.Phase == nil) != (d.Phase == -1) || (g.Phase != nil && *g.Phase != d.Phase) ||
				d.Spatial != g.Mode.IsSpatial() || d.MPSPipe != g.MPSPipe {
				t.Fatalf("device %d: C %+v, Go %+v", i, d, g)
			}
		}
	})
}
