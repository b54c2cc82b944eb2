package request

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// The user interface. One parser reads it for the shim, the hook and the CLI.
//
// Settings and their sources, strongest first (per setting, independently):
//
//	devices: annotation vgpu.io/visible-devices > env VGPU_VISIBLE_DEVICES > env NVIDIA_VISIBLE_DEVICES (only when accepted)
//	memory:  annotation vgpu.io/memory-limit    > env VGPU_MEMORY_LIMIT    | env CUDA_DEVICE_MEMORY_LIMIT[_<i>]
//	compute: annotation vgpu.io/compute-limit   > env VGPU_COMPUTE_LIMIT   | env CUDA_DEVICE_SM_LIMIT[_<i>]
//	compute request: annotation vgpu.io/compute-request > env VGPU_COMPUTE_REQUEST
//	memory request:  annotation vgpu.io/memory-request  > env VGPU_MEMORY_REQUEST
//	priority:        annotation vgpu.io/priority        > env VGPU_PRIORITY
//
//   - An annotation wins over every environment variable, silently: annotations
//     are set by the engine or orchestrator, the environment by the image and the
//     user, so a user cannot raise an orchestrator's limit through env.
//   - NVIDIA_VISIBLE_DEVICES is read only when the host config accepts it
//     (Defaults.AcceptNvidiaVisibleDevices); otherwise it grants nothing.
//   - VGPU_VISIBLE_DEVICES wins over NVIDIA_VISIBLE_DEVICES silently, because
//     NVIDIA's CUDA images bake NVIDIA_VISIBLE_DEVICES=all into their ENV: a
//     conflict there would make every such image fail.
//   - VGPU_MEMORY_LIMIT / VGPU_COMPUTE_LIMIT and their HAMi aliases
//     (CUDA_DEVICE_MEMORY_LIMIT[_<i>], CUDA_DEVICE_SM_LIMIT[_<i>]) are equals: if
//     both are given they must mean the same thing, else it is an error naming both.
//   - A variable listed twice in process.env: the last entry counts.
//
// Devices: "all", "none", "void", "" (unset) or a comma list of indices (host
// NVML indices) and GPU UUIDs (GPU-…). "none", "void" and "" ask for no GPU.
//
// Memory: one size for every visible device, or per device "0=4Gi,1=8Gi"
// where the index is the position in the container's device list. A size is
// plain bytes or a number with Ki, Mi, Gi, Ti (1024-based) or K, M, G, T
// (1000-based). The HAMi aliases keep HAMi-core's units: bytes, or a single
// k/m/g suffix (either case), 1024-based. Devices not named in a per-device
// list get the config default, else no limit.
//
// Compute: a percentage 1–100 ("50" or "50%"), or per device "0=50,1=30".
// HAMi's CUDA_DEVICE_SM_LIMIT=0 means "no limit" (as in HAMi-core) and is read as 100.
//
// Requests (same forms as the limits, per device too): the compute request is
// the share guaranteed under contention, the limit stays the cap. Only a
// limit: the request is the limit. Only a request: the limit is 100 (no
// cap). A request above its limit is an error naming both. The memory
// request is parsed and stored only.
//
// Priority: high, normal or low for every device, or per device
// "0=high,1=low" (devices not named get the config default, else normal).
// It orders work inside the pacing period and lifts no limit; like a
// limit, it needs a device selection.
//
// A limit without a device selection is an error naming VGPU_VISIBLE_DEVICES,
// unless Defaults.VisibleDevices (config: defaults.visible_devices) says
// which devices a bare limit applies to.

