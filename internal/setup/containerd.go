package setup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// DefaultContainerdConfig is containerd's configuration file.
const DefaultContainerdConfig = "/etc/containerd/config.toml"

// RuncShim is the runtime_type of the vgpu runtime class: containerd's runc
// v2 shim, which runs BinaryName in place of runc.
const RuncShim = "io.containerd.runc.v2"

// ContainerdOptions say what to do to containerd's config.toml.
type ContainerdOptions struct {
	RuntimePath string // vgpu-runtime, absolute
	Default     bool   // also default_runtime_name = "vgpu" (CRI)
	Remove      bool
	// Kubernetes also passes the device plugin's grant annotations
	// (grant.vgpu.io/*) in container_annotations (kubernetes.go).
	Kubernetes bool
	// DefaultConfig returns `containerd config default`, used when the file
	// is missing or empty (nil: that is an error).
	DefaultConfig func() ([]byte, error)
	// DropIn is the drop-in file's path, named in the config's imports
	// ("": DropInPath of the config).
	DropIn string
}

// DropInName is vgpu's drop-in, in conf.d beside config.toml: the
// directory containerd 2.x's own default config imports (conf.d/*.toml),
// and the layout of other runtimes' drop-ins (NVIDIA's 99-nvidia.toml).
const DropInName = "99-vgpu.toml"

// DropInPath is the drop-in for the configuration file config.
func DropInPath(config string) string {
	return filepath.Join(filepath.Dir(config), "conf.d", DropInName)
}

// criPlugin returns the CRI plugin that holds the runtime classes for a
// config version: 2 (containerd 1.x) or 3 (containerd 2.x).
func criPlugin(version int64) (string, error) {
	switch version {
	case 2:
		return "io.containerd.grpc.v1.cri", nil
	case 3, 4: // 4: containerd 2.4's `config default`; the CRI tables are those of 3
		return "io.containerd.cri.v1.runtime", nil
	case 0, 1:
		return "", errors.New("config version 1 (no `version = 2` line) is not supported: convert it with `containerd config migrate` (containerd 1.x: write `version = 2` and the tables of `containerd config default`)")
	}
	return "", fmt.Errorf("config version %d is not supported (2: containerd 1.x, 3 or 4: containerd 2.x)", version)
}

// ContainerdRuntimePath returns the path of the table of the vgpu runtime class.
func ContainerdRuntimePath(version int64) ([]string, error) {
	cri, err := criPlugin(version)
	if err != nil {
		return nil, err
	}
	return []string{"plugins", cri, "containerd", "runtimes", RuntimeName}, nil
}

// AnnotationPattern lets the vgpu.io/* annotations through the CRI.
const AnnotationPattern = "vgpu.io/*"

// dropInHeader starts the drop-in; %s is what containerd merges.
const dropInHeader = `# Written by vgpu setup containerd (undo: vgpu setup containerd --remove);
# config.toml imports it. %s
`

const mergeV2 = `containerd 1.x takes a plugin's section from an
# imported file whole, in place of config.toml's: this file carries config.toml's
# whole CRI section with the vgpu runtime class added. Change CRI settings here,
# or in config.toml and run vgpu setup containerd again.`

const mergeV3 = `containerd 2.x merges it into config.toml's settings.`

