package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/atomicfile"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ConfigName is the file name of the spec inside a bundle.
const ConfigName = "config.json"

// InjectedAnnotation marks a spec that vgpu has already edited; its value is
// the container id. A second shim in the chain must not inject again.
const InjectedAnnotation = "vgpu.io/injected"

// MaxSpecSize bounds how much of config.json is read, and MaxSpecDepth how
// deep its arrays and objects may nest: a runtime's config.json is tens of
// kilobytes (a large seccomp profile and a pod's annotations included) and
// under ten levels deep; without a bound a hostile bundle of 10^7 nested
// objects drove vgpu-runtime past 4 GiB of memory.
const (
	MaxSpecSize  = 8 << 20
	MaxSpecDepth = 64
	maxSpecSize  = MaxSpecSize
)

// Spec is a bundle's config.json held as ordered raw JSON.
type Spec struct {
	bundle string
	path   string
	orig   []byte
	top    object
	dirty  bool
	// valid: orig passed json.Valid, so every value in it (and every value
	// an edit sets, which encoding/json wrote) is valid JSON too, and nested
	// objects are split without validating them again (parseValid).
	valid bool
}

// Injected reports whether annotations carry vgpu's marker.
func Injected(annotations map[string]string) bool {
	_, ok := annotations[InjectedAnnotation]
	return ok
}

// LoadBundle reads <bundle>/config.json.
func LoadBundle(bundle string) (*Spec, error) {
	abs, err := filepath.Abs(bundle)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(abs, ConfigName)
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSpecSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(data) > maxSpecSize {
		return nil, fmt.Errorf("%s: larger than %d MiB (MaxSpecSize): not a runtime spec vgpu accepts; remove what makes it so large", p, maxSpecSize>>20)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	s.bundle, s.path = abs, p
	return s, nil
}

// Parse parses a config.json document held in memory (no bundle: Save fails).
func Parse(data []byte) (*Spec, error) {
	if len(data) > maxSpecSize {
		return nil, fmt.Errorf("config.json: larger than %d MiB (MaxSpecSize): not a runtime spec vgpu accepts; remove what makes it so large", maxSpecSize>>20)
	}
	if err := checkDepth(data); err != nil {
		return nil, err
	}
	valid := json.Valid(data)
	if err := checkKeys(data, valid); err != nil {
		return nil, err
	}
	top, err := parseValid(data, "config.json", valid)
	if err != nil {
		return nil, err
	}
	s := &Spec{orig: data, top: top, valid: valid}
	// Check the objects on the paths we may edit now, so that an edit later
	// cannot fail half-way on a malformed document.
	for _, path := range [][]string{{"process"}, {"linux"}, {"linux", "resources"}, {"hooks"}, {"annotations"}, {"root"}} {
		if _, _, err := s.objectAt(path); err != nil {
			return nil, err
		}
	}
	if _, err := s.stringSlice([]string{"process"}, "env"); err != nil {
		return nil, err
	}
	if _, err := s.Devices(); err != nil {
		return nil, err
	}
	if _, err := s.annotations(); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		path []string
		key  string
	}{{nil, "mounts"}, {[]string{"linux"}, "devices"}, {[]string{"linux", "resources"}, "devices"}} {
		if err := s.checkArray(p.path, p.key); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func dotted(path []string) string {
	if len(path) == 0 {
		return "config.json"
	}
	return strings.Join(path, ".")
}

// objectAt returns the object at path (nil, false when absent or null).
func (s *Spec) objectAt(path []string) (object, bool, error) {
	obj := s.top
	for i, k := range path {
		raw, ok := obj.get(k)
		if !ok || isNull(raw) {
			return nil, false, nil
		}
		o, err := parseValid(raw, dotted(path[:i+1]), s.valid)
		if err != nil {
			return nil, false, err
		}
		obj = o
	}
	return obj, true, nil
}

// value returns the raw value of key inside the object at path.
func (s *Spec) value(path []string, key string) (json.RawMessage, bool, error) {
	obj, ok, err := s.objectAt(path)
	if err != nil || !ok {
		return nil, false, err
	}
	raw, ok := obj.get(key)
	if !ok || isNull(raw) {
		return nil, false, nil
	}
	return raw, true, nil
}

// setValue sets key inside the object at path, creating the objects on the
// way, and re-encodes only the objects on that path.
func (s *Spec) setValue(path []string, key string, val json.RawMessage) error {
	top, err := setIn(s.top, path, key, val, nil, s.valid)
	if err != nil {
		return err
	}
	s.top = top
	s.dirty = true
	return nil
}

func setIn(obj object, path []string, key string, val json.RawMessage, done []string, valid bool) (object, error) {
	if len(path) == 0 {
		return obj.set(key, val), nil
	}
	var child object
	if raw, ok := obj.get(path[0]); ok && !isNull(raw) {
		c, err := parseValid(raw, dotted(append(done, path[0])), valid)
		if err != nil {
			return nil, err
		}
		child = c
	}
	child, err := setIn(child, path[1:], key, val, append(done, path[0]), valid)
	if err != nil {
		return nil, err
	}
	return obj.set(path[0], child.bytes()), nil
}

func (s *Spec) stringSlice(path []string, key string) ([]string, error) {
	raw, ok, err := s.value(path, key)
	if err != nil || !ok {
		return nil, err
	}
	var out []string
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%s.%s: %w", dotted(path), key, err)
	}
	return out, nil
}

func (s *Spec) checkArray(path []string, key string) error {
	raw, ok, err := s.value(path, key)
	if err != nil || !ok {
		return err
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return fmt.Errorf("%s: not a JSON array: %w", strings.TrimPrefix(dotted(path)+"."+key, "config.json."), err)
	}
	return nil
}

func (s *Spec) appendTo(path []string, key string, items []any) error {
	if len(items) == 0 {
		return nil
	}
	enc := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		b, err := marshal(it)
		if err != nil {
			return err
		}
		enc = append(enc, b)
	}
	raw, _, err := s.value(path, key)
	if err != nil {
		return err
	}
	arr, err := appendArray(raw, strings.TrimPrefix(dotted(path)+"."+key, "config.json."), enc)
	if err != nil {
		return err
	}
	return s.setValue(path, key, arr)
}

