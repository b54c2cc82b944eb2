package config

import (
	"time"

	"encoding/json"
	"regexp"

	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

func TestExampleIsDefault(t *testing.T) {
	data, err := os.ReadFile("../../configs/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("configs/config.toml differs from Default():\n%+v\n%+v", c, Default())
	}
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadMissing(t *testing.T) {
	c, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatal(c, err)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, doc, err string
		check          func(*Config) bool
	}{
		{name: "empty", doc: "", check: func(c *Config) bool { return reflect.DeepEqual(c, Default()) }},
		{name: "simulator", doc: "[driver]\nroot = \"/b/root\"\ndev_root = \"/b/root\"\nipc_paths = [\"run/simgpu\"]\n",
			check: func(c *Config) bool {
				return c.Driver.Root == "/b/root" && c.DevPath("nvidia0") == "/b/root/dev/nvidia0" && reflect.DeepEqual(c.Driver.IPCPaths, []string{"run/simgpu"}) && len(c.Driver.LibDirs) == 6
			}},
		{name: "defaults", doc: "[defaults]\nmemory_limit = \"4Gi\"\ncompute_limit = 50\nvisible_devices = \"all\"\n",
			check: func(c *Config) bool {
				return c.MemoryDefault() == 4<<30 && c.Defaults.ComputeLimit == 50 && c.RequestDefaults().VisibleDevices == "all"
			}},
		{name: "unknown key", doc: "state_dir = \"/x\"\n\n[driver]\nrot = \"/\"\n", err: `line 4, column 1: unknown key "driver.rot"`},
		{name: "unknown table", doc: "[drivers]\nroot = \"/\"\n", err: `unknown key "drivers`},
		{name: "syntax", doc: "state_dir = \n", err: "line 1"},
		{name: "type", doc: "runtimes = \"runc\"\n", err: "line 1"},
		{name: "relative state", doc: "state_dir = \"run/vgpu\"\n", err: "state_dir: \"run/vgpu\" must be an absolute path"},
		{name: "abs lib dir", doc: "[driver]\nlib_dirs = [\"/usr/lib\"]\n", err: "driver.lib_dirs"},
		{name: "dotdot", doc: "[driver]\nipc_paths = [\"../etc\"]\n", err: "must not contain a .. element"},
		{name: "no runtimes", doc: "runtimes = []\n", err: "runtimes: must name"},
		{name: "missing libcuda", doc: "[driver]\nlibraries = [\"libnvidia-ml\"]\n", err: "must include libcuda"},
		{name: "level", doc: "[log]\nlevel = \"loud\"\n", err: "log.level"},
		{name: "lib level", doc: "[library]\nlog_level = \"trace\"\n", err: "library.log_level"},
		{name: "period", doc: "[library]\ncompute_period = \"250ms\"\n", check: func(c *Config) bool { return c.Library.ComputePeriod == "250ms" }},
		{name: "long period", doc: "[library]\ncompute_period = \"3s\"\n", err: "library.compute_period: compute period \"3s\": want whole milliseconds from 0 to 2000ms"},
		{name: "bad period", doc: "[library]\ncompute_period = \"fast\"\n", err: "library.compute_period"},
		{name: "memory", doc: "[defaults]\nmemory_limit = \"lots\"\n", err: "defaults.memory_limit: \"lots\""},
		{name: "compute", doc: "[defaults]\ncompute_limit = 101\n", err: "defaults.compute_limit"},
		{name: "visible", doc: "[defaults]\nvisible_devices = \"x\"\n", err: "defaults.visible_devices"},
		{name: "priority", doc: "[defaults]\npriority = \"low\"\n", check: func(c *Config) bool { return c.DefaultPriority() == tenant.Low }},
		{name: "priority unset", doc: "", check: func(c *Config) bool { return c.DefaultPriority() == tenant.Normal }},
		{name: "bad priority", doc: "[defaults]\npriority = \"urgent\"\n", err: `defaults.priority: "urgent": use high, normal or low`},
		{name: "priority classes", doc: "[kubernetes]\npriority_classes = { \"system-node-critical\" = \"high\", \"batch\" = \"low\" }\n", check: func(c *Config) bool {
			hi, ok1 := c.ClassPriority("system-node-critical")
			lo, ok2 := c.ClassPriority("batch")
			_, ok3 := c.ClassPriority("other")
			return hi == tenant.High && ok1 && lo == tenant.Low && ok2 && !ok3
		}},
		{name: "bad priority class", doc: "[kubernetes]\npriority_classes = { \"online\" = \"top\" }\n", err: `kubernetes.priority_classes: "online" = "top": use high, normal or low`},
		{name: "spread", doc: "[kubernetes]\nplacement = \"spread\"\n", check: func(c *Config) bool { return c.Kubernetes.Placement == PlacementSpread }},
		{name: "borrow free", doc: "memory_borrow = \"free\"\n", check: func(c *Config) bool { return c.BorrowFree() }},
		{name: "borrow default", doc: "", check: func(c *Config) bool { return !c.BorrowFree() }},
		{name: "borrow bad", doc: "memory_borrow = \"any\"\n", err: `memory_borrow: "any": use "default"`},
		{name: "reclaim default", doc: "", check: func(c *Config) bool {
			return c.SuspendWanted() && c.SuspendHostMemory(10<<30) == 5<<30 && c.SuspendMaxTime() == 0 && c.Suspend.RestoreOrder == RestoreLongest
		}},
		{name: "reclaim kill", doc: "memory_reclaim = \"kill\"\n", check: func(c *Config) bool { return !c.SuspendWanted() }},
		{name: "reclaim bad", doc: "memory_reclaim = \"swap\"\n", err: `memory_reclaim: "swap": use "suspend"`},
		{name: "suspend sizes", doc: "[suspend]\nhost_memory = \"8Gi\"\nmax_time = \"30m\"\nrestore_order = \"fits\"\n", check: func(c *Config) bool {
			return c.SuspendHostMemory(100<<30) == 8<<30 && c.SuspendMaxTime() == 30*time.Minute && c.Suspend.RestoreOrder == RestoreFits
		}},
		{name: "suspend percent", doc: "[suspend]\nhost_memory = \"25%\"\n", check: func(c *Config) bool { return c.SuspendHostMemory(8<<30) == 2<<30 }},
		{name: "suspend host_memory bad", doc: "[suspend]\nhost_memory = \"lots\"\n", err: `suspend.host_memory: "lots": use a size`},
		{name: "suspend host_memory zero", doc: "[suspend]\nhost_memory = \"0\"\n", err: `suspend.host_memory: "0": use a size`},
		{name: "suspend host_memory pct", doc: "[suspend]\nhost_memory = \"150%\"\n", err: `suspend.host_memory: "150%": a percentage`},
		{name: "suspend max_time bad", doc: "[suspend]\nmax_time = \"soon\"\n", err: `suspend.max_time: "soon": use a duration`},
		{name: "suspend max_time negative", doc: "[suspend]\nmax_time = \"-1m\"\n", err: `suspend.max_time: "-1m"`},
		{name: "suspend order bad", doc: "[suspend]\nrestore_order = \"random\"\n", err: `suspend.restore_order: "random": use "longest"`},
		{name: "placement", doc: "[kubernetes]\nplacement = \"random\"\n", err: `kubernetes.placement: "random": use "binpack"`},
		{name: "memory_limit none", doc: "[kubernetes]\nmemory_limit = \"none\"\n", check: func(c *Config) bool { return c.Kubernetes.MemoryLimit == MemoryLimitNone }},
		{name: "memory_limit size", doc: "[kubernetes]\nmemory_limit = \"32Gi\"\n", check: func(c *Config) bool { return c.Kubernetes.MemoryLimit == "32Gi" }},
		{name: "memory_limit default", doc: "", check: func(c *Config) bool { return c.Kubernetes.MemoryLimit == MemoryLimitRequest }},
		{name: "memory_limit bad", doc: "[kubernetes]\nmemory_limit = \"lots\"\n", err: `kubernetes.memory_limit: "lots": `},
		{name: "binary", doc: "[driver]\nbinaries = [\"bin/nvidia-smi\"]\n", err: "plain file name"},
		{name: "spatial", doc: "[spatial]\ngpus = [\"GPU-5e3b6a2e-0000-4000-8000-000000000000\", \"1\"]\nmps_control = \"/opt/nv/nvidia-cuda-mps-control\"\n",
			check: func(c *Config) bool {
				return c.IsSpatial(0, "GPU-5e3b6a2e-0000-4000-8000-000000000000") && c.IsSpatial(1, "GPU-x") && !c.IsSpatial(2, "GPU-y") && c.Spatial.MPSControl == "/opt/nv/nvidia-cuda-mps-control"
			}},
		{name: "time only", doc: "", check: func(c *Config) bool {
			return !c.IsSpatial(0, "GPU-x") && c.Spatial.MPSControl == "nvidia-cuda-mps-control"
		}},
		{name: "spatial mig", doc: "[spatial]\ngpus = [\"MIG-1\"]\n", err: `spatial.gpus: "MIG-1" is a MIG instance`},
		{name: "spatial twice", doc: "[spatial]\ngpus = [\"0\", \"0\"]\n", err: `spatial.gpus: "0" listed twice`},
		{name: "spatial name", doc: "[spatial]\ngpus = [\"first\"]\n", err: `spatial.gpus: "first": name a GPU by its UUID (GPU-…) or its host index`},
		{name: "spatial index", doc: "[spatial]\ngpus = [\"01\"]\n", err: `spatial.gpus: "01"`},
		{name: "spatial uuid", doc: "[spatial]\ngpus = [\"GPU-\"]\n", err: `spatial.gpus: "GPU-" is not a GPU UUID`},
		{name: "spatial mode", doc: "[spatial]\ngpus = \"0\"\n", err: "line 2"},
		{name: "mps control", doc: "[spatial]\nmps_control = \"bin/mps\"\n", err: `spatial.mps_control: "bin/mps" must be a plain file name`},
		{name: "unknown spatial", doc: "[spatial]\nmode = \"time\"\n", err: `unknown key "spatial.mode"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("%+v", c)
			}
		})
	}
}

func TestLoadError(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(p, []byte("bogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 1") {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	data, _ := os.ReadFile("../../configs/config.toml")
	f.Add(data)
	f.Add([]byte("[driver]\nroot = \"/x\"\n"))
	f.Add([]byte("[spatial]\ngpus = [\"0\", \"GPU-1\"]\nmps_control = \"/x/mps\"\n"))
	f.Add([]byte("memory_reclaim = \"suspend\"\n[suspend]\nhost_memory = \"33.5%\"\nmax_time = \"1h\"\nrestore_order = \"fits\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid config: %v", err)
		}
	})
}

func TestSnippetsParse(t *testing.T) {
	for _, f := range []string{"containerd-v2.toml", "containerd-v3.toml"} {
		data, err := os.ReadFile("../../configs/" + f)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := toml.Unmarshal(data, &m); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if !regexp.MustCompile(`BinaryName = ["']/usr/local/bin/vgpu-runtime["']`).Match(data) {
			t.Errorf("%s: no BinaryName", f)
		}
	}
	for _, f := range []string{"docker-daemon.json", "podman-hooks.d-vgpu.json"} {
		data, err := os.ReadFile("../../configs/" + f)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestParseComputePeriod(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // -1: nil
		err  bool
	}{
		{"", -1, false}, {"0", 0, false}, {"5ms", 5, false}, {"1s", 1000, false}, {"2s", 2000, false},
		{"2001ms", 0, true}, {"-1ms", 0, true}, {"1.5ms", 0, true}, {"500", 0, true}, {"lots", 0, true},
	} {
		got, err := ParseComputePeriod(tc.in)
		switch {
		case tc.err:
			if err == nil || !strings.Contains(err.Error(), strconv.Quote(tc.in)) {
				t.Errorf("%q: err %v, want one naming the value", tc.in, err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.want < 0 && got != nil, tc.want >= 0 && (got == nil || *got != tc.want):
			t.Errorf("%q: got %v, want %d", tc.in, got, tc.want)
		}
	}
}

func FuzzParseComputePeriod(f *testing.F) {
	for _, s := range []string{"", "0", "5ms", "2s", "1h", "-3ms"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseComputePeriod(s)
		if err == nil && p != nil && (*p < 0 || *p > contract.PeriodMaxMS) {
			t.Fatalf("%q: accepted %d ms", s, *p)
		}
	})
}