// Names of the variables and annotations.
const (
	EnvVisibleDevices       = "VGPU_VISIBLE_DEVICES"
	EnvNvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvMemoryLimit          = "VGPU_MEMORY_LIMIT"
	EnvComputeLimit         = "VGPU_COMPUTE_LIMIT"
	EnvHAMiMemoryLimit      = "CUDA_DEVICE_MEMORY_LIMIT"
	EnvHAMiSMLimit          = "CUDA_DEVICE_SM_LIMIT"
	EnvComputeRequest       = "VGPU_COMPUTE_REQUEST"
	EnvMemoryRequest        = "VGPU_MEMORY_REQUEST"
	EnvPriority             = "VGPU_PRIORITY"

	AnnotationVisibleDevices = "vgpu.io/visible-devices"
	AnnotationMemoryLimit    = "vgpu.io/memory-limit"
	AnnotationComputeLimit   = "vgpu.io/compute-limit"
	AnnotationComputeRequest = "vgpu.io/compute-request"
	AnnotationMemoryRequest  = "vgpu.io/memory-request"
	AnnotationPriority       = "vgpu.io/priority"
)

// DeviceRef names one requested GPU: a host index or a UUID.
type DeviceRef struct {
	Index int    // host (NVML) index; -1 when UUID is set
	UUID  string // "GPU-…"
}

func (d DeviceRef) String() string {
	if d.UUID != "" {
		return d.UUID
	}
	return strconv.Itoa(d.Index)
}

// Limit is a value for every device and/or per container device index.
// Zero values mean "not given".
type Limit struct {
	All       uint64         // applies to every device without an entry in PerDevice
	PerDevice map[int]uint64 // container device index -> value
	Source    string         // e.g. `VGPU_MEMORY_LIMIT="4Gi"`, for messages
}

// IsSet reports whether any value was given.
func (l Limit) IsSet() bool { return l.All != 0 || len(l.PerDevice) != 0 }

// For returns the value for container device i (0 = not given).
func (l Limit) For(i int) uint64 {
	if v, ok := l.PerDevice[i]; ok {
		return v
	}
	return l.All
}

// MaxIndex returns the largest per-device index, or -1.
func (l Limit) MaxIndex() int {
	m := -1
	for i := range l.PerDevice {
		if i > m {
			m = i
		}
	}
	return m
}

func (l Limit) equal(o Limit) bool {
	if l.All != o.All || len(l.PerDevice) != len(o.PerDevice) {
		return false
	}
	for k, v := range l.PerDevice {
		if o.PerDevice[k] != v {
			return false
		}
	}
	return true
}

// Request is what the user asked for. A nil *Request means no GPU.
type Request struct {
	All          bool        // "all": every GPU of the host, in index order
	Devices      []DeviceRef // when !All, in the order given
	DeviceSource string      // e.g. `VGPU_VISIBLE_DEVICES="0,1"`
	Memory       Limit       // bytes
	Compute      Limit       // percent 1..100
	// Requests: the compute share guaranteed under contention (percent
	// 1..100) and the memory request (bytes), beside the limits.
	ComputeRequest Limit
	MemoryRequest  Limit
	// Priority per device, as priorityValues numbers it (PriorityFor
	// reads it by name).
	Priority Limit
	// ComputePhase: where each paced device's stretch starts in the pacing
	// period, percent 0..quota.MaxPhase; nil: the state store assigns one
	// beside the others' (internal/slots). Given only on a command line
	// (vgpu exec --compute-phase), never by a container.
	ComputePhase *int
}

// Defaults fills in what the user left out.
type Defaults struct {
	// VisibleDevices is used when a limit is given without a device
	// selection. Empty: that is an error.
	VisibleDevices string
	// AcceptNvidiaVisibleDevices lets NVIDIA_VISIBLE_DEVICES select GPUs
	// (config: accept_nvidia_visible_devices_envvar, after NVIDIA's
	// accept-nvidia-visible-devices-envvar-when-unprivileged). Off, it is
	// not read at all: every CUDA image bakes NVIDIA_VISIBLE_DEVICES=all into
	// its environment and the runtime cannot tell the image's value from a
	// grant, so it grants nothing.
	AcceptNvidiaVisibleDevices bool
}

// Parse parses env and annotations with no defaults.
func Parse(env []string, annotations map[string]string) (*Request, error) {
	return ParseWithDefaults(env, annotations, Defaults{})
}

