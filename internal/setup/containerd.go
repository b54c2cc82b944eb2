package setup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
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
}

// containerdMarker starts the block of tables that Containerd appends.
const containerdMarker = "# Added by `vgpu setup containerd` (undo: vgpu setup containerd --remove)."

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

func configVersion(d *tomlDoc) (int64, error) {
	v, ok := d.get("version")
	if !ok {
		return 0, nil
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("version = %v: want an integer", v)
	}
	return n, nil
}

// Containerd returns config.toml with the vgpu runtime class added (or
// removed). before == nil means the file does not exist.
func Containerd(before []byte, o ContainerdOptions) ([]byte, error) {
	data := before
	if o.Remove && data == nil {
		return nil, nil
	}
	d, err := parseTOML(data)
	if err != nil {
		return nil, err
	}
	if len(d.tree) == 0 && !o.Remove {
		// Missing or empty (comments only): start from containerd's defaults.
		if o.DefaultConfig == nil {
			return nil, errors.New("the file is empty and there is no `containerd config default` to start from")
		}
		def, err := o.DefaultConfig()
		if err != nil {
			return nil, err
		}
		data = append(append([]byte(nil), data...), def...)
		if d, err = parseTOML(data); err != nil {
			return nil, fmt.Errorf("containerd config default: %w", err)
		}
	}
	version, err := configVersion(d)
	if err != nil {
		return nil, err
	}
	if o.Remove && len(d.tree) == 0 {
		return data, nil
	}
	rtPath, err := ContainerdRuntimePath(version)
	if err != nil {
		return nil, err
	}
	if o.Remove {
		return containerdRemove(d, rtPath)
	}
	if o.RuntimePath == "" {
		return nil, errors.New("no path for the vgpu runtime")
	}
	return containerdAdd(d, rtPath, o)
}

type tomlSetting struct {
	path []string
	val  any // string, bool or []string
}

// AnnotationPattern lets the vgpu.io/* annotations through the CRI.
const AnnotationPattern = "vgpu.io/*"

// withPattern returns the list at path with AnnotationPattern added, and
// whether that is a change.
func withPattern(d *tomlDoc, path []string) ([]string, bool) {
	v, ok := d.get(path...)
	if !ok {
		return []string{AnnotationPattern}, true
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false // not a list: leave it to the user (containerd will complain)
	}
	var out []string
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		if s == AnnotationPattern || s == "*" || s == "vgpu.io/" {
			return nil, false
		}
		out = append(out, s)
	}
	return append(out, AnnotationPattern), true
}

func sameValue(a, b any) bool {
	if l, ok := b.([]string); ok {
		al, ok := a.([]any)
		if !ok || len(al) != len(l) {
			return false
		}
		for i := range l {
			if al[i] != l[i] {
				return false
			}
		}
		return true
	}
	return a == b
}

func containerdAdd(d *tomlDoc, rtPath []string, o ContainerdOptions) ([]byte, error) {
	at := func(keys ...string) []string { return append(append([]string(nil), rtPath...), keys...) }
	want := []tomlSetting{
		{at("runtime_type"), RuncShim},
		{at("options", "BinaryName"), o.RuntimePath},
	}
	// The CRI passes a pod's annotations to the runtime only when the runtime
	// class lists them: vgpu.io/memory-limit etc. must get through.
	// With Kubernetes, also the device plugin's grants (kubernetes.go).
	ann, err := annotationSettings(d, at, o.Kubernetes)
	if err != nil {
		return nil, err
	}
	want = append(want, ann...)
	// Follow runc's cgroup driver (kubelet and containerd must agree on it).
	runcOpts := append(append([]string(nil), rtPath[:len(rtPath)-1]...), "runc", "options", "SystemdCgroup")
	if v, ok := d.get(runcOpts...); ok && v == true {
		if _, set := d.get(at("options", "SystemdCgroup")...); !set {
			want = append(want, tomlSetting{at("options", "SystemdCgroup"), true})
		}
	}
	if o.Default {
		want = append(want, tomlSetting{append(append([]string(nil), rtPath[:3]...), "default_runtime_name"), RuntimeName})
	}
	data := d.data
	if _, exists := d.get(rtPath...); !exists {
		// A new block of tables at the end, as in configs/containerd-v2.toml.
		var b strings.Builder
		b.WriteString(containerdMarker + "\n")
		b.WriteString("[" + tomlKey(rtPath) + "]\n")
		b.WriteString("  runtime_type = " + tomlString(RuncShim) + "\n")
		for _, s := range want {
			if len(s.path) == len(rtPath)+1 && s.path[len(rtPath)] != "runtime_type" {
				b.WriteString("  " + tomlKey(s.path[len(rtPath):]) + " = " + tomlValue(s.val) + "\n")
			}
		}
		b.WriteString("\n")
		b.WriteString("  [" + tomlKey(at("options")) + "]\n")
		for _, s := range want {
			if hasPrefix(s.path, at("options")) {
				b.WriteString("    " + tomlKey(s.path[len(rtPath)+1:]) + " = " + tomlValue(s.val) + "\n")
			}
		}
		data = appendBlock(data, b.String())
		var rest []tomlSetting
		for _, s := range want {
			if !hasPrefix(s.path, rtPath) {
				rest = append(rest, s)
			}
		}
		want = rest
	}
	for _, s := range want {
		nd, err := parseTOML(data)
		if err != nil {
			return nil, fmt.Errorf("cannot add the vgpu runtime to this file's layout (%v); add it by hand, see configs/containerd-v2.toml", err)
		}
		if v, ok := nd.get(s.path...); ok && sameValue(v, s.val) {
			continue
		}
		if data, err = nd.setValue(s.path, s.val); err != nil {
			return nil, err
		}
	}
	// Check the result says what we meant.
	nd, err := parseTOML(data)
	if err != nil {
		return nil, fmt.Errorf("cannot add the vgpu runtime to this file's layout (%v); add it by hand, see configs/containerd-v2.toml", err)
	}
	for _, s := range []tomlSetting{{at("runtime_type"), RuncShim}, {at("options", "BinaryName"), o.RuntimePath}} {
		if v, _ := nd.get(s.path...); v != s.val {
			return nil, fmt.Errorf("cannot set %s in this file's layout; add it by hand, see configs/containerd-v2.toml", tomlKey(s.path))
		}
	}
	return data, nil
}

