package setup

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/pelletier/go-toml/v2"
)

// PodmanConfFiles are the containers.conf files podman (as root) reads, in
// the order it reads them, a later one overriding an earlier: the
// distribution's, the administrator's and its drop-ins; CONTAINERS_CONF, when
// set, replaces them all.
func PodmanConfFiles() []string {
	if p := os.Getenv("CONTAINERS_CONF"); p != "" {
		return []string{p}
	}
	files := []string{"/usr/share/containers/containers.conf", "/etc/containers/containers.conf"}
	dropIns, _ := filepath.Glob("/etc/containers/containers.conf.d/*.conf")
	sort.Strings(dropIns)
	return append(files, dropIns...)
}

// PodmanHooksDirs returns the hooks directories podman reads: engine.hooks_dir
// of the last of files (nil: PodmanConfFiles) that sets it, else
// DefaultHooksDirs. A missing file is skipped, as podman skips it; one that
// is not TOML is an error that names it.
func PodmanHooksDirs(files []string) ([]string, error) {
	if files == nil {
		files = PodmanConfFiles()
	}
	var dirs []string
	for _, f := range files {
		b, err := readOptional(f)
		if err != nil {
			return nil, err
		}
		if b == nil {
			continue
		}
		var conf struct {
			Engine struct {
				HooksDir []string `toml:"hooks_dir"`
			} `toml:"engine"`
		}
		if err := toml.Unmarshal(b, &conf); err != nil {
			return nil, fmt.Errorf("%s: %v (podman reads it for engine.hooks_dir; fix it, or name the hooks directory with --hooks-dir)", f, err)
		}
		if len(conf.Engine.HooksDir) > 0 {
			dirs = conf.Engine.HooksDir
		}
	}
	if len(dirs) == 0 {
		return append([]string(nil), DefaultHooksDirs...), nil
	}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("engine.hooks_dir %q in containers.conf is not absolute; name the hooks directory with --hooks-dir", d)
		}
	}
	return dirs, nil
}