type source struct {
	name  string // variable or annotation name
	value string
	set   bool
}

func (s source) String() string { return fmt.Sprintf("%s=%q", s.name, s.value) }

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, e := range env {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			continue
		}
		m[k] = v // last wins
	}
	return m
}

func pick(name string, m map[string]string) source {
	v, ok := m[name]
	return source{name: name, value: v, set: ok}
}

// ParseWithDefaults is Parse with defaults from the config.
func ParseWithDefaults(env []string, annotations map[string]string, d Defaults) (*Request, error) {
	em := envMap(env)

	// Devices.
	var dev source
	sources := []source{pick(AnnotationVisibleDevices, annotations), pick(EnvVisibleDevices, em)}
	if d.AcceptNvidiaVisibleDevices {
		sources = append(sources, pick(EnvNvidiaVisibleDevices, em))
	}
	for _, s := range sources {
		if s.set {
			dev = s
			break
		}
	}

	mem, err := parseMemory(em, annotations)
	if err != nil {
		return nil, err
	}
	comp, err := parseCompute(em, annotations)
	if err != nil {
		return nil, err
	}
	creq, mreq, err := parseRequests(em, annotations)
	if err != nil {
		return nil, err
	}
	if err := CheckRequests(mem, comp, mreq, creq); err != nil {
		return nil, err
	}
	prio, err := parsePriority(em, annotations)
	if err != nil {
		return nil, err
	}

	if !dev.set || isNoDevice(dev.value) {
		if !mem.IsSet() && !comp.IsSet() && !creq.IsSet() && !mreq.IsSet() && !prio.IsSet() {
			return nil, nil
		}
		what := mem.Source
		for _, l := range []Limit{comp, creq, mreq, prio} {
			if what == "" {
				what = l.Source
			}
		}
		if dev.set {
			return nil, fmt.Errorf("%s given with %s: a limit needs GPUs; set %s to all or a list of GPU indices/UUIDs", what, dev, EnvVisibleDevices)
		}
		if d.VisibleDevices == "" {
			hint := ""
			if _, ok := em[EnvNvidiaVisibleDevices]; ok && !d.AcceptNvidiaVisibleDevices {
				hint = fmt.Sprintf("; %s is not read unless the host config sets accept_nvidia_visible_devices_envvar = true", EnvNvidiaVisibleDevices)
			}
			return nil, fmt.Errorf("%s given without %s: say which GPUs the limit applies to (%s=all, or a list such as 0,1)%s", what, EnvVisibleDevices, EnvVisibleDevices, hint)
		}
		dev = source{name: "defaults.visible_devices (config)", value: d.VisibleDevices, set: true}
		if isNoDevice(dev.value) {
			return nil, fmt.Errorf("%s given, but %s selects no GPU", what, dev)
		}
	}

	req := &Request{DeviceSource: dev.String(), Memory: mem, Compute: comp, ComputeRequest: creq, MemoryRequest: mreq, Priority: prio}
	if err := parseDevices(dev, req); err != nil {
		return nil, err
	}
	if !req.All {
		n := len(req.Devices)
		for _, l := range []Limit{mem, comp, creq, mreq, prio} {
			if m := l.MaxIndex(); m >= n {
				return nil, fmt.Errorf("%s: device index %d is out of range: %s gives the container %d device(s), indices 0..%d", l.Source, m, dev, n, n-1)
			}
		}
	}
	return req, nil
}

func isNoDevice(v string) bool {
	v = strings.TrimSpace(v)
	return v == "" || v == "none" || v == "void"
}

const devicesHelp = "use all, none, void, or a comma list of GPU indices and UUIDs (e.g. 0,1 or GPU-5e3b6a2e-…)"