func containerdRemove(d *tomlDoc, rtPath []string) ([]byte, error) {
	data := d.data
	var spans []span
	removed := make([]bool, len(d.exprs))
	for i := 0; i < len(d.exprs); i++ {
		e := d.exprs[i]
		switch {
		case e.kind == tomlTable && hasPrefix(e.path, rtPath):
			// The table and what follows up to the next header.
			j := i + 1
			for j < len(d.exprs) && d.exprs[j].kind != tomlTable && d.exprs[j].kind != tomlArrayTable {
				j++
			}
			end := len(data)
			if j < len(d.exprs) {
				next := d.exprs[j]
				end = next.start
				if !hasPrefix(next.path, rtPath) || next.kind != tomlTable {
					// Comment lines right before a kept header belong to it.
					k := j - 1
					for k > i && d.exprs[k].kind == tomlComment {
						end = d.exprs[k].start
						k--
					}
				}
			}
			start := e.start
			// Our marker comment (and the blank line we put before it) goes too.
			if i > 0 && d.exprs[i-1].kind == tomlComment && strings.TrimSpace(d.exprs[i-1].comment) == containerdMarker && !removed[i-1] {
				start = d.exprs[i-1].start
				removed[i-1] = true
				if start >= 2 && data[start-1] == '\n' && data[start-2] == '\n' {
					start--
				}
			}
			spans = append(spans, span{start, end})
			for k := i; k < j; k++ {
				removed[k] = true
			}
			i = j - 1
		case e.kind == tomlKeyValue && !e.inArray && hasPrefix(e.path, rtPath):
			spans = append(spans, span{e.start, e.lineEnd})
			removed[i] = true
		}
	}
	out := removeSpans(data, spans)
	// default_runtime_name = "vgpu" goes back to containerd's default, runc.
	nd, err := parseTOML(out)
	if err != nil {
		return nil, fmt.Errorf("after removing the vgpu runtime: %w (please report this)", err)
	}
	drn := append(append([]string(nil), rtPath[:3]...), "default_runtime_name")
	if v, ok := nd.get(drn...); ok && v == RuntimeName {
		if out, err = nd.setValue(drn, "runc"); err != nil {
			return nil, err
		}
	}
	if _, err := parseTOML(out); err != nil {
		return nil, fmt.Errorf("after removing the vgpu runtime: %w (please report this)", err)
	}
	return out, nil
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

// ContainerdChange reads path and returns the change to make.
func ContainerdChange(path string, o ContainerdOptions) (Change, error) {
	before, err := readOptional(path)
	if err != nil {
		return Change{}, err
	}
	after, err := Containerd(before, o)
	if err != nil {
		return Change{}, fmt.Errorf("%s: %w (the file was not changed)", path, err)
	}
	if o.Remove && before == nil {
		after = nil
	}
	return Change{Path: path, Before: before, After: after, Mode: 0o644}, nil
}

// ContainerdRestart is what to tell the user after config.toml changed.
const ContainerdRestart = "restart containerd to apply it (running containers keep running): systemctl restart containerd; Kubernetes pods select it with runtimeClassName: vgpu (configs/k8s/runtimeclass.yaml)"