// Bundle is the absolute bundle directory ("" for a parsed document).
func (s *Spec) Bundle() string { return s.bundle }

// Path is the absolute path of config.json ("" for a parsed document).
func (s *Spec) Path() string { return s.path }

// Env returns process.env.
func (s *Spec) Env() []string {
	env, _ := s.stringSlice([]string{"process"}, "env")
	return env
}

func (s *Spec) annotations() (map[string]string, error) {
	raw, ok, err := s.value(nil, "annotations")
	if err != nil || !ok {
		return nil, err
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("annotations: %w", err)
	}
	return m, nil
}

// Annotations returns the annotations object.
func (s *Spec) Annotations() map[string]string {
	m, _ := s.annotations()
	return m
}

// RootfsPath returns root.path, joined to the bundle when relative.
func (s *Spec) RootfsPath() string {
	raw, ok, _ := s.value([]string{"root"}, "path")
	if !ok {
		return ""
	}
	var p string
	if json.Unmarshal(raw, &p) != nil || p == "" {
		return ""
	}
	if !filepath.IsAbs(p) && s.bundle != "" {
		p = filepath.Join(s.bundle, p)
	}
	return filepath.Clean(p)
}

// Devices returns linux.devices.
func (s *Spec) Devices() ([]specs.LinuxDevice, error) {
	raw, ok, err := s.value([]string{"linux"}, "devices")
	if err != nil || !ok {
		return nil, err
	}
	var d []specs.LinuxDevice
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("linux.devices: %w", err)
	}
	return d, nil
}

// DeviceRules returns linux.resources.devices.
func (s *Spec) DeviceRules() ([]specs.LinuxDeviceCgroup, error) {
	raw, ok, err := s.value([]string{"linux", "resources"}, "devices")
	if err != nil || !ok {
		return nil, err
	}
	var d []specs.LinuxDeviceCgroup
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("linux.resources.devices: %w", err)
	}
	return d, nil
}

// SetEnv sets KEY=value in process.env: every existing KEY= entry is
// replaced in place (so the list keeps its order), or it is appended.
func (s *Spec) SetEnv(key, value string) error {
	if key == "" || strings.ContainsRune(key, '=') {
		return fmt.Errorf("SetEnv: bad variable name %q", key)
	}
	env := s.Env()
	kv := key + "=" + value
	found := false
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if strings.HasPrefix(e, key+"=") {
			if found {
				continue
			}
			found = true
			e = kv
		}
		out = append(out, e)
	}
	if !found {
		out = append(out, kv)
	}
	if found && slices.Equal(out, env) {
		return nil
	}
	b, err := marshal(out)
	if err != nil {
		return err
	}
	return s.setValue([]string{"process"}, "env", b)
}