// Containerd returns config.toml (before: its content, nil when missing)
// with the drop-in at dropIn in its imports, and the drop-in's content with
// the vgpu runtime class. With o.Remove: config.toml without that import,
// and a nil drop-in (the file goes).
func Containerd(before []byte, dropIn string, o ContainerdOptions) (config, dropInData []byte, err error) {
	data := before
	if o.Remove {
		if data == nil {
			return nil, nil, nil
		}
		out, err := removeImport(data, dropIn)
		return out, nil, err
	}
	doc, err := parseTOMLDoc(data)
	if err != nil {
		return nil, nil, err
	}
	if len(doc) == 0 {
		// Missing or empty (comments only): start from containerd's defaults.
		if o.DefaultConfig == nil {
			return nil, nil, errors.New("the file is empty and there is no `containerd config default` to start from")
		}
		def, err := o.DefaultConfig()
		if err != nil {
			return nil, nil, err
		}
		data = append(append([]byte(nil), data...), def...)
		if doc, err = parseTOMLDoc(data); err != nil {
			return nil, nil, fmt.Errorf("containerd config default: %w", err)
		}
	}
	version, err := configVersion(doc)
	if err != nil {
		return nil, nil, err
	}
	rtPath, err := ContainerdRuntimePath(version)
	if err != nil {
		return nil, nil, err
	}
	if o.RuntimePath == "" {
		return nil, nil, errors.New("no path for the vgpu runtime")
	}
	cri := rtPath[:2] // plugins, <CRI plugin>
	// containerd 1.x replaces the section, 2.x merges: the drop-in carries
	// config.toml's whole CRI section only where it must.
	section := map[string]any{}
	merge := mergeV3
	if version == 2 {
		if m, ok := lookup(doc, cri...).(map[string]any); ok {
			section = m
		}
		merge = mergeV2
	}
	ctrd := subTable(section, "containerd")
	rt := map[string]any{
		"runtime_type": RuncShim,
		"options":      map[string]any{"BinaryName": o.RuntimePath},
	}
	// Follow runc's cgroup driver (kubelet and containerd must agree on it).
	if lookup(doc, append(append([]string(nil), rtPath[:len(rtPath)-1]...), "runc", "options", "SystemdCgroup")...) == true {
		rt["options"].(map[string]any)["SystemdCgroup"] = true
	}
	// The CRI passes a pod's annotations to the runtime only when the
	// runtime class lists them (kubernetes.go).
	if err := annotations(doc, rtPath, rt, o.Kubernetes); err != nil {
		return nil, nil, err
	}
	runtimes := subTable(ctrd, "runtimes")
	runtimes[RuntimeName] = rt
	if version == 2 {
		keepDefaultRuntime(ctrd, runtimes)
	}
	if o.Default {
		ctrd["default_runtime_name"] = RuntimeName
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, dropInHeader, merge)
	enc := toml.NewEncoder(&b)
	enc.SetIndentTables(true)
	if err := enc.Encode(map[string]any{"version": version, "plugins": map[string]any{cri[1]: section}}); err != nil {
		return nil, nil, err
	}
	out, err := addImport(data, dropIn)
	if err != nil {
		return nil, nil, err
	}
	return out, b.Bytes(), nil
}

// DefaultRuntime is the runtime containerd's CRI plugin runs when a pod
// names none and its config names none (default_runtime_name).
const DefaultRuntime = "runc"

// keepDefaultRuntime adds runc to a containerd 1.x drop-in's runtimes when
// config.toml relies on containerd's built-in entry for it (Debian 12's
// shipped config.toml does): containerd 1.x decodes an imported runtimes
// table in place of its defaults, so a drop-in naming only vgpu would leave
// default_runtime_name = "runc" naming nothing and the CRI plugin refusing to
// load. The entry is containerd's own default (the runc v2 shim with runc
// from PATH). A default_runtime_name other than runc that names nothing was
// already an error in config.toml and is left for containerd to report.
func keepDefaultRuntime(ctrd, runtimes map[string]any) {
	name, _ := ctrd["default_runtime_name"].(string)
	if name == "" || name == RuntimeName {
		name = DefaultRuntime
	}
	if _, ok := runtimes[name]; ok || name != DefaultRuntime {
		return
	}
	runtimes[DefaultRuntime] = map[string]any{"runtime_type": RuncShim}
}

// parseTOMLDoc parses a config.toml; nil data is an empty document.
func parseTOMLDoc(data []byte) (map[string]any, error) {
	doc := map[string]any{}
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("not valid TOML: line %d, column %d: %s", row, col, de.Error())
		}
		return nil, fmt.Errorf("not valid TOML: %w", err)
	}
	return doc, nil
}

func configVersion(doc map[string]any) (int64, error) {
	v, ok := doc["version"]
	if !ok {
		return 0, nil
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("version = %v: want an integer", v)
	}
	return n, nil
}

// lookup is the value at path in doc, nil when absent.
func lookup(doc map[string]any, path ...string) any {
	var cur any = doc
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// subTable is m[k] as a table, made (or replaced, if not a table) when needed.
func subTable(m map[string]any, k string) map[string]any {
	if t, ok := m[k].(map[string]any); ok {
		return t
	}
	t := map[string]any{}
	m[k] = t
	return t
}

// importsOf finds the top-level imports of config.toml: its list and the
// byte range of its key = value (ok false: none).
func importsOf(data []byte) (list []string, start, end int, ok bool, err error) {
	var p unstable.Parser
	p.Reset(data)
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind == unstable.Table || e.Kind == unstable.ArrayTable {
			break // top-level keys come before the first table
		}
		if e.Kind != unstable.KeyValue {
			continue
		}
		k := e.Key()
		if !k.Next() || string(k.Node().Data) != "imports" || k.Next() {
			continue
		}
		v := e.Value()
		if v.Kind != unstable.Array {
			return nil, 0, 0, false, errors.New("imports is not a list of paths")
		}
		for c := v.Children(); c.Next(); {
			if c.Node().Kind != unstable.String {
				return nil, 0, 0, false, errors.New("imports is not a list of paths")
			}
			list = append(list, string(c.Node().Data))
		}
		return list, int(e.Raw.Offset), int(e.Raw.Offset + e.Raw.Length), true, nil
	}
	if err := p.Error(); err != nil {
		return nil, 0, 0, false, fmt.Errorf("not valid TOML: %w", err)
	}
	return nil, 0, 0, false, nil
}

