//go:build integration

package cudahook_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/vgpu-dev/vgpu/internal/hostpids"
)

var (
	pidmapOnce sync.Once
	pidmapBin  string
	pidmapErr  error
)

func pidmapHarness(t testing.TB) string {
	t.Helper()
	pidmapOnce.Do(func() {
		pidmapBin = filepath.Join(mustTemp(), "pidmap")
		out, err := exec.Command("gcc", "-O1", "-Wall", "-Werror", "-Isrc", "-o", pidmapBin,
			"testdata/pidmap.c", "src/pidmap.c").CombinedOutput()
		if err != nil {
			pidmapErr = fmt.Errorf("gcc pidmap.c: %v\n%s", err, out)
		}
	})
	if pidmapErr != nil {
		t.Fatal(pidmapErr)
	}
	return pidmapBin
}

// The host's writer (internal/hostpids) and the library's reader
// (src/pidmap.c) agree on every input: both refuse it, or both read the
// same map (the first line of a host PID wins).
func FuzzPidmapLibraryAgreesWithHost(f *testing.F) {
	for _, s := range []string{"17 23\n4242 1\n", "", "1 2", "1  2\n", "0 1\n", "1 2\n1 3\n", "007 8\n",
		"2147483647 1\n", "2147483648 1\n", "1 2\r\n", "a 1\n", "1 2\n\n"} {
		f.Add([]byte(s))
	}
	f.Add([]byte(strings.Repeat("1 1\n", hostpids.MaxEntries+1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd := exec.Command(pidmapHarness(t))
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("harness: %v", err)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		goMap, goErr := hostpids.Parse(data)
		if lines[0] == "n=-1" {
			if goErr == nil {
				t.Fatalf("%q: the library refuses it, the host's Parse reads %v", data, goMap)
			}
			return
		}
		cMap := map[int]int{}
		for _, l := range lines[1:] {
			var h, c int
			if _, err := fmt.Sscanf(l, "%d %d", &h, &c); err != nil {
				t.Fatalf("%q: the library's line %q: %v", data, l, err)
			}
			if _, dup := cMap[h]; !dup {
				cMap[h] = c
			}
		}
		if goErr != nil {
			t.Fatalf("%q: the library reads %v, the host's Parse refuses it: %v", data, cMap, goErr)
		}
		if !reflect.DeepEqual(cMap, goMap) {
			t.Fatalf("%q: the library reads %v, the host %v", data, cMap, goMap)
		}
	})
}
