package hostpids

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// stateWith is a state directory holding container id's directory
// (without its host directory, as a record of an older release).
func stateWith(t *testing.T, id string) string {
	t.Helper()
	state := t.TempDir()
	if err := os.Mkdir(filepath.Join(state, id), 0o700); err != nil {
		t.Fatal(err)
	}
	return state
}

func TestWriteIsReadBackAndReplaces(t *testing.T) {
	state := stateWith(t, "c1")
	if err := Write(state, "c1", map[int]int{4242: 1, 17: 23}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(Path(state, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "17 23\n4242 1\n" {
		t.Fatalf("file %q, want sorted \"HOSTPID PID\" lines", data)
	}
	if err := Write(state, "c1", map[int]int{9: 2}); err != nil {
		t.Fatal(err)
	}
	if data, err = os.ReadFile(Path(state, "c1")); err != nil {
		t.Fatal(err)
	}
	if m, err := Parse(data); err != nil || !reflect.DeepEqual(m, map[int]int{9: 2}) {
		t.Fatalf("after a second write: %v %v", m, err)
	}
	ents, err := os.ReadDir(filepath.Dir(Path(state, "c1")))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != filepath.Base(Path(state, "c1")) {
			t.Errorf("left beside the pids file: %s", e.Name())
		}
	}
}

func TestWriteRefusesBadPIDsAndChangesNothing(t *testing.T) {
	state := stateWith(t, "c1")
	if err := Write(state, "c1", map[int]int{5: 6}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[int]int{{0: 1}, {1: 0}, {-1: 3}, {1 << 31: 2}} {
		if err := Write(state, "c1", m); err == nil {
			t.Errorf("Write(%v) accepted", m)
		}
	}
	data, _ := os.ReadFile(Path(state, "c1"))
	if string(data) != "5 6\n" {
		t.Errorf("a refused write changed the file: %q", data)
	}
}

// A container removed between vgpu node's listing and its write of the
// map (a vgpu exec that ended within a round) stays removed: the write
// fails as not existing instead of making the container's directory again,
// which no one would remove.
func TestWriteNeverRecreatesARemovedContainer(t *testing.T) {
	state := t.TempDir()
	err := Write(state, "gone", map[int]int{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Write for a removed container = %v, want an error satisfying os.ErrNotExist", err)
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("the state directory holds %v after the write, want nothing", ents)
	}
}

func TestParseIsStrict(t *testing.T) {
	for _, bad := range []string{"1 2", "1  2\n", " 1 2\n", "1 2 \n", "+1 2\n", "0 2\n", "1 0\n", "1\n", "a b\n", "1 99999999999\n", "1 2\r\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// Whatever Parse accepts, Format writes back identically up to order, and
// whatever Format writes, Parse reads back.
func FuzzParse(f *testing.F) {
	f.Add([]byte("17 23\n4242 1\n"))
	f.Add([]byte(""))
	f.Add([]byte("1 2"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		out, err := Format(m)
		if err != nil {
			t.Fatalf("Format of a parsed map: %v", err)
		}
		m2, err := Parse(out)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip: %v %v -> %q -> %v", m, err, out, m2)
		}
	})
}