func parseDevices(s source, req *Request) error {
	v := strings.TrimSpace(s.value)
	if v == "all" {
		req.All = true
		return nil
	}
	seen := map[string]bool{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		var ref DeviceRef
		switch {
		case item == "":
			return fmt.Errorf("%s: empty entry in the list; %s", s, devicesHelp)
		case item == "all" || item == "none" || item == "void":
			return fmt.Errorf("%s: %q cannot be combined with other entries; %s", s, item, devicesHelp)
		case isDigits(item):
			n, err := strconv.Atoi(item)
			if err != nil || n > 1<<16 {
				return fmt.Errorf("%s: index %q is too large; %s", s, item, devicesHelp)
			}
			ref = DeviceRef{Index: n}
		case validUUID(item):
			ref = DeviceRef{Index: -1, UUID: item}
		case strings.HasPrefix(item, "MIG-"):
			return fmt.Errorf("%s: MIG devices (%s) are not supported; %s", s, item, devicesHelp)
		default:
			return fmt.Errorf("%s: %q is neither a GPU index nor a GPU UUID; %s", s, item, devicesHelp)
		}
		key := ref.String()
		if seen[key] {
			return fmt.Errorf("%s: %s is listed twice", s, key)
		}
		seen[key] = true
		req.Devices = append(req.Devices, ref)
	}
	return nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validUUID accepts GPU-<hex and dashes>, as NVML prints them.
func validUUID(s string) bool {
	rest, ok := strings.CutPrefix(s, "GPU-")
	if !ok || len(rest) < 1 || len(rest) > 64 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return false
		}
	}
	return true
}

// ---- sizes ----

const sizeHelp = "use bytes or a number with Ki, Mi, Gi, Ti, K, M, G, T (e.g. 4Gi), or per device 0=4Gi,1=8Gi"
const hamiSizeHelp = "use bytes or a number with a k, m or g suffix (1024-based, as HAMi-core reads it)"

var sizeUnits = []struct {
	suffix string
	mult   uint64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

// ParseSize parses a vgpu size: plain bytes or a number with a unit suffix.
// Zero is refused (to mean "no limit", leave the limit out).
func ParseSize(s string) (uint64, error) {
	num, mult := s, uint64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	return scaled(num, mult)
}

func scaled(num string, mult uint64) (uint64, error) {
	if !isDigits(num) {
		return 0, fmt.Errorf("not a size")
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("too large")
	}
	hi, lo := bits.Mul64(n, mult)
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("too large")
	}
	if lo == 0 {
		return 0, fmt.Errorf("zero is not a limit (leave the limit out for none)")
	}
	return lo, nil
}

// parseHAMiSize follows HAMi-core's get_limit_from_env: a decimal number of
// bytes, or one trailing k/m/g (K/M/G), 1024-based. (HAMi-core's strtoul also
// lets hex and octal through; we do not.)
func parseHAMiSize(s string) (uint64, error) {
	mult := uint64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult != 1 {
			s = s[:len(s)-1]
		}
	}
	return scaled(s, mult)
}

// parseRequestPercent is parsePercent for a compute request, with the way
// to say none: a request of 0 is had, not given.
func parseRequestPercent(s string) (uint64, error) {
	if strings.TrimSuffix(s, "%") == "0" {
		return 0, fmt.Errorf("a request of 0 is not given, it is had: leave the compute request out and give no compute limit either (a device with no compute setting, on a GPU where others hold requests or a priority is set, has request 0: only what the others leave)")
	}
	return parsePercent(s)
}

