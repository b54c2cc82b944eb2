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

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/tailscale/hujson"

	"github.com/vgpu-dev/vgpu/internal/atomicfile"
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
)

// Spec is a bundle's config.json, held as hujson's syntax tree of it: a
// value that no edit touches is written back as the bytes it was read from,
// whitespace around it included.
type Spec struct {
	bundle string
	path   string
	orig   []byte
	root   hujson.Value // an object (Parse checks)
	dirty  bool
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
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(data) > MaxSpecSize {
		return nil, fmt.Errorf("%s: larger than %d MiB (MaxSpecSize): not a runtime spec vgpu accepts; remove what makes it so large", p, MaxSpecSize>>20)
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
	if len(data) > MaxSpecSize {
		return nil, fmt.Errorf("config.json: larger than %d MiB (MaxSpecSize): not a runtime spec vgpu accepts; remove what makes it so large", MaxSpecSize>>20)
	}
	if err := checkDepth(data); err != nil {
		return nil, err
	}
	root, err := hujson.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config.json: not valid JSON: %s", strings.TrimPrefix(err.Error(), "hujson: "))
	}
	// hujson also reads comments and trailing commas, which runc's decoder
	// (encoding/json) refuses.
	if !root.IsStandard() {
		return nil, errors.New("config.json: comments or a trailing comma: not JSON, and runc would refuse it; remove them")
	}
	if _, ok := root.Value.(*hujson.Object); !ok {
		return nil, errors.New("config.json: not a JSON object")
	}
	if err := checkKeys(&root); err != nil {
		return nil, err
	}
	s := &Spec{orig: data, root: root}
	// Check the objects on the paths we may edit now, so that an edit later
	// cannot fail half-way on a malformed document.
	for _, path := range [][]string{{"process"}, {"linux"}, {"linux", "resources"}, {"hooks"}, {"annotations"}, {"root"}} {
		if _, err := s.objectAt(path, false); err != nil {
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
		if _, err := s.array(p.path, p.key, false); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func dotted(path []string, key ...string) string {
	if p := append(append([]string(nil), path...), key...); len(p) > 0 {
		return strings.Join(p, ".")
	}
	return "config.json"
}

// member finds key in obj as runc's decoder would: case-insensitively
// (checkKeys has made sure that at most one key of an object matches).
func member(obj *hujson.Object, key string) *hujson.ObjectMember {
	for i := range obj.Members {
		if sameKey(keyBytes(obj.Members[i].Name.Value.(hujson.Literal)), key) {
			return &obj.Members[i]
		}
	}
	return nil
}

func isNull(v *hujson.Value) bool {
	l, ok := v.Value.(hujson.Literal)
	return ok && l.Kind() == 'n'
}

// objectAt returns the object at path: nil when it or an object on the way
// is absent or null, unless create, which makes them (a new member goes at
// the end of its object; a null is replaced).
func (s *Spec) objectAt(path []string, create bool) (*hujson.Object, error) {
	obj := s.root.Value.(*hujson.Object)
	for i, k := range path {
		m := member(obj, k)
		if m == nil || isNull(&m.Value) {
			if !create {
				return nil, nil
			}
			if m == nil {
				m = addMember(obj, k)
			}
			m.Value.Value = &hujson.Object{}
		}
		o, ok := m.Value.Value.(*hujson.Object)
		if !ok {
			return nil, fmt.Errorf("%s: not a JSON object", dotted(path[:i+1]))
		}
		obj = o
	}
	return obj, nil
}

// addMember appends key to obj, spaced as the object's last member is.
func addMember(obj *hujson.Object, key string) *hujson.ObjectMember {
	var m hujson.ObjectMember
	if n := len(obj.Members); n > 0 {
		m.Name.BeforeExtra = obj.Members[n-1].Name.BeforeExtra
		m.Value.BeforeExtra = obj.Members[n-1].Value.BeforeExtra
	}
	m.Name.Value = hujson.String(key)
	obj.Members = append(obj.Members, m)
	return &obj.Members[len(obj.Members)-1]
}

// value returns key's value inside the object at path; nil when absent or
// null.
func (s *Spec) value(path []string, key string) (*hujson.Value, error) {
	obj, err := s.objectAt(path, false)
	if err != nil || obj == nil {
		return nil, err
	}
	m := member(obj, key)
	if m == nil || isNull(&m.Value) {
		return nil, nil
	}
	return &m.Value, nil
}

// decode unmarshals key's value inside the object at path into out, as
// runc's decoder would; false when it is absent or null.
func (s *Spec) decode(path []string, key string, out any) (bool, error) {
	v, err := s.value(path, key)
	if err != nil || v == nil {
		return false, err
	}
	if err := json.Unmarshal(hujson.Value{Value: v.Value}.Pack(), out); err != nil {
		return false, fmt.Errorf("%s: %w", dotted(path, key), err)
	}
	return true, nil
}

func (s *Spec) stringSlice(path []string, key string) ([]string, error) {
	var out []string
	_, err := s.decode(path, key, &out)
	return out, err
}

// array returns the array at key inside the object at path; nil when absent
// or null, unless create, which sets an empty one.
func (s *Spec) array(path []string, key string, create bool) (*hujson.Array, error) {
	v, err := s.value(path, key)
	if err != nil {
		return nil, err
	}
	if v == nil {
		if !create {
			return nil, nil
		}
		a := &hujson.Array{}
		return a, s.set(path, key, a)
	}
	a, ok := v.Value.(*hujson.Array)
	if !ok {
		return nil, fmt.Errorf("%s: not a JSON array", dotted(path, key))
	}
	return a, nil
}

// set sets key inside the object at path (made if need be) to v.
func (s *Spec) set(path []string, key string, v hujson.ValueTrimmed) error {
	obj, err := s.objectAt(path, true)
	if err != nil {
		return err
	}
	m := member(obj, key)
	if m == nil {
		m = addMember(obj, key)
	}
	m.Value.Value = v
	s.dirty = true
	return nil
}

// encode is v as a value of the tree, encoded as encoding/json does (no
// HTML escaping).
func encode(v any) (hujson.ValueTrimmed, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	t, err := hujson.Parse(bytes.TrimRight(b.Bytes(), "\n"))
	if err != nil {
		return nil, err
	}
	return t.Value, nil
}

// appendTo appends items to the array at key inside the object at path,
// each spaced as the array's last element is.
func (s *Spec) appendTo(path []string, key string, items []any) error {
	if len(items) == 0 {
		return nil
	}
	vals := make([]hujson.ValueTrimmed, len(items))
	for i, it := range items {
		v, err := encode(it)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	a, err := s.array(path, key, true)
	if err != nil {
		return err
	}
	appendElems(a, vals...)
	s.dirty = true
	return nil
}

func appendElems(a *hujson.Array, vals ...hujson.ValueTrimmed) {
	var before hujson.Extra
	if n := len(a.Elements); n > 0 {
		before = a.Elements[n-1].BeforeExtra
	}
	for _, v := range vals {
		a.Elements = append(a.Elements, hujson.Value{BeforeExtra: before, Value: v})
	}
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
	var m map[string]string
	_, err := s.decode(nil, "annotations", &m)
	return m, err
}

// Annotations returns the annotations object.
func (s *Spec) Annotations() map[string]string {
	m, _ := s.annotations()
	return m
}

// RootfsPath returns root.path, joined to the bundle when relative.
func (s *Spec) RootfsPath() string {
	var p string
	if ok, err := s.decode([]string{"root"}, "path", &p); !ok || err != nil || p == "" {
		return ""
	}
	if !filepath.IsAbs(p) && s.bundle != "" {
		p = filepath.Join(s.bundle, p)
	}
	return filepath.Clean(p)
}

// Devices returns linux.devices.
func (s *Spec) Devices() ([]specs.LinuxDevice, error) {
	var d []specs.LinuxDevice
	_, err := s.decode([]string{"linux"}, "devices", &d)
	return d, err
}

// DeviceRules returns linux.resources.devices.
func (s *Spec) DeviceRules() ([]specs.LinuxDeviceCgroup, error) {
	var d []specs.LinuxDeviceCgroup
	_, err := s.decode([]string{"linux", "resources"}, "devices", &d)
	return d, err
}

// SetEnv sets KEY=value in process.env: the first KEY= entry is replaced
// in place and later ones dropped (so the list keeps its order), or it is
// appended.
func (s *Spec) SetEnv(key, value string) error {
	if key == "" || strings.ContainsRune(key, '=') {
		return fmt.Errorf("SetEnv: bad variable name %q", key)
	}
	env, err := s.stringSlice([]string{"process"}, "env")
	if err != nil {
		return err
	}
	kv := key + "=" + value
	if i := slices.IndexFunc(env, func(e string) bool { return strings.HasPrefix(e, key+"=") }); i >= 0 && env[i] == kv &&
		!slices.ContainsFunc(env[i+1:], func(e string) bool { return strings.HasPrefix(e, key+"=") }) {
		return nil // already so
	}
	a, err := s.array([]string{"process"}, "env", true)
	if err != nil {
		return err
	}
	found := false
	elems := a.Elements[:0:0]
	for i, e := range env {
		if strings.HasPrefix(e, key+"=") {
			if found {
				continue
			}
			found = true
			a.Elements[i].Value = hujson.String(kv)
		}
		elems = append(elems, a.Elements[i])
	}
	if len(elems) < len(a.Elements) {
		elems[len(elems)-1].AfterExtra = a.Elements[len(a.Elements)-1].AfterExtra
	}
	a.Elements = elems
	if !found {
		appendElems(a, hujson.String(kv))
	}
	s.dirty = true
	return nil
}

// SetAnnotation sets one annotation, keeping the others byte for byte.
func (s *Spec) SetAnnotation(key, value string) error {
	return s.set([]string{"annotations"}, key, hujson.String(value))
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
	c.root = s.root.Clone()
	return &c
}

// Modified reports whether an edit changed the document.
func (s *Spec) Modified() bool { return s.dirty && !bytes.Equal(s.root.Pack(), s.orig) }

// Bytes returns the document as Save would write it.
func (s *Spec) Bytes() []byte {
	if !s.Modified() {
		return append([]byte(nil), s.orig...)
	}
	return s.root.Pack()
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
	data := s.root.Pack()
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
	found, err := s.decode([]string{"process", "user"}, "uid", &uid)
	if err != nil || !found {
		return 0, false
	}
	var maps []specs.LinuxIDMapping
	found, err = s.decode([]string{"linux"}, "uidMappings", &maps)
	if err != nil {
		return 0, false
	}
	if !found || len(maps) == 0 {
		return uid, true
	}
	for _, m := range maps {
		if uid >= m.ContainerID && uint64(uid) < uint64(m.ContainerID)+uint64(m.Size) {
			return m.HostID + (uid - m.ContainerID), true
		}
	}
	return 0, false
}
