package shim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultRuntimes are tried in order when the configuration names none.
var DefaultRuntimes = []string{"runc", "crun"}

// FindRuntime returns the first candidate that is an executable file: absolute
// paths as they are, bare names through PATH. It never returns this program
// itself (vgpu-runtime installed under the name runc would exec itself forever).
func FindRuntime(candidates []string) (string, error) {
	self, _ := os.Executable()
	var tried []string
	for _, c := range candidates {
		if c == "" {
			continue
		}
		tried = append(tried, c)
		p := c
		if !filepath.IsAbs(c) {
			var err error
			if p, err = lookPath(c); err != nil {
				continue
			}
			if !filepath.IsAbs(p) {
				if p, err = filepath.Abs(p); err != nil {
					continue
				}
			}
		}
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			continue
		}
		if self != "" {
			if me, err := os.Stat(self); err == nil && os.SameFile(me, st) {
				continue
			}
		}
		return p, nil
	}
	if len(tried) == 0 {
		return "", errors.New("no low-level runtime configured")
	}
	return "", fmt.Errorf("no low-level runtime found (tried %s on PATH %s): install runc or crun, or give its absolute path in config runtimes", strings.Join(tried, ", "), searchPath())
}

// defaultPath is searched for a bare runtime name when the caller gives no
// PATH: podman runs the runtime's `delete --force` with XDG_RUNTIME_DIR
// alone in its environment, and a delete that cannot find runc leaves the
// container behind.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func searchPath() string {
	if p := os.Getenv("PATH"); p != "" {
		return p
	}
	return defaultPath
}

func lookPath(name string) (string, error) {
	if os.Getenv("PATH") != "" {
		return exec.LookPath(name)
	}
	for _, dir := range filepath.SplitList(defaultPath) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