func parsePercent(s string) (uint64, error) {
	num := strings.TrimSuffix(s, "%")
	if !isDigits(num) {
		return 0, fmt.Errorf("not a percentage")
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > 100 {
		return 0, fmt.Errorf("out of range")
	}
	return uint64(n), nil
}

// parseLimit parses "V" or "0=V,1=V" with one value parser.
func parseLimit(s source, parse func(string) (uint64, error), help string) (Limit, error) {
	l := Limit{Source: s.String()}
	v := strings.TrimSpace(s.value)
	if v == "" {
		return Limit{}, nil // set but empty: as if unset
	}
	if !strings.Contains(v, "=") {
		n, err := parse(v)
		if err != nil {
			return Limit{}, fmt.Errorf("%s: %v; %s", s, err, help)
		}
		l.All = n
		return l, nil
	}
	l.PerDevice = map[int]uint64{}
	for _, item := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || !isDigits(k) {
			return Limit{}, fmt.Errorf("%s: %q is not INDEX=VALUE; %s", s, item, help)
		}
		i, err := strconv.Atoi(k)
		if err != nil || i > 1<<16 {
			return Limit{}, fmt.Errorf("%s: device index %q is too large; %s", s, k, help)
		}
		if _, dup := l.PerDevice[i]; dup {
			return Limit{}, fmt.Errorf("%s: device index %d is given twice", s, i)
		}
		n, err := parse(val)
		if err != nil {
			return Limit{}, fmt.Errorf("%s: %q: %v; %s", s, val, err, help)
		}
		l.PerDevice[i] = n
	}
	return l, nil
}

// hamiLimit reads NAME and NAME_<i>.
func hamiLimit(em map[string]string, name string, parse func(string) (uint64, error), help string) (Limit, error) {
	var l Limit
	var srcs []string
	if v, ok := em[name]; ok && v != "" {
		n, err := parse(v)
		if err != nil {
			return Limit{}, fmt.Errorf("%s=%q: %v; %s", name, v, err, help)
		}
		l.All = n
		srcs = append(srcs, fmt.Sprintf("%s=%q", name, v))
	}
	var keys []string
	for k := range em {
		if strings.HasPrefix(k, name+"_") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := em[k]
		idx := strings.TrimPrefix(k, name+"_")
		if !isDigits(idx) {
			continue // some other variable, e.g. CUDA_DEVICE_MEMORY_LIMIT_FOO
		}
		i, err := strconv.Atoi(idx)
		if err != nil || i > 1<<16 {
			return Limit{}, fmt.Errorf("%s: device index %q is too large", k, idx)
		}
		if v == "" {
			continue
		}
		n, err := parse(v)
		if err != nil {
			return Limit{}, fmt.Errorf("%s=%q: %v; %s", k, v, err, help)
		}
		if l.PerDevice == nil {
			l.PerDevice = map[int]uint64{}
		}
		if _, dup := l.PerDevice[i]; dup {
			return Limit{}, fmt.Errorf("%s: device index %d is given twice (leading zeros?)", k, i)
		}
		l.PerDevice[i] = n
		srcs = append(srcs, fmt.Sprintf("%s=%q", k, v))
	}
	l.Source = strings.Join(srcs, " ")
	return l, nil
}

func resolveLimit(ann, native source, alias Limit, parse func(string) (uint64, error), help string) (Limit, error) {
	if ann.set && strings.TrimSpace(ann.value) != "" {
		return parseLimit(ann, parse, help)
	}
	nat, err := parseLimit(native, parse, help)
	if err != nil {
		return Limit{}, err
	}
	switch {
	case nat.IsSet() && alias.IsSet():
		if !nat.equal(alias) {
			return Limit{}, fmt.Errorf("%s and %s disagree; set only one of them", nat.Source, alias.Source)
		}
		return nat, nil
	case nat.IsSet():
		return nat, nil
	default:
		return alias, nil
	}
}

func parseMemory(em, ann map[string]string) (Limit, error) {
	alias, err := hamiLimit(em, EnvHAMiMemoryLimit, parseHAMiSize, hamiSizeHelp)
	if err != nil {
		return Limit{}, err
	}
	return resolveLimit(pick(AnnotationMemoryLimit, ann), pick(EnvMemoryLimit, em), alias, ParseSize, sizeHelp)
}

const percentHelp = "use a percentage 1-100 (e.g. 50), or per device 0=50,1=30"

func parseHAMiPercent(s string) (uint64, error) {
	if isDigits(s) {
		if n, err := strconv.Atoi(s); err == nil && n == 0 {
			return 100, nil // HAMi-core: 0 means no limit
		}
	}
	n, err := parsePercent(s)
	if err != nil {
		return 0, fmt.Errorf("%v (0 means no limit)", err)
	}
	return n, nil
}

