package setup

import (
	"bytes"
	"errors"
	"fmt"
)

// DefaultDockerConfig is dockerd's configuration file.
const DefaultDockerConfig = "/etc/docker/daemon.json"

// DockerOptions say what to do to daemon.json.
type DockerOptions struct {
	RuntimePath string // vgpu-runtime (or a wrapper), absolute
	Default     bool   // also default-runtime = "vgpu" (Remove: a default-runtime "vgpu" always becomes "runc")
	Remove      bool
}

// emptyDaemonJSON stands in for a missing daemon.json.
var emptyDaemonJSON = []byte("{}\n")

// Docker returns daemon.json with the vgpu runtime added (or removed).
// before == nil means the file does not exist; a nil result means the file
// should not exist (Remove left nothing but an empty object).
func Docker(before []byte, o DockerOptions) ([]byte, error) {
	data := before
	if data == nil {
		if o.Remove {
			return nil, nil
		}
		data = emptyDaemonJSON
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = emptyDaemonJSON
	}
	if err := checkJSON(data); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	root, err := parseJSON(data)
	if err != nil {
		return nil, err
	}
	if root.kind != '{' {
		return nil, errors.New("not a JSON object")
	}
	if o.Remove {
		out, err := dockerRemove(data, root)
		if err != nil {
			return nil, err
		}
		if before == nil || bytes.Equal(bytes.TrimSpace(out), []byte("{}")) && !bytes.Equal(bytes.TrimSpace(before), []byte("{}")) {
			return nil, nil
		}
		return out, nil
	}
	if o.RuntimePath == "" {
		return nil, errors.New("no path for the vgpu runtime")
	}
	return dockerAdd(data, root, o)
}

func dupError(data []byte, obj *jsonValue, key string) error {
	if obj.count(key) > 1 {
		line, _ := position(data, obj.member(key).keyStart)
		return fmt.Errorf("line %d: %q is given more than once", line, key)
	}
	return nil
}

func dockerAdd(data []byte, root *jsonValue, o DockerOptions) ([]byte, error) {
	for _, k := range []string{"runtimes", "default-runtime"} {
		if err := dupError(data, root, k); err != nil {
			return nil, err
		}
	}
	var err error
	rt := root.member("runtimes")
	switch {
	case rt == nil:
		data, err = addMember(data, root, root, "runtimes", map[string]any{RuntimeName: map[string]any{"path": o.RuntimePath}})
	case rt.value.kind != '{':
		line, _ := position(data, rt.value.start)
		return nil, fmt.Errorf("line %d: \"runtimes\" is not an object", line)
	default:
		if err := dupError(data, rt.value, RuntimeName); err != nil {
			return nil, err
		}
		vg := rt.value.member(RuntimeName)
		switch {
		case vg == nil:
			data, err = addMember(data, root, rt.value, RuntimeName, map[string]any{"path": o.RuntimePath})
		case vg.value.kind != '{':
			data, err = replaceValue(data, root, rt.value, vg, map[string]any{"path": o.RuntimePath})
		default:
			if err := dupError(data, vg.value, "path"); err != nil {
				return nil, err
			}
			p := vg.value.member("path")
			switch {
			case p == nil:
				data, err = addMember(data, root, vg.value, "path", o.RuntimePath)
			case p.value.kind != '"' || p.value.str != o.RuntimePath:
				data, err = replaceValue(data, root, vg.value, p, o.RuntimePath)
			}
		}
	}
	if err != nil || !o.Default {
		return data, err
	}
	if root, err = parseJSON(data); err != nil {
		return nil, err
	}
	dr := root.member("default-runtime")
	switch {
	case dr == nil:
		return addMember(data, root, root, "default-runtime", RuntimeName)
	case dr.value.kind != '"' || dr.value.str != RuntimeName:
		return replaceValue(data, root, root, dr, RuntimeName)
	}
	return data, nil
}

// DockerDefaultRuntime is dockerd's own default runtime.
const DockerDefaultRuntime = "runc"

func dockerRemove(data []byte, root *jsonValue) ([]byte, error) {
	// default-runtime "vgpu" becomes "runc" rather than going away: on SIGHUP
	// dockerd keeps the old value of a key that is no longer in the file, and
	// a default runtime that no longer exists crashes dockerd 20.10's reload.
	if i := memberIndex(root, "default-runtime"); i >= 0 {
		if v := root.members[i].value; v.kind == '"' && v.str == RuntimeName {
			var err error
			if data, err = replaceValue(data, root, root, &root.members[i], DockerDefaultRuntime); err != nil {
				return nil, err
			}
			if root, err = parseJSON(data); err != nil {
				return nil, err
			}
		}
	}
	ri := memberIndex(root, "runtimes")
	if ri < 0 || root.members[ri].value.kind != '{' {
		return data, nil
	}
	rt := root.members[ri].value
	vi := memberIndex(rt, RuntimeName)
	if vi < 0 {
		return data, nil
	}
	data = removeMember(data, rt, vi)
	root, err := parseJSON(data)
	if err != nil {
		return nil, err
	}
	// A runtimes object left empty goes too (it was most likely ours).
	if ri = memberIndex(root, "runtimes"); ri >= 0 && len(root.members[ri].value.members) == 0 && root.members[ri].value.kind == '{' {
		data = removeMember(data, root, ri)
	}
	return data, nil
}

// DockerChange reads path and returns the change to make.
func DockerChange(path string, o DockerOptions) (Change, error) {
	before, err := readOptional(path)
	if err != nil {
		return Change{}, err
	}
	after, err := Docker(before, o)
	if err != nil {
		return Change{}, fmt.Errorf("%s: %w (the file was not changed)", path, err)
	}
	return Change{Path: path, Before: before, After: after, Mode: 0o644}, nil
}

// DockerReload is what to tell the user after daemon.json changed.
const DockerReload = "reload dockerd to apply it (running containers keep running): kill -HUP $(pidof dockerd), or systemctl reload docker"

// DockerRestart is what to tell the user after --remove took the last
// runtime, and with it the "runtimes" key (or the whole file), out of
// daemon.json: on reload dockerd keeps the old value of a key that is no
// longer in the file (docker 20.10.24, checked by test/e2e), so a SIGHUP
// leaves the vgpu runtime registered.
const DockerRestart = `dockerd keeps the vgpu runtime on reload, because daemon.json no longer has a "runtimes" key: ` +
	`restart dockerd to drop it (systemctl restart docker; running containers stop unless daemon.json sets "live-restore": true), ` +
	`or put "runtimes": {} into daemon.json and reload (kill -HUP $(pidof dockerd))`

// DockerHint is what to tell the user after applying ch (a change of
// daemon.json made by Docker with o).
func DockerHint(ch Change, o DockerOptions) string {
	if o.Remove && !hasKey(ch.After, "runtimes") {
		return DockerRestart
	}
	return DockerReload
}

// hasKey says whether the JSON object data has the top-level key.
func hasKey(data []byte, key string) bool {
	if data == nil {
		return false
	}
	root, err := parseJSON(data)
	return err == nil && root.kind == '{' && memberIndex(root, key) >= 0
}
