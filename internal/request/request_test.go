package request

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	gi := uint64(1 << 30)
	type want struct {
		nil     bool
		all     bool
		devs    []DeviceRef
		memAll  uint64
		memPer  map[int]uint64
		compAll uint64
		compPer map[int]uint64
	}
	for _, tc := range []struct {
		name string
		env  []string
		ann  map[string]string
		def  Defaults
		want want
		err  string
	}{
		{name: "nothing", want: want{nil: true}},
		{name: "unrelated env", env: []string{"PATH=/bin", "NOEQUALS"}, want: want{nil: true}},
		{name: "none", env: []string{"VGPU_VISIBLE_DEVICES=none"}, want: want{nil: true}},
		{name: "void", env: []string{"NVIDIA_VISIBLE_DEVICES=void"}, want: want{nil: true}},
		{name: "empty", env: []string{"VGPU_VISIBLE_DEVICES="}, want: want{nil: true}},
		{name: "all", env: []string{"VGPU_VISIBLE_DEVICES=all"}, want: want{all: true}},
		{name: "nvidia all grants nothing", env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, want: want{nil: true}},
		{name: "nvidia all accepted", env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, def: acceptNvidia, want: want{all: true}},
		{name: "nvidia list accepted", env: []string{"NVIDIA_VISIBLE_DEVICES=1"}, def: acceptNvidia, want: want{devs: []DeviceRef{{Index: 1}}}},
		{name: "nvidia not accepted, default devices", env: []string{"NVIDIA_VISIBLE_DEVICES=1", "VGPU_MEMORY_LIMIT=1Gi"}, def: Defaults{VisibleDevices: "0"}, want: want{devs: []DeviceRef{{Index: 0}}, memAll: gi}},
		{name: "list", env: []string{"VGPU_VISIBLE_DEVICES=1, GPU-abc-01 ,0"}, want: want{devs: []DeviceRef{{Index: 1}, {Index: -1, UUID: "GPU-abc-01"}, {Index: 0}}}},
		{name: "vgpu beats nvidia (cuda images)", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "VGPU_VISIBLE_DEVICES=0"}, def: acceptNvidia, want: want{devs: []DeviceRef{{Index: 0}}}},
		{name: "annotation beats env", env: []string{"VGPU_VISIBLE_DEVICES=all", "VGPU_MEMORY_LIMIT=8Gi"}, ann: map[string]string{AnnotationVisibleDevices: "1", AnnotationMemoryLimit: "1Gi"}, want: want{devs: []DeviceRef{{Index: 1}}, memAll: gi}},
		{name: "annotation none beats env", env: []string{"VGPU_VISIBLE_DEVICES=all"}, ann: map[string]string{AnnotationVisibleDevices: "none"}, want: want{nil: true}},
		{name: "last env wins", env: []string{"VGPU_VISIBLE_DEVICES=all", "VGPU_VISIBLE_DEVICES=0"}, want: want{devs: []DeviceRef{{Index: 0}}}},
		{name: "sizes", env: []string{"VGPU_VISIBLE_DEVICES=0,1,2,3", "VGPU_MEMORY_LIMIT=0=4Gi,1=4096Mi,2=4G,3=512"}, want: want{devs: []DeviceRef{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}}, memPer: map[int]uint64{0: 4 * gi, 1: 4 * gi, 2: 4e9, 3: 512}}},
		{name: "decimal units", env: []string{"VGPU_VISIBLE_DEVICES=all", "VGPU_MEMORY_LIMIT=512M"}, want: want{all: true, memAll: 512e6}},
		{name: "Ki Ti T", env: []string{"VGPU_VISIBLE_DEVICES=all", "VGPU_MEMORY_LIMIT=0=1Ki,1=1Ti,2=1T,3=1K"}, want: want{all: true, memPer: map[int]uint64{0: 1024, 1: 1 << 40, 2: 1e12, 3: 1000}}},
		{name: "compute", env: []string{"VGPU_VISIBLE_DEVICES=all", "VGPU_COMPUTE_LIMIT=50%"}, want: want{all: true, compAll: 50}},
		{name: "compute per device", env: []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_COMPUTE_LIMIT=1=30"}, want: want{devs: []DeviceRef{{Index: 0}, {Index: 1}}, compPer: map[int]uint64{1: 30}}},
		{name: "hami memory", env: []string{"VGPU_VISIBLE_DEVICES=0,1", "CUDA_DEVICE_MEMORY_LIMIT=2g", "CUDA_DEVICE_MEMORY_LIMIT_1=1024m"}, want: want{devs: []DeviceRef{{Index: 0}, {Index: 1}}, memAll: 2 * gi, memPer: map[int]uint64{1: gi}}},
		{name: "hami bytes", env: []string{"VGPU_VISIBLE_DEVICES=0", "CUDA_DEVICE_MEMORY_LIMIT=1048576"}, want: want{devs: []DeviceRef{{Index: 0}}, memAll: 1 << 20}},
		{name: "hami K", env: []string{"VGPU_VISIBLE_DEVICES=0", "CUDA_DEVICE_MEMORY_LIMIT=4K"}, want: want{devs: []DeviceRef{{Index: 0}}, memAll: 4096}},
		{name: "hami sm 0 = no limit", env: []string{"VGPU_VISIBLE_DEVICES=0", "CUDA_DEVICE_SM_LIMIT=0"}, want: want{devs: []DeviceRef{{Index: 0}}, compAll: 100}},
		{name: "hami sm per device", env: []string{"VGPU_VISIBLE_DEVICES=0,1", "CUDA_DEVICE_SM_LIMIT_0=25"}, want: want{devs: []DeviceRef{{Index: 0}, {Index: 1}}, compPer: map[int]uint64{0: 25}}},
		{name: "hami other suffix ignored", env: []string{"VGPU_VISIBLE_DEVICES=0", "CUDA_DEVICE_MEMORY_LIMIT_FOO=x"}, want: want{devs: []DeviceRef{{Index: 0}}}},
		{name: "vgpu and hami agree", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=4Gi", "CUDA_DEVICE_MEMORY_LIMIT=4g"}, want: want{devs: []DeviceRef{{Index: 0}}, memAll: 4 * gi}},
		{name: "annotation beats both", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=4Gi", "CUDA_DEVICE_MEMORY_LIMIT=8g"}, ann: map[string]string{AnnotationMemoryLimit: "1Gi"}, want: want{devs: []DeviceRef{{Index: 0}}, memAll: gi}},
		{name: "default devices", env: []string{"VGPU_MEMORY_LIMIT=1Gi"}, def: Defaults{VisibleDevices: "all"}, want: want{all: true, memAll: gi}},

		{name: "vgpu and hami disagree", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=4Gi", "CUDA_DEVICE_MEMORY_LIMIT=8g"}, err: `VGPU_MEMORY_LIMIT="4Gi" and CUDA_DEVICE_MEMORY_LIMIT="8g" disagree`},
		{name: "compute disagree", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=50", "CUDA_DEVICE_SM_LIMIT=40"}, err: `VGPU_COMPUTE_LIMIT="50" and CUDA_DEVICE_SM_LIMIT="40" disagree`},
		{name: "bad size", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=lots"}, err: `VGPU_MEMORY_LIMIT="lots": not a size; use bytes or a number with Ki, Mi, Gi, Ti, K, M, G, T (e.g. 4Gi), or per device 0=4Gi,1=8Gi`},
		{name: "fraction", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=1.5Gi"}, err: `VGPU_MEMORY_LIMIT="1.5Gi": not a size`},
		{name: "lowercase", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=4gi"}, err: `not a size`},
		{name: "zero size", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=0"}, err: `zero is not a limit`},
		{name: "overflow", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=99999999999Ti"}, err: `too large`},
		{name: "bad per device", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=0=4Gi,x"}, err: `"x" is not INDEX=VALUE`},
		{name: "dup per device", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=0=4Gi,0=1Gi"}, err: `device index 0 is given twice`},
		{name: "index out of range", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_LIMIT=1=4Gi"}, err: `device index 1 is out of range`},
		{name: "hami hex refused", env: []string{"VGPU_VISIBLE_DEVICES=0", "CUDA_DEVICE_MEMORY_LIMIT=0x100"}, err: `CUDA_DEVICE_MEMORY_LIMIT="0x100": not a size; use bytes or a number with a k, m or g suffix`},
		{name: "hami index out of range", env: []string{"VGPU_VISIBLE_DEVICES=0", "CUDA_DEVICE_MEMORY_LIMIT_3=1g"}, err: `device index 3 is out of range`},
		{name: "compute range", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=101"}, err: `VGPU_COMPUTE_LIMIT="101": out of range; use a percentage 1-100`},
		{name: "compute zero", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=0"}, err: `out of range`},
		{name: "request zero says how", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=0"}, err: `VGPU_COMPUTE_REQUEST="0": a request of 0 is not given, it is had: leave the compute request out and give no compute limit either`},
		{name: "request zero per device", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=0=0%"}, err: `"0%": a request of 0 is not given`},
		{name: "request range", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=101"}, err: `VGPU_COMPUTE_REQUEST="101": out of range; use a percentage 1-100`},
		{name: "limit without devices", env: []string{"VGPU_MEMORY_LIMIT=4Gi"}, err: `VGPU_MEMORY_LIMIT="4Gi" given without VGPU_VISIBLE_DEVICES`},
		{name: "limit with only nvidia", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "VGPU_MEMORY_LIMIT=4Gi"}, err: `given without VGPU_VISIBLE_DEVICES: say which GPUs the limit applies to (VGPU_VISIBLE_DEVICES=all, or a list such as 0,1); NVIDIA_VISIBLE_DEVICES is not read unless the host config sets accept_nvidia_visible_devices_envvar = true`},
		{name: "limit with none", env: []string{"VGPU_VISIBLE_DEVICES=none", "VGPU_COMPUTE_LIMIT=5"}, err: `VGPU_COMPUTE_LIMIT="5" given with VGPU_VISIBLE_DEVICES="none"`},
		{name: "bad device", env: []string{"VGPU_VISIBLE_DEVICES=gpu0"}, err: `VGPU_VISIBLE_DEVICES="gpu0": "gpu0" is neither a GPU index nor a GPU UUID; use all, none, void`},
		{name: "annotation bad device", ann: map[string]string{AnnotationVisibleDevices: "0,,1"}, err: `vgpu.io/visible-devices="0,,1": empty entry`},
		{name: "dup device", env: []string{"VGPU_VISIBLE_DEVICES=0,0"}, err: `0 is listed twice`},
		{name: "all in list", env: []string{"VGPU_VISIBLE_DEVICES=0,all"}, err: `cannot be combined`},
		{name: "mig", env: []string{"VGPU_VISIBLE_DEVICES=MIG-1234"}, err: `MIG devices`},
		{name: "negative", env: []string{"VGPU_VISIBLE_DEVICES=-1"}, err: `neither a GPU index`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseWithDefaults(tc.env, tc.ann, tc.def)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.nil {
				if req != nil {
					t.Fatalf("want nil, got %+v", req)
				}
				return
			}
			if req == nil {
				t.Fatal("nil request")
			}
			w := tc.want
			if req.All != w.all || !reflect.DeepEqual(req.Devices, w.devs) || req.Memory.All != w.memAll || req.Compute.All != w.compAll {
				t.Errorf("got %+v", req)
			}
			if len(w.memPer) > 0 || len(req.Memory.PerDevice) > 0 {
				if !reflect.DeepEqual(req.Memory.PerDevice, w.memPer) {
					t.Errorf("memory per device %v want %v", req.Memory.PerDevice, w.memPer)
				}
			}
			if len(w.compPer) > 0 || len(req.Compute.PerDevice) > 0 {
				if !reflect.DeepEqual(req.Compute.PerDevice, w.compPer) {
					t.Errorf("compute per device %v want %v", req.Compute.PerDevice, w.compPer)
				}
			}
		})
	}
}

func TestLimitFor(t *testing.T) {
	l := Limit{All: 5, PerDevice: map[int]uint64{1: 7}}
	if l.For(0) != 5 || l.For(1) != 7 || l.MaxIndex() != 1 {
		t.Error(l)
	}
}

var acceptNvidia = Defaults{AcceptNvidiaVisibleDevices: true}

func FuzzParse(f *testing.F) {
	f.Add("0,1", "4Gi", "50", "", "", "", true)
	f.Add("all", "0=1Gi,1=2G", "0=10", "2g", "0", "", true)
	f.Add("GPU-abc", "", "", "", "", "", true)
	// VGPU_VISIBLE_DEVICES unset: NVIDIA_VISIBLE_DEVICES (then dev) is all
	// that could select a GPU, and must not.
	f.Add("all", "4Gi", "", "", "", "", false)
	f.Add("0", "", "30", "", "", "", false)
	f.Add("0,1", "", "", "", "", "", false)
	// Priorities: each name, per device, and what is not one.
	f.Add("0,1", "", "", "", "", "high", true)
	f.Add("0,1", "", "50", "", "", "0=high,1=low", true)
	f.Add("all", "", "", "", "", "normal", true)
	f.Add("0", "", "", "", "", "HIGH", true)
	f.Add("0", "", "", "", "", "0=high,0=low", true)
	f.Add("0", "", "", "", "", "1=low", true)
	f.Add("0", "", "", "", "", "high", false)
	f.Fuzz(func(t *testing.T, dev, mem, comp, hmem, hsm, prio string, setVgpu bool) {
		env := []string{"VGPU_MEMORY_LIMIT=" + mem, "VGPU_COMPUTE_LIMIT=" + comp, "CUDA_DEVICE_MEMORY_LIMIT=" + hmem, "CUDA_DEVICE_SM_LIMIT_0=" + hsm, "VGPU_PRIORITY=" + prio}
		nv := hmem
		if setVgpu {
			env = append(env, "VGPU_VISIBLE_DEVICES="+dev)
		} else {
			nv = dev
		}
		req, err := Parse(env, map[string]string{AnnotationComputeLimit: comp})
		// Not accepted by the host config, NVIDIA_VISIBLE_DEVICES changes nothing.
		req2, err2 := Parse(append(env, "NVIDIA_VISIBLE_DEVICES="+nv), map[string]string{AnnotationComputeLimit: comp})
		if (err == nil) != (err2 == nil) || fmt.Sprint(req) != fmt.Sprint(req2) {
			t.Fatalf("NVIDIA_VISIBLE_DEVICES=%q changed the request: %v %v / %v %v", nv, req, err, req2, err2)
		}
		// Accepted, it selects what VGPU_VISIBLE_DEVICES would when that is unset.
		if !setVgpu {
			req3, err3 := ParseWithDefaults(append(env, "NVIDIA_VISIBLE_DEVICES="+nv), nil, acceptNvidia)
			req4, err4 := Parse(append(env, "VGPU_VISIBLE_DEVICES="+nv), nil)
			if (err3 == nil) != (err4 == nil) || (req3 == nil) != (req4 == nil) || req3 != nil && fmt.Sprint(req3.Devices, req3.All) != fmt.Sprint(req4.Devices, req4.All) {
				t.Fatalf("accepted NVIDIA_VISIBLE_DEVICES=%q: %v %v, VGPU_VISIBLE_DEVICES=%q: %v %v", nv, req3, err3, nv, req4, err4)
			}
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if req == nil {
			return
		}
		if !req.All && len(req.Devices) == 0 {
			t.Fatal("request with no devices")
		}
		for i := 0; i < 4; i++ {
			if v := req.Priority.For(i); v != 0 && PriorityName(v) == "" {
				t.Fatalf("priority %d accepted for device %d", v, i)
			}
		}
		for _, l := range []Limit{req.Compute} {
			if l.All > 100 {
				t.Fatalf("compute %d", l.All)
			}
			for _, v := range l.PerDevice {
				if v < 1 || v > 100 {
					t.Fatalf("compute %d", v)
				}
			}
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4Gi", "512M", "1", "0", "18446744073709551615", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && (n == 0 || n > 1<<63-1) {
			t.Fatalf("%q -> %d", s, n)
		}
		h, err := parseHAMiSize(s)
		if err == nil && h == 0 {
			t.Fatalf("%q -> 0", s)
		}
	})
}

func TestParsePriority(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		ann  map[string]string
		want []string // by container device, "" = not given
		err  string
	}{
		{name: "none given", env: []string{"VGPU_VISIBLE_DEVICES=0,1"}, want: []string{"", ""}},
		{name: "high", env: []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_PRIORITY=high"}, want: []string{"high", "high"}},
		{name: "low", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_PRIORITY=low"}, want: []string{"low"}},
		{name: "normal", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_PRIORITY=normal"}, want: []string{"normal"}},
		{name: "empty is unset", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_PRIORITY="}, want: []string{""}},
		{name: "per device", env: []string{"VGPU_VISIBLE_DEVICES=0,1,2", "VGPU_PRIORITY=0=high,2=low"}, want: []string{"high", "", "low"}},
		{name: "annotation beats env", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_PRIORITY=high"}, ann: map[string]string{AnnotationPriority: "low"}, want: []string{"low"}},
		{name: "annotation per device", env: []string{"VGPU_VISIBLE_DEVICES=0,1"}, ann: map[string]string{AnnotationPriority: "1=high"}, want: []string{"", "high"}},
		{name: "default devices", env: []string{"VGPU_PRIORITY=high"}, want: []string{"high"}},

		{name: "bad name", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_PRIORITY=urgent"}, err: `VGPU_PRIORITY="urgent": not a priority; use high, normal or low, or per device 0=high,1=low`},
		{name: "case matters", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_PRIORITY=High"}, err: `VGPU_PRIORITY="High": not a priority`},
		{name: "number", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_PRIORITY=1"}, err: `VGPU_PRIORITY="1": not a priority`},
		{name: "bad annotation", env: []string{"VGPU_VISIBLE_DEVICES=0"}, ann: map[string]string{AnnotationPriority: "top"}, err: `vgpu.io/priority="top": not a priority; use high, normal or low`},
		{name: "bad per device value", env: []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_PRIORITY=0=high,1=max"}, err: `VGPU_PRIORITY="0=high,1=max": "max": not a priority`},
		{name: "bad per device form", env: []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_PRIORITY=0=high,low"}, err: `"low" is not INDEX=VALUE`},
		{name: "dup device", env: []string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_PRIORITY=0=high,0=low"}, err: `device index 0 is given twice`},
		{name: "index out of range", env: []string{"VGPU_VISIBLE_DEVICES=0", "VGPU_PRIORITY=1=high"}, err: `VGPU_PRIORITY="1=high": device index 1 is out of range`},
		{name: "without devices", env: []string{"VGPU_PRIORITY=high"}, err: `VGPU_PRIORITY="high" given without VGPU_VISIBLE_DEVICES`},
		{name: "with none", env: []string{"VGPU_VISIBLE_DEVICES=none", "VGPU_PRIORITY=high"}, err: `VGPU_PRIORITY="high" given with VGPU_VISIBLE_DEVICES="none"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := Defaults{}
			if tc.name == "default devices" {
				def.VisibleDevices = "0"
			}
			req, err := ParseWithDefaults(tc.env, tc.ann, def)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				if req != nil {
					t.Fatalf("a request beside the error: %+v", req)
				}
				return
			}
			if err != nil || req == nil {
				t.Fatalf("%v %v", req, err)
			}
			var got []string
			for i := range tc.want {
				got = append(got, req.PriorityFor(i))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("priorities %q, want %q", got, tc.want)
			}
			// ParseAll (the CDI path) reads the same priority.
			l, err := ParseAll(tc.env, tc.ann)
			if err != nil || !l.Priority.equal(req.Priority) {
				t.Errorf("ParseAll: %+v %v, want %+v", l.Priority, err, req.Priority)
			}
		})
	}
}

func TestFromFlagsPriority(t *testing.T) {
	r, err := FromFlags(Flags{Devices: "0,1", Priority: "0=low,1=high"})
	if err != nil || r.PriorityFor(0) != "low" || r.PriorityFor(1) != "high" {
		t.Errorf("%+v %v", r, err)
	}
	r, err = FromFlags(Flags{})
	if err != nil || r.PriorityFor(0) != "" {
		t.Errorf("no --priority: %q %v, want not given", r.PriorityFor(0), err)
	}
	if _, err := FromFlags(Flags{Priority: "urgent"}); err == nil || !strings.Contains(err.Error(), `--priority="urgent": not a priority; use high, normal or low`) {
		t.Errorf("bad --priority: %v", err)
	}
}

func TestFromFlags(t *testing.T) {
	r, err := FromFlags(Flags{})
	if err != nil || r == nil || !r.All || r.Memory.IsSet() || r.Compute.IsSet() {
		t.Errorf("no flags: %+v %v, want all GPUs and no limit", r, err)
	}
	r, err = FromFlags(Flags{Devices: "1,GPU-5e3b6a2e-0000-4000-8000-000000000000", Memory: "0=1Gi,1=2Gi", Compute: "30"})
	if err != nil || len(r.Devices) != 2 || r.Memory.For(1) != 2<<30 || r.Compute.For(0) != 30 {
		t.Errorf("%+v %v", r, err)
	}
	for _, tc := range []struct {
		f    Flags
		want string
	}{
		{Flags{Memory: "4Xi"}, `--memory-limit="4Xi": not a size; use bytes or a number with Ki`},
		{Flags{Compute: "101"}, `--compute-limit="101"`},
		{Flags{Devices: "none"}, `--devices="none": selects no GPU`},
		{Flags{Devices: "x"}, `--devices="x"`},
	} {
		if _, err := FromFlags(tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.f, err, tc.want)
		}
	}
}

func FuzzFromFlags(f *testing.F) {
	f.Add("0,1", "0=4Gi,1=8Gi", "50")
	f.Add("all", "1Ti", "100")
	f.Fuzz(func(t *testing.T, dev, mem, comp string) {
		r, err := FromFlags(Flags{Devices: dev, Memory: mem, Compute: comp})
		if err == nil && (r == nil || (!r.All && len(r.Devices) == 0)) {
			t.Fatalf("accepted %q %q %q without devices: %+v", dev, mem, comp, r)
		}
		if err == nil && r.Compute.IsSet() {
			for i := 0; i < 4; i++ {
				if c := r.Compute.For(i); c > 100 {
					t.Fatalf("compute %d accepted", c)
				}
			}
		}
	})
}

func TestRequests(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		ann  map[string]string
		want string // "" = accepted
	}{
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=30"}, nil, ""},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=30", "VGPU_COMPUTE_LIMIT=60"}, nil, ""},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=30", "VGPU_COMPUTE_LIMIT=30"}, nil, ""},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=50", "VGPU_COMPUTE_LIMIT=30"}, nil,
			`compute request 50% is above its limit 30% on every device (VGPU_COMPUTE_REQUEST="50", VGPU_COMPUTE_LIMIT="30")`},
		{[]string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_COMPUTE_REQUEST=0=20,1=50", "VGPU_COMPUTE_LIMIT=40"}, nil,
			`compute request 50% is above its limit 40% on container device 1`},
		{[]string{"VGPU_VISIBLE_DEVICES=0,1", "VGPU_COMPUTE_REQUEST=20", "VGPU_COMPUTE_LIMIT=0=10"}, nil,
			`compute request 20% is above its limit 10% on container device 0`},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=0"}, nil, `VGPU_COMPUTE_REQUEST="0": a request of 0 is not given`},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=101"}, nil, `VGPU_COMPUTE_REQUEST="101": out of range`},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_REQUEST=4Gi", "VGPU_MEMORY_LIMIT=2Gi"}, nil,
			`memory request 4Gi (4294967296 bytes) is above its limit 2Gi (2147483648 bytes)`},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_MEMORY_REQUEST=0"}, nil, `VGPU_MEMORY_REQUEST="0"`},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=1=30"}, nil, "device index 1 is out of range"},
		{[]string{"VGPU_COMPUTE_REQUEST=30"}, nil, "given without VGPU_VISIBLE_DEVICES"},
		// the annotation wins over the environment
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_REQUEST=90", "VGPU_COMPUTE_LIMIT=40"}, map[string]string{AnnotationComputeRequest: "40"}, ""},
		{[]string{"VGPU_VISIBLE_DEVICES=0", "VGPU_COMPUTE_LIMIT=40"}, map[string]string{AnnotationComputeRequest: "41"}, "compute request 41% is above its limit 40%"},
	} {
		req, err := Parse(tc.env, tc.ann)
		if tc.want == "" {
			if err != nil || req == nil || !req.ComputeRequest.IsSet() && !req.MemoryRequest.IsSet() {
				t.Errorf("%v %v: %v %v", tc.env, tc.ann, req, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err %v, want %q", tc.env, tc.ann, err, tc.want)
		}
	}
	r, err := FromFlags(Flags{Compute: "20", ComputeRequest: "30"})
	if err == nil || !strings.Contains(err.Error(), "compute request 30% is above its limit 20%") || !strings.Contains(err.Error(), "--compute-request") {
		t.Errorf("flags: %v %v", r, err)
	}
	if r, err = FromFlags(Flags{ComputeRequest: "0=30", MemoryRequest: "1Gi"}); err != nil || r.ComputeRequest.For(0) != 30 || r.MemoryRequest.All != 1<<30 {
		t.Errorf("flags: %v %v", r, err)
	}
}

// Requests are parsed as limits are; whatever is accepted is in range and
// never above its limit.
func FuzzRequests(f *testing.F) {
	f.Add("0,1", "50", "30", "4Gi", "2Gi")
	f.Add("0,1", "0=50,1=20", "0=30", "", "0=1Gi")
	f.Fuzz(func(t *testing.T, dev, comp, creq, mem, mreq string) {
		env := []string{"VGPU_VISIBLE_DEVICES=" + dev, "VGPU_COMPUTE_LIMIT=" + comp, "VGPU_COMPUTE_REQUEST=" + creq, "VGPU_MEMORY_LIMIT=" + mem, "VGPU_MEMORY_REQUEST=" + mreq}
		req, err := Parse(env, nil)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if req == nil {
			return
		}
		for i := -1; i < 20; i++ {
			c, r := req.Compute.For(i), req.ComputeRequest.For(i)
			if r > 100 || c > 100 || (c != 0 && r > c) {
				t.Fatalf("device %d: request %d, limit %d accepted", i, r, c)
			}
			m, mr := req.Memory.For(i), req.MemoryRequest.For(i)
			if m != 0 && mr > m {
				t.Fatalf("device %d: memory request %d, limit %d accepted", i, mr, m)
			}
		}
	})
}