func parseCompute(em, ann map[string]string) (Limit, error) {
	alias, err := hamiLimit(em, EnvHAMiSMLimit, parseHAMiPercent, "use a percentage 0-100 (0 = no limit)")
	if err != nil {
		return Limit{}, err
	}
	return resolveLimit(pick(AnnotationComputeLimit, ann), pick(EnvComputeLimit, em), alias, parsePercent, percentHelp)
}

func parseRequests(em, ann map[string]string) (compute, memory Limit, err error) {
	if compute, err = resolveLimit(pick(AnnotationComputeRequest, ann), pick(EnvComputeRequest, em), Limit{}, parseRequestPercent, requestHelp); err != nil {
		return Limit{}, Limit{}, err
	}
	if memory, err = resolveLimit(pick(AnnotationMemoryRequest, ann), pick(EnvMemoryRequest, em), Limit{}, ParseSize, sizeHelp); err != nil {
		return Limit{}, Limit{}, err
	}
	return compute, memory, nil
}

const requestHelp = "use a percentage 1-100 (e.g. 30), or per device 0=30,1=50; a request is at most its limit"

// priorityValues number the priorities in a Limit (0: not given). The
// names are tenant.ParsePriority's, which this floor cannot import.
var priorityValues = []string{1: "high", 2: "normal", 3: "low"}

const priorityHelp = "use high, normal or low, or per device 0=high,1=low"

// ParsePriorityValue reads one priority name as its Limit value.
func ParsePriorityValue(s string) (uint64, error) {
	for v, name := range priorityValues {
		if v > 0 && s == name {
			return uint64(v), nil
		}
	}
	return 0, fmt.Errorf("not a priority")
}

// PriorityName is the name of a priority Limit value ("" for 0, not given).
func PriorityName(v uint64) string {
	if v < uint64(len(priorityValues)) {
		return priorityValues[v]
	}
	return ""
}

// PriorityFor is the priority asked for container device i by name ("":
// not given, the config default applies).
func (r *Request) PriorityFor(i int) string { return PriorityName(r.Priority.For(i)) }

func parsePriority(em, ann map[string]string) (Limit, error) {
	return resolveLimit(pick(AnnotationPriority, ann), pick(EnvPriority, em), Limit{}, ParsePriorityValue, priorityHelp)
}

// ParsePriorityFlag reads a priority given under name (a flag, a config
// key, a DeviceClass field) in the request's forms.
func ParsePriorityFlag(name, value string) (Limit, error) {
	return parseLimit(source{name: name, value: value, set: value != ""}, ParsePriorityValue, priorityHelp)
}

// CheckRequests refuses a request above its limit, per device, where both
// are given: one error naming both values. Indices not named by a per-device
// value take the value for all devices; devices beyond every given index
// are checked through the "all" values.
func CheckRequests(memory, compute, memoryRequest, computeRequest Limit) error {
	check := func(lim, req Limit, what string, show func(uint64) string) error {
		if !lim.IsSet() || !req.IsSet() {
			return nil
		}
		idx := map[int]bool{-1: true}
		for i := range lim.PerDevice {
			idx[i] = true
		}
		for i := range req.PerDevice {
			idx[i] = true
		}
		keys := make([]int, 0, len(idx))
		for i := range idx {
			keys = append(keys, i)
		}
		sort.Ints(keys)
		for _, i := range keys {
			l, r := lim.All, req.All
			where := "every device"
			if i >= 0 {
				l, r = lim.For(i), req.For(i)
				where = fmt.Sprintf("container device %d", i)
			}
			if l != 0 && r > l {
				return fmt.Errorf("%s request %s is above its limit %s on %s (%s, %s): a request is at most its limit; lower the request or raise the limit", what, show(r), show(l), where, req.Source, lim.Source)
			}
		}
		return nil
	}
	pct := func(v uint64) string { return fmt.Sprintf("%d%%", v) }
	if err := check(compute, computeRequest, "compute", pct); err != nil {
		return err
	}
	return check(memory, memoryRequest, "memory", FormatSize)
}

