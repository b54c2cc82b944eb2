package quota

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// designFixture is the quota example of docs/design.md, shared with the C
// parser's test (lib/cudahook/quotaparse).
const designFixture = "testdata/design.quota"

func designExample(t testing.TB) string {
	b, err := os.ReadFile(designFixture)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseDesignExample(t *testing.T) {
	designExample := designExample(t)
	q, err := Parse([]byte(designExample))
	if err != nil {
		t.Fatal(err)
	}
	if q.DriverCuda != "/usr/lib/vgpu/driver/libcuda.so.580.95.05" || q.SharedDir != "/run/vgpu/shared" || q.LogLevel != "warn" || len(q.Devices) != 2 ||
		q.Devices[0].Memory != 2147483648 || q.Devices[0].Compute != 50 || q.Devices[0].Request() != 30 || q.Devices[1].Request() != 100 || q.Devices[1].Paced() || !q.Devices[0].Paced() || q.Devices[0].Phase == nil || *q.Devices[0].Phase != 0 || q.Devices[1].Phase != nil || q.Devices[1].Memory != 0 || q.Devices[1].Compute != 100 {
		t.Errorf("%+v", q)
	}
	out, err := q.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != strings.Replace(designExample, "vgpu-runtime on the host; read-only in the container", "vgpu on the host; read-only in the container", 1) {
		t.Errorf("Marshal:\n%s", out)
	}
}

// The version 3 fixture (shared with the C parser's test) round-trips, and
// Marshal writes version 2 when no device is spatial, so that the previous
// release's library keeps reading time-sliced containers' files.
func TestSpatialVersion(t *testing.T) {
	b, err := os.ReadFile("testdata/spatial.quota")
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	d := q.Devices[0]
	if q.FormatVersion != 3 || len(q.Devices) != 1 || !d.Mode.IsSpatial() || d.MPSPipe != "/run/vgpu/mps" || d.Compute != 50 || d.Paced() {
		t.Errorf("%+v", q)
	}
	out, err := q.Marshal()
	if err != nil || string(out) != string(b) {
		t.Errorf("Marshal: %v\n%s", err, out)
	}
	q.Devices[0].Mode, q.Devices[0].MPSPipe = tenant.TimeSliced, ""
	out, _ = q.Marshal()
	if !strings.Contains(string(out), "\nvgpu-quota 2\n") || strings.Contains(string(out), "mode=") {
		t.Errorf("a file with no spatial device:\n%s", out)
	}
	for _, f := range []string{"testdata/v1.quota", designFixture} {
		b, _ := os.ReadFile(f)
		if q, err := Parse(b); err != nil || q.Devices[0].Mode.IsSpatial() {
			t.Errorf("%s: %+v %v", f, q, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	head := "vgpu-quota 1\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\n"
	for _, tc := range []struct{ doc, err string }{
		{"", "no \"vgpu-quota 3\""},
		{"vgpu-quota 4\n", `unsupported quota file version "4"`},
		{"vgpu-quota 2\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 GPU-a mode=spatial mps_pipe=/p\n", "unknown or repeated device option"},
		{"vgpu-quota 3\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 GPU-a mode=spatial\n", "go together"},
		{"vgpu-quota 3\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 GPU-a mode=spatial mps_pipe=/p phase=1\n", "no compute-request or phase"},
		{"vgpu-quota 3\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 GPU-a mode=shared mps_pipe=/p\n", `bad mode "shared"`},
		{"vgpu-quota 2\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 GPU-a compute=30 compute-request=31\n", "compute-request 31 above compute 30"},
		{"vgpu-quota 2\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 GPU-a compute-request=101\n", "bad compute-request"},
		{"vgpu-quota 2\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 GPU-a memory=1 memory-request=2\n", "memory-request 2 above memory 1"},
		{"driver-cuda /a\n", "first directive"},
		{"vgpu-quota 1\ndriver-cuda /a\n", "missing driver-nvml"},
		{head + "driver-cuda /a\n", "given twice"},
		{head + "future x\n", `unknown directive "future"`},
		{head + "device 1 GPU-a\n", "out of order"},
		{head + "device 00 GPU-a\n", "bad device index"},
		{head + "device 0 XYZ-a\n", "bad device UUID"},
		{head + "device 0 GPU-a memory=0\n", "bad memory"},
		{head + "device 0 GPU-a compute=101\n", "bad compute"},
		{head + "device 0 GPU-a compute=5 compute=5\n", "repeated"},
		{head + "device 0 GPU-a compute=5 phase=100\n", "bad phase"},
		{head + "device 0 GPU-a phase=-1\n", "bad phase"},
		{head + "device 0 GPU-a phase=5 phase=5\n", "repeated"},
		{head + "device 0 GPU-a memory=1 compute=2 phase=3 x=4\n", "device wants"},
		{head + "device 0 GPU-a\ndevice 1 GPU-a\n", "listed twice"},
		{head + "device 0  GPU-a\n", "single spaces"},
		{head + "device 0 GPU-a \n", "single spaces"},
		{head + "log-level loud\n", "bad log-level"},
		{head + "compute-period 2001\n", "bad compute-period"},
		{head + "compute-period -1\n", "bad compute-period"},
		{head + "compute-period 1\ncompute-period 1\n", "given twice"},
		{head + "shared-dir\trel\n", "invalid character"},
		{"vgpu-quota 1\ndriver-cuda rel\n", "absolute path"},
		{head + "device 0 GPU-é\n", "invalid character"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: err %v, want %q", tc.doc, err, tc.err)
		}
	}
	// Accepted like the C parser: blank lines, no final newline, no device.
	if _, err := Parse([]byte("\n# c\nvgpu-quota 1\n\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s")); err != nil {
		t.Error(err)
	}
}

func TestMarshalRefuses(t *testing.T) {
	ok := File{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s", Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: "GPU-1"}, Compute: 100}}}
	for _, tc := range []struct {
		mod func(*File)
		err string
	}{
		{func(q *File) { q.DriverCuda = "/a b" }, "white space"},
		{func(q *File) { q.Devices = nil }, "no device"},
		{func(q *File) { q.Devices[0].Index = 1 }, "index must be 0"},
		{func(q *File) { q.LogLevel = "x" }, "log-level"},
		{func(q *File) { p := 2001; q.ComputePeriodMS = &p }, "compute-period"},
		{func(q *File) { q.Devices[0].GPU.UUID = "GPU-1 memory=1" }, "bad UUID"},
		{func(q *File) { p := 100; q.Devices[0].Phase = &p }, "phase 100 not in 0..99"},
		{func(q *File) { q.Devices[0].Mode = tenant.Spatial }, "mps_pipe: \"\" is not an absolute path"},
		{func(q *File) { q.Devices[0].MPSPipe = "/p" }, "not spatial"},
		{func(q *File) { q.Devices[0].Mode, q.Devices[0].MPSPipe = tenant.Spatial, "/p q" }, "white space"},
		{func(q *File) {
			p := 0
			q.Devices[0].Mode, q.Devices[0].MPSPipe, q.Devices[0].Phase = tenant.Spatial, "/p", &p
		}, "no compute request or phase"},
	} {
		q := ok
		q.Devices = append([]tenant.Device(nil), ok.Devices...)
		tc.mod(&q)
		if _, err := q.Marshal(); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("err %v, want %q", err, tc.err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(designExample(f)))
	f.Add([]byte("vgpu-quota 1\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 MIG-x compute=100\n"))
	f.Add([]byte("vgpu-quota 1\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ncompute-period 250\ndevice 0 GPU-x compute=30\n"))
	f.Add([]byte("vgpu-quota 1\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ncompute-period 250\ndevice 0 GPU-x compute=30 phase=70\n"))
	f.Add([]byte("vgpu-quota 2\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 GPU-x memory=9 memory-request=8 compute-request=0\n"))
	f.Add([]byte("vgpu-quota 3\ndriver-cuda /a\ndriver-nvml /b\nshared-dir /s\ndevice 0 GPU-x memory=9 compute=40 mode=spatial mps_pipe=/run/vgpu/mps\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := Parse(data)
		if err != nil || len(q.Devices) == 0 {
			return
		}
		out, err := q.Marshal()
		if err != nil {
			// Only what the writer is stricter about than the reader.
			for _, d := range q.Devices {
				if d.Memory > 1<<63-1 {
					return
				}
			}
			t.Fatalf("parsed but does not marshal: %v\n%q", err, data)
		}
		q2, err := Parse(out)
		if err != nil {
			t.Fatalf("marshal output does not parse: %v\n%s", err, out)
		}
		for i := range q.Devices {
			a, b := q.Devices[i], q2.Devices[i]
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("round trip: %+v != %+v", a, b)
			}
		}
		if q.DriverCuda != q2.DriverCuda || q.DriverNvml != q2.DriverNvml || q.SharedDir != q2.SharedDir || q.LogLevel != q2.LogLevel {
			t.Fatal("round trip changed a directive")
		}
	})
}

// The quota example of docs/design.md is the fixture both parsers' tests read.
func TestDesignDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```\n"+designExample(t)+"```\n") {
		t.Errorf("docs/design.md's quota example is not %s: change both together", designFixture)
	}
}

// A version 1 file (the previous release's containers) still reads, with
// each request equal to its limit; a version 1 file with a request does not.
func TestParseVersion1(t *testing.T) {
	b, err := os.ReadFile("testdata/v1.quota")
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if q.FormatVersion != 1 || q.Devices[0].Request() != 50 || q.Devices[0].ComputeRequest != nil || q.Devices[1].Paced() {
		t.Errorf("%+v %+v", q, q.Devices[0])
	}
	if _, err := Parse([]byte(strings.Replace(string(b), "000000000001", "000000000001 compute-request=30", 1))); err == nil || !strings.Contains(err.Error(), "compute-request=30") {
		t.Errorf("a version 1 file with a request: %v", err)
	}
}

// Request and limit stay apart: "limit 100 with a request" is paced, a
// request above its limit is refused naming both.
func TestRequestBesideLimit(t *testing.T) {
	r30, r40 := 30, 40
	q := File{DriverCuda: "/a", DriverNvml: "/b", SharedDir: "/s", Devices: []tenant.Device{{Index: 0, GPU: tenant.GPU{UUID: "GPU-1"}, Compute: 100, ComputeRequest: &r30}}}
	out, err := q.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "vgpu-quota 2\n") || !strings.Contains(string(out), "device 0 GPU-1 compute-request=30\n") {
		t.Errorf("%s", out)
	}
	p, err := Parse(out)
	if err != nil || !p.Devices[0].Paced() || p.Devices[0].Compute != 100 || p.Devices[0].Request() != 30 {
		t.Errorf("%+v %v", p, err)
	}
	q.Devices[0].Compute, q.Devices[0].ComputeRequest = 30, &r40
	if _, err := q.Marshal(); err == nil || !strings.Contains(err.Error(), "compute request 40") || !strings.Contains(err.Error(), "30") {
		t.Errorf("request above limit: %v", err)
	}
	q.Devices[0].ComputeRequest, q.Devices[0].Memory, q.Devices[0].MemoryRequest = nil, 1<<30, 2<<30
	if _, err := q.Marshal(); err == nil || !strings.Contains(err.Error(), "memory request") {
		t.Errorf("memory request above limit: %v", err)
	}
}