// tomlString quotes s as a TOML basic string (JSON's escapes are TOML's).
func tomlString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}

func renderImports(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = tomlString(s)
	}
	return "imports = [" + strings.Join(q, ", ") + "]"
}

// addImport names dropIn in config.toml's imports: an entry added at the
// end of its list (one that a glob of it already matches is left alone),
// or a new imports line after the version line (else first).
func addImport(data []byte, dropIn string) ([]byte, error) {
	list, start, end, ok, err := importsOf(data)
	if err != nil {
		return nil, err
	}
	if ok {
		for _, p := range list {
			if m, _ := filepath.Match(p, dropIn); m || p == dropIn {
				return data, nil
			}
		}
		// Before the closing bracket, after the last element (or a comma
		// the list already ends with).
		prev := bytes.TrimRight(data[start:end-1], " \t\r\n")
		sep := ", "
		switch prev[len(prev)-1] {
		case '[':
			sep = ""
		case ',':
			sep = " "
		}
		at := start + len(prev)
		return splice(data, at, at, sep+tomlString(dropIn)), nil
	}
	line := renderImports([]string{dropIn}) + " " + importMarker + "\n"
	at := 0
	if m := versionLine.FindIndex(data); m != nil {
		at = m[1]
	}
	return splice(data, at, at, line), nil
}

// removeImport takes dropIn out of config.toml's imports: what addImport
// added goes byte for byte (the whole line when it added the line).
func removeImport(data []byte, dropIn string) ([]byte, error) {
	list, start, end, ok, err := importsOf(data)
	if err != nil || !ok || !slices.Contains(list, dropIn) {
		return data, err
	}
	eol := bytes.IndexByte(data[end:], '\n')
	if eol < 0 {
		eol = len(data) - end
	}
	if len(list) == 1 && bytes.Contains(data[end:end+eol], []byte(importMarker)) {
		if end+eol < len(data) {
			eol++
		}
		return splice(data, start, end+eol, ""), nil
	}
	kv := data[start:end]
	for _, added := range []string{", " + tomlString(dropIn), " " + tomlString(dropIn), tomlString(dropIn)} {
		if i := bytes.LastIndex(kv, []byte(added)); i >= 0 && len(bytes.TrimSpace(kv[i+len(added):len(kv)-1])) == 0 {
			return splice(data, start+i, start+i+len(added), ""), nil
		}
	}
	var keep []string
	for _, p := range list {
		if p != dropIn {
			keep = append(keep, p)
		}
	}
	return splice(data, start, end, renderImports(keep)), nil
}

// importMarker ends the imports line that addImport adds.
const importMarker = "# added by vgpu setup containerd"

var versionLine = regexp.MustCompile(`(?m)^version\s*=\s*[0-9]+[ \t]*(#.*)?\n`)

func splice(data []byte, start, end int, repl string) []byte {
	out := append([]byte(nil), data[:start]...)
	out = append(out, repl...)
	return append(out, data[end:]...)
}

// ContainerdDefault runs `<bin> config default`.
func ContainerdDefault(bin string) func() ([]byte, error) {
	return func() ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "config", "default")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s config default: %v: %s", bin, err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
}

// ContainerdChanges reads config.toml at path (and the drop-in) and returns
// the changes to make: config.toml's imports, and the drop-in.
func ContainerdChanges(path string, o ContainerdOptions) ([]Change, error) {
	dropIn := o.DropIn
	if dropIn == "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		dropIn = DropInPath(abs)
	}
	before, err := readOptional(path)
	if err != nil {
		return nil, err
	}
	oldDropIn, err := readOptional(dropIn)
	if err != nil {
		return nil, err
	}
	after, dropInData, err := Containerd(before, dropIn, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (the file was not changed)", path, err)
	}
	if o.Remove && before == nil {
		after = nil
	}
	// config.toml never names a drop-in that is not there: the drop-in is
	// written first and removed last.
	chs := []Change{
		{Path: dropIn, Before: oldDropIn, After: dropInData, Mode: 0o644},
		{Path: path, Before: before, After: after, Mode: 0o644},
	}
	if o.Remove {
		chs[0], chs[1] = chs[1], chs[0]
	}
	return chs, nil
}

// ContainerdRestart is what to tell the user after config.toml changed.
const ContainerdRestart = "restart containerd to apply it (running containers keep running): systemctl restart containerd; Kubernetes pods select it with runtimeClassName: vgpu (configs/k8s/runtimeclass.yaml)"