// FormatSize writes n bytes as the request syntax would, exact:
// "4Gi (4294967296 bytes)", or "1000 bytes" when no suffix divides it.
func FormatSize(n uint64) string {
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d%s (%d bytes)", n/u.mult, u.suffix, n)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// ParseLimits reads only the limits of env and annotations, for a caller
// whose devices come from elsewhere (CDI: the engine gave them). The indices
// of per-device limits are the caller's to check against its devices.
func ParseLimits(env []string, annotations map[string]string) (memory, compute Limit, err error) {
	l, err := ParseAll(env, annotations)
	return l.Memory, l.Compute, err
}

// Limits are the limits, requests and priority of a request, without its
// devices.
type Limits struct{ Memory, Compute, MemoryRequest, ComputeRequest, Priority Limit }

// ParseAll is ParseLimits with the requests.
func ParseAll(env []string, annotations map[string]string) (Limits, error) {
	em := envMap(env)
	var l Limits
	var err error
	if l.Memory, err = parseMemory(em, annotations); err != nil {
		return Limits{}, err
	}
	if l.Compute, err = parseCompute(em, annotations); err != nil {
		return Limits{}, err
	}
	if l.ComputeRequest, l.MemoryRequest, err = parseRequests(em, annotations); err != nil {
		return Limits{}, err
	}
	if err := CheckRequests(l.Memory, l.Compute, l.MemoryRequest, l.ComputeRequest); err != nil {
		return Limits{}, err
	}
	if l.Priority, err = parsePriority(em, annotations); err != nil {
		return Limits{}, err
	}
	return l, nil
}

// Flags are a request given on a command line (vgpu exec): the same syntax
// as the environment, and errors that name the flags.
type Flags struct {
	Devices string // "" = all
	Memory  string // "" = not given
	Compute string // "" = not given
	// Requests beside the limits ("" = not given).
	ComputeRequest string
	MemoryRequest  string
	Priority       string // "" = not given
}

// FromFlags parses f. Unlike the environment, no devices means all of them:
// the command line always asks for GPUs.
func FromFlags(f Flags) (*Request, error) {
	mem, err := parseLimit(source{name: "--memory-limit", value: f.Memory, set: f.Memory != ""}, ParseSize, sizeHelp)
	if err != nil {
		return nil, err
	}
	comp, err := parseLimit(source{name: "--compute-limit", value: f.Compute, set: f.Compute != ""}, parsePercent, percentHelp)
	if err != nil {
		return nil, err
	}
	creq, err := parseLimit(source{name: "--compute-request", value: f.ComputeRequest, set: f.ComputeRequest != ""}, parseRequestPercent, requestHelp)
	if err != nil {
		return nil, err
	}
	mreq, err := parseLimit(source{name: "--memory-request", value: f.MemoryRequest, set: f.MemoryRequest != ""}, ParseSize, sizeHelp)
	if err != nil {
		return nil, err
	}
	if err := CheckRequests(mem, comp, mreq, creq); err != nil {
		return nil, err
	}
	prio, err := ParsePriorityFlag("--priority", f.Priority)
	if err != nil {
		return nil, err
	}
	dev := source{name: "--devices", value: f.Devices, set: true}
	if strings.TrimSpace(f.Devices) == "" {
		dev.value = "all"
	}
	if isNoDevice(dev.value) {
		return nil, fmt.Errorf("%s: selects no GPU; %s", dev, devicesHelp)
	}
	req := &Request{DeviceSource: dev.String(), Memory: mem, Compute: comp, ComputeRequest: creq, MemoryRequest: mreq, Priority: prio}
	if err := parseDevices(dev, req); err != nil {
		return nil, err
	}
	return req, nil
}
