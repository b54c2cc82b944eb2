package setup

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/tailscale/hujson"
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
// should not exist (Remove left nothing but an empty object). The file is
// edited through hujson's syntax tree: what vgpu does not change (order,
// indentation, spacing) stays byte for byte; what it adds follows the
// indentation of its neighbours.
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
	v, err := hujson.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %s", strings.TrimPrefix(err.Error(), "hujson: "))
	}
	if !v.IsStandard() {
		return nil, errors.New("not valid JSON: it has comments or trailing commas, which dockerd refuses")
	}
	root, ok := v.Value.(*hujson.Object)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	if o.Remove {
		dockerRemove(root)
		out := v.Pack()
		if before == nil || bytes.Equal(bytes.TrimSpace(out), []byte("{}")) && !bytes.Equal(bytes.TrimSpace(before), []byte("{}")) {
			return nil, nil
		}
		return out, nil
	}
	if o.RuntimePath == "" {
		return nil, errors.New("no path for the vgpu runtime")
	}
	if err := dockerAdd(data, &v, root, o); err != nil {
		return nil, err
	}
	return v.Pack(), nil
}

func dockerAdd(data []byte, top *hujson.Value, root *hujson.Object, o DockerOptions) error {
	path := jsonObject{{"path", o.RuntimePath}}
	rt, err := member(data, root, "runtimes")
	if err != nil {
		return err
	}
	if _, err := member(data, root, "default-runtime"); err != nil {
		return err
	}
	switch {
	case rt == nil:
		setMember(top, root, 0, "runtimes", jsonObject{{RuntimeName, path}})
	default:
		rto, ok := rt.Value.Value.(*hujson.Object)
		if !ok {
			return fmt.Errorf("line %d: \"runtimes\" is not an object", lineOf(data, rt.Value.StartOffset))
		}
		vg, err := member(data, rto, RuntimeName)
		if err != nil {
			return err
		}
		vgo, ok := (*hujson.Object)(nil), false
		if vg != nil {
			vgo, ok = vg.Value.Value.(*hujson.Object)
		}
		if !ok {
			setMember(top, rto, 1, RuntimeName, path)
			break
		}
		if p, err := member(data, vgo, "path"); err != nil {
			return err
		} else if p == nil || p.Value.Value.Kind() != '"' || p.Value.Value.(hujson.Literal).String() != o.RuntimePath {
			setMember(top, vgo, 2, "path", o.RuntimePath)
		}
	}
	if o.Default {
		dr, _ := member(data, root, "default-runtime")
		if dr == nil || dr.Value.Value.Kind() != '"' || dr.Value.Value.(hujson.Literal).String() != RuntimeName {
			setMember(top, root, 0, "default-runtime", RuntimeName)
		}
	}
	return nil
}

// DockerDefaultRuntime is dockerd's own default runtime.
const DockerDefaultRuntime = "runc"

func dockerRemove(root *hujson.Object) {
	// default-runtime "vgpu" becomes "runc" rather than going away: on SIGHUP
	// dockerd keeps the old value of a key that is no longer in the file, and
	// a default runtime that no longer exists crashes dockerd 20.10's reload.
	if i := memberIndex(root, "default-runtime"); i >= 0 {
		if l, ok := root.Members[i].Value.Value.(hujson.Literal); ok && l.Kind() == '"' && l.String() == RuntimeName {
			root.Members[i].Value.Value = hujson.String(DockerDefaultRuntime)
		}
	}
	ri := memberIndex(root, "runtimes")
	if ri < 0 {
		return
	}
	rt, ok := root.Members[ri].Value.Value.(*hujson.Object)
	if !ok {
		return
	}
	if vi := memberIndex(rt, RuntimeName); vi >= 0 {
		removeMember(rt, vi)
		// A runtimes object left empty goes too (it was most likely ours).
		if len(rt.Members) == 0 {
			removeMember(root, ri)
		}
	}
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
	v, err := hujson.Parse(data)
	if err != nil {
		return false
	}
	root, ok := v.Value.(*hujson.Object)
	return ok && memberIndex(root, key) >= 0
}
