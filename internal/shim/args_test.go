package shim

import (
	"os"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	wd, _ := os.Getwd()
	cases := []struct {
		args                 []string
		cmd, bundle, id, log string
		format, root         string
		force                bool
		unknown              []string
	}{
		{args: []string{"--root", "/r", "--log", "/l.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/p", "cid"},
			cmd: "create", bundle: "/b", id: "cid", log: "/l.json", format: "json", root: "/r"},
		{args: []string{"--root=/r", "--systemd-cgroup", "--debug", "run", "-b", "/b", "-d", "cid"},
			cmd: "run", bundle: "/b", id: "cid", format: "text", root: "/r"},
		{args: []string{"run", "cid"}, cmd: "run", bundle: wd, id: "cid", format: "text"},
		{args: []string{"create", "-bundle=rel", "cid"}, cmd: "create", bundle: wd + "/rel", id: "cid", format: "text"},
		// "create" appearing as a value is not the command.
		{args: []string{"--root", "create", "state", "create"}, cmd: "state", id: "create", root: "create", format: "text"},
		{args: []string{"--log", "/x", "delete", "--force", "cid"}, cmd: "delete", id: "cid", log: "/x", format: "text", force: true},
		// unknown global flags pass through: boolean and with value.
		{args: []string{"--new-flag", "create", "--bundle", "/b", "cid"}, cmd: "create", bundle: "/b", id: "cid", format: "text", unknown: []string{"--new-flag"}},
		{args: []string{"--new-flag", "val", "--root", "/r", "create", "cid"}, cmd: "create", bundle: wd, id: "cid", root: "/r", format: "text", unknown: []string{"--new-flag", "val"}},
		{args: []string{"--other=val", "kill", "cid", "KILL"}, cmd: "kill", id: "cid", format: "text", unknown: []string{"--other=val"}},
		{args: []string{"--version"}, format: "text"},
		{args: []string{"features"}, cmd: "features", format: "text"},
	}
	for _, c := range cases {
		orig := append([]string(nil), c.args...)
		inv, err := Parse(c.args)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if !reflect.DeepEqual(c.args, orig) || !reflect.DeepEqual(inv.Args, orig) {
			t.Errorf("%q: args changed", c.args)
		}
		if inv.Command != c.cmd || inv.Bundle != c.bundle || inv.ID != c.id || inv.Global.Log != c.log ||
			inv.Global.LogFormat != c.format || inv.Global.Root != c.root || inv.Force != c.force ||
			!reflect.DeepEqual(inv.Unknown, c.unknown) {
			t.Errorf("%q: got %+v", c.args, inv)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, args := range [][]string{
		{"create", "--bundle"},
		{"create", "--no-such-flag", "cid"},
		{"run"},
	} {
		if _, err := Parse(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("--root\x00/r\x00--log-format\x00json\x00create\x00--bundle\x00/b\x00cid")
	f.Add("--x\x00y\x00run\x00-b\x00b\x00id")
	f.Add("delete\x00--force\x00id")
	f.Fuzz(func(t *testing.T, s string) {
		args := splitNUL(s)
		orig := append([]string(nil), args...)
		inv, err := Parse(args)
		if !reflect.DeepEqual(args, orig) {
			t.Fatalf("input modified")
		}
		if err == nil && (inv.Command == "create" || inv.Command == "run") && (inv.Bundle == "" || inv.ID == "") {
			t.Fatalf("%q: create without bundle or id: %+v", args, inv)
		}
	})
}

func splitNUL(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
