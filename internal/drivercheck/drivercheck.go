// Package drivercheck refuses, at container create time, a driver whose
// libraries export functions the vgpu stand-ins do not. The stand-ins
// (libvgpu-cuda.so, libvgpu-nvml.so) export the names listed in
// lib/cudahook/symbols when they were built; a program that looks up a name
// of a newer driver in them (dlsym on a libcuda handle, as PyTorch does)
// would fail with "undefined symbol" deep inside the container. A driver
// whose exports the stand-ins cover works without a rebuild, whatever its
// version; one they do not cover is refused with one message saying what to
// run.
//
// The comparison reads the ELF dynamic symbol tables (no driver code runs)
// and its success is remembered in a file keyed by the libraries' identity
// (path, size, modification time, inode), so that it costs one stat per
// library per container once done.
package drivercheck

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/cachefile"
)

// Pair is a driver library and the stand-in in front of it.
type Pair struct {
	Driver  string // e.g. <root>/usr/lib/x86_64-linux-gnu/libcuda.so.590.1.2
	StandIn string // e.g. /usr/lib/vgpu/libvgpu-cuda.so
}

// Exports returns the functions the shared object at path defines and exports.
func Exports(path string) (map[string]bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make(map[string]bool, len(syms))
	for _, s := range syms {
		typ, bind := elf.ST_TYPE(s.Info), elf.ST_BIND(s.Info)
		if s.Section == elf.SHN_UNDEF || (typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC) ||
			(bind != elf.STB_GLOBAL && bind != elf.STB_WEAK) || s.Name == "" {
			continue
		}
		out[s.Name] = true
	}
	return out, nil
}

// Missing returns, sorted, the functions p.Driver exports and p.StandIn does not.
func Missing(p Pair) ([]string, error) {
	drv, err := Exports(p.Driver)
	if err != nil {
		return nil, err
	}
	in, err := Exports(p.StandIn)
	if err != nil {
		return nil, err
	}
	var miss []string
	for n := range drv {
		if !in[n] {
			miss = append(miss, n)
		}
	}
	sort.Strings(miss)
	return miss, nil
}

// Check returns an error naming the first pair whose driver exports functions
// its stand-in lacks, and what to run. cacheFile (may be "") remembers a
// success for these exact files (a private record, internal/cachefile: one
// that another user could have written is ignored).
func Check(pairs []Pair, driverVersion, cacheFile string) error {
	key, keyErr := identity(pairs)
	if cacheFile != "" && keyErr == nil {
		if b, err := cachefile.Read(cacheFile); err == nil && string(b) == key {
			return nil
		}
	}
	for _, p := range pairs {
		miss, err := Missing(p)
		if err != nil {
			return fmt.Errorf("checking the driver's exports against vgpu's stand-in: %w", err)
		}
		if len(miss) > 0 {
			shown := miss
			if len(shown) > 5 {
				shown = append(append([]string(nil), miss[:5]...), "…")
			}
			return fmt.Errorf("driver %s: %s exports %d function(s) that the vgpu stand-in %s lacks (%s), which programs that look them up could not find; "+
				"build the stand-ins for this driver: lib/cudahook/update-syms.sh %s && make build && make install",
				driverVersion, filepath.Base(p.Driver), len(miss), p.StandIn, strings.Join(shown, ", "), filepath.Dir(p.Driver))
		}
	}
	if cacheFile != "" && keyErr == nil {
		_ = cachefile.Write(cacheFile, []byte(key)) // best effort: without it, the next container checks again
	}
	return nil
}

// identity is one line per file: path, size, mtime, inode (symlinks
// followed; cachefile.Identity).
func identity(pairs []Pair) (string, error) {
	var b strings.Builder
	b.WriteString("vgpu driver check 1\n")
	for _, p := range pairs {
		for _, f := range []string{p.Driver, p.StandIn} {
			id, err := cachefile.Identity(f)
			if err != nil {
				return "", err
			}
			b.WriteString(id + "\n")
		}
	}
	return b.String(), nil
}
