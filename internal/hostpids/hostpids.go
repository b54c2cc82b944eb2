// Package hostpids writes the map from host PIDs to a container's PIDs that
// the in-container NVML stand-in uses to show a tenant its own processes
// under the PIDs it knows (NVML reports host PIDs, which a process in a PID
// namespace cannot match to its own).
//
// Contract with lib/cudahook (src/pidmap.c): the file <state>/<id>/host/pids,
// seen read-only in the container at /run/vgpu/host/pids (the directory is
// bind-mounted, so a replacement by rename is seen), holds one line per
// process, "HOSTPID PID\n", both decimal and > 0, nothing else, at most
// MaxEntries lines. The library shows exactly the host PIDs listed; a
// malformed file shows nothing. `vgpu node` keeps it current.
package hostpids

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/google/renameio/v2"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// FileName is the map's name inside the container's host directory.
const FileName = "pids"

// MaxEntries is the most lines the library reads (VGPU_PIDMAP_MAX); a longer
// file is refused whole.
const MaxEntries = 4096

// Path is the map file of container id under stateDir.
func Path(stateDir, id string) string {
	return filepath.Join(tenant.PlacesOf(stateDir, id).Host(), FileName)
}

// Format renders m (host PID -> container PID), sorted by host PID.
func Format(m map[int]int) ([]byte, error) {
	if len(m) > MaxEntries {
		return nil, fmt.Errorf("pid map: %d processes, the library reads at most %d", len(m), MaxEntries)
	}
	hosts := make([]int, 0, len(m))
	for h, c := range m {
		if h <= 0 || c <= 0 || h > 1<<31-1 || c > 1<<31-1 {
			return nil, fmt.Errorf("pid map: host pid %d -> container pid %d: both must be in 1..%d", h, c, 1<<31-1)
		}
		hosts = append(hosts, h)
	}
	sort.Ints(hosts)
	var b bytes.Buffer
	for _, h := range hosts {
		fmt.Fprintf(&b, "%d %d\n", h, m[h])
	}
	return b.Bytes(), nil
}

// Parse reads a map in the library's format, exactly as the library does
// (lib/cudahook/pidmap_test.go checks the two against each other).
func Parse(data []byte) (map[int]int, error) {
	m := map[int]int{}
	line := 1
	for len(data) > 0 {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("pid map line %d: no newline at the end", line)
		}
		h, c, ok := bytes.Cut(data[:nl], []byte(" "))
		hp, err1 := strictPID(h)
		cp, err2 := strictPID(c)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("pid map line %d: %q: want \"HOSTPID PID\"", line, data[:nl])
		}
		if line > MaxEntries {
			return nil, fmt.Errorf("pid map: more than %d lines", MaxEntries)
		}
		if _, dup := m[hp]; !dup { // the library's lookup: the first line wins
			m[hp] = cp
		}
		data = data[nl+1:]
		line++
	}
	return m, nil
}

func strictPID(b []byte) (int, error) {
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	n, err := strconv.ParseInt(string(b), 10, 32)
	if err != nil || n <= 0 {
		return 0, strconv.ErrSyntax
	}
	return int(n), nil
}

// Write replaces the map of container id atomically (a temporary file in
// the same directory, then rename): the library reads the old map or the
// new one, never a mix. The host directory is created if missing (it is
// made with the state directory; the container's mount pins that one), but
// never the container's own: a container removed since its writer listed
// it (vgpu node's round) gets an error that satisfies os.ErrNotExist, not
// a directory of a record that no one would remove again.
func Write(stateDir, id string, m map[int]int) error {
	data, err := Format(m)
	if err != nil {
		return err
	}
	dir := filepath.Dir(Path(stateDir, id))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return renameio.WriteFile(Path(stateDir, id), data, 0o644)
}