// SetAnnotation sets one annotation, keeping the others byte for byte.
func (s *Spec) SetAnnotation(key, value string) error {
	b, err := marshal(value)
	if err != nil {
		return err
	}
	return s.setValue([]string{"annotations"}, key, b)
}

// AddMounts appends mounts after the existing ones.
func (s *Spec) AddMounts(ms ...specs.Mount) error {
	items := make([]any, len(ms))
	for i := range ms {
		items[i] = ms[i]
	}
	return s.appendTo(nil, "mounts", items)
}

// AddDevices appends to linux.devices.
func (s *Spec) AddDevices(ds ...specs.LinuxDevice) error {
	items := make([]any, len(ds))
	for i := range ds {
		items[i] = ds[i]
	}
	return s.appendTo([]string{"linux"}, "devices", items)
}

// AddDeviceRules appends to linux.resources.devices. Rules are evaluated in
// order and the last match wins, so appended allow rules take effect after
// the engine's default deny-all.
func (s *Spec) AddDeviceRules(rs ...specs.LinuxDeviceCgroup) error {
	items := make([]any, len(rs))
	for i := range rs {
		items[i] = rs[i]
	}
	return s.appendTo([]string{"linux", "resources"}, "devices", items)
}

// AddHook appends a hook to hooks.<stage> (prestart, createRuntime,
// createContainer, startContainer, poststart, poststop).
func (s *Spec) AddHook(stage string, h specs.Hook) error {
	switch stage {
	case "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop":
	default:
		return fmt.Errorf("AddHook: unknown hook stage %q", stage)
	}
	return s.appendTo([]string{"hooks"}, stage, []any{h})
}

// Clone returns an independent copy. Edit the copy and keep it only when
// every edit succeeded.
func (s *Spec) Clone() *Spec {
	c := *s
	c.top = append(object(nil), s.top...)
	return &c
}

// Modified reports whether an edit changed the document.
func (s *Spec) Modified() bool { return s.dirty && !bytes.Equal(s.top.bytes(), s.orig) }

// Bytes returns the document as Save would write it.
func (s *Spec) Bytes() []byte {
	if !s.Modified() {
		return append([]byte(nil), s.orig...)
	}
	return s.top.bytes()
}

// Save writes the edited document back atomically. An unmodified spec is not
// written at all.
func (s *Spec) Save() error {
	if !s.Modified() {
		return nil
	}
	if s.path == "" {
		return errors.New("spec: Save of a document not loaded from a bundle")
	}
	data := s.top.bytes()
	if err := atomicfile.Replace(s.path, data, 0o644); err != nil {
		return err
	}
	s.orig, s.dirty = data, false
	return nil
}

// checkDepth refuses a document whose arrays and objects nest deeper than
// MaxSpecDepth, before anything allocates per level: one pass over the
// bytes, strings (and their escapes) skipped.
func checkDepth(data []byte) error {
	depth := 0
	in := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if in {
			switch c {
			case '\\':
				i++
			case '"':
				in = false
			}
			continue
		}
		switch c {
		case '"':
			in = true
		case '{', '[':
			depth++
			if depth > MaxSpecDepth {
				return fmt.Errorf("config.json: arrays and objects nested deeper than %d levels (MaxSpecDepth) at byte %d: not a runtime spec vgpu accepts (a runtime's spec is under 10 deep)", MaxSpecDepth, i)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// HostUID is the host user id of the container's process: process.user.uid
// mapped through linux.uidMappings when the container has a user namespace.
// ok is false when the spec names no user or the uid is not mapped.
func (s *Spec) HostUID() (uid uint32, ok bool) {
	raw, found, err := s.value([]string{"process", "user"}, "uid")
	if err != nil || !found || json.Unmarshal(raw, &uid) != nil {
		return 0, false
	}
	raw, found, err = s.value([]string{"linux"}, "uidMappings")
	if err != nil {
		return 0, false
	}
	if !found {
		return uid, true
	}
	var maps []specs.LinuxIDMapping
	if json.Unmarshal(raw, &maps) != nil {
		return 0, false
	}
	if len(maps) == 0 {
		return uid, true
	}
	for _, m := range maps {
		if uid >= m.ContainerID && uint64(uid) < uint64(m.ContainerID)+uint64(m.Size) {
			return m.HostID + (uid - m.ContainerID), true
		}
	}
	return 0, false
}
